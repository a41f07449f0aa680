// fairsched-gateway's server: HTTP in front, libfairsched behind.
//
// Every generation request is authenticated by its API key, submitted to
// fairschedd as a counts-only request of the key's tenant (the gateway keeps
// the body; the request's params name it), and forwarded to the upstream
// only when the daemon assigns it to this gateway, which is at the same time
// the worker of its endpoint and states the upstream's free sequences and
// tokens as its capacity. The upstream's response streams straight back to
// the caller; the daemon gets counts (one token per streamed text chunk,
// settled by the upstream's usage at the end).
//
// The parts, each with its own state: the HTTP front (http_front.hpp:
// accept, routing, auth), the daemon bridge (daemon_bridge.hpp: the client
// and worker connections to fairschedd), the relay (relay.hpp: the
// generation path, SSE or whole responses) and the upstream call
// (upstream_call.hpp). The server wires them, and owns the config, the
// signals (reload, drain) and the io_context.
//
// Threads: gateway.threads io_contexts, each on its own thread (default:
// one per core, at most kMaxDefaultThreads). A caller's connection, its
// requests and their upstream calls stay on the thread that accepted it;
// the first thread also runs the acceptor, the signals and the daemon
// bridge's loops, and the bridge (one client connection, one worker
// connection per upstream) is shared by all under its lock. Nothing blocks
// a thread except the control round trips of libfairsched (opening a tenant
// the first time, attaching the worker), which are bounded.
#pragma once

#include <cstddef>
#include <memory>

#include "daemon/env.hpp"
#include "gateway/gateway_config.hpp"

namespace fairsched::gateway {

class GatewayServer {
 public:
  // `env`: the clock of the x-ratelimit-* bookkeeping; it outlives the server.
  explicit GatewayServer(GatewayConfig cfg, daemon::Env& env = daemon::Env::real());
  ~GatewayServer();
  GatewayServer(const GatewayServer&) = delete;
  GatewayServer& operator=(const GatewayServer&) = delete;

  // Serves until SIGTERM or SIGINT (then drains: stops accepting and lets
  // the requests in flight finish, bounded); SIGHUP reloads the keys, the
  // log level and the advertised limits from cfg.source_path. Prints
  // "listening on HOST:PORT" once it accepts. Returns the exit status:
  // 0 stopped cleanly, 3 could not serve.
  int run();

 private:
  struct Parts;
  std::unique_ptr<Parts> parts_;
};

// gateway.threads, or the default when it is 0: the cores, at most this many.
inline constexpr std::size_t kMaxDefaultThreads = 8;
std::size_t gatewayThreads(const GatewayConfig& cfg);

// GatewayServer(cfg).run().
int runGateway(GatewayConfig cfg);

}  // namespace fairsched::gateway
