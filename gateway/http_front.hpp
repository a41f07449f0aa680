// The gateway's HTTP front: accepts connections on gateway.listen (at most
// max_connections at once; past it a 503 and close), reads requests within
// their bounds (max_header_bytes, max_body_bytes; header, body and
// keep-alive idle timeouts), answers /healthz and /readyz itself, routes
// POST /v1/completions, POST /v1/chat/completions and GET /v1/models[/...],
// authenticates the API key (Authorization: Bearer) against the key table
// and the key's routes, parses the generation body, and hands the request
// to the relay. Keep-alive and pipelining per HTTP/1.1.
//
// Threads: the acceptor runs on the first gateway thread and hands each
// connection to the thread serving the fewest; a connection stays on its
// thread, whose copy of the config and key table it reads (a reload posts
// new ones to every thread). Boost.Beast lives in http_front.cpp; this
// header keeps it out of its users.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gateway/coro.hpp"
#include "gateway/gateway_config.hpp"
#include "gateway/key_table.hpp"
#include "gateway/relay.hpp"

namespace fairsched::gateway {

class DaemonBridge;

// One of the gateway's threads as its connections see it: its io_context,
// the running config and key table as it holds them (replaced by a post on
// reload; a request keeps the ones it started with), its relay, and the
// connections it serves.
struct GatewayThread {
  GatewayThread(std::size_t i, asio::io_context& context, const GatewayConfig& c,
                DaemonBridge& bridge)
      : index(i),
        io(context),
        cfg(std::make_shared<const GatewayConfig>(c)),
        keys(std::make_shared<const KeyTable>(c.keys)),
        relay(bridge, i) {}

  std::size_t index;
  asio::io_context& io;
  std::shared_ptr<const GatewayConfig> cfg;
  std::shared_ptr<const KeyTable> keys;
  Relay relay;
  // Shared with its sessions, whose frames may outlive the thread's parts.
  std::shared_ptr<std::atomic<std::uint32_t>> connections =
      std::make_shared<std::atomic<std::uint32_t>>(0);
};

class HttpFront {
 public:
  // `cfg` (the running config, read on the first thread), `bridge` and
  // `threads` (the first runs the acceptor) outlive the front.
  HttpFront(const GatewayConfig& cfg, DaemonBridge& bridge,
            std::vector<std::unique_ptr<GatewayThread>>& threads);
  ~HttpFront();

  // Binds and listens on cfg.listen. False (logged) when it cannot.
  bool listen();
  // The address and port it listens on ("127.0.0.1:8080").
  std::string boundAddress() const;
  // Spawns the accept loop.
  void run();
  // Stops accepting; new generation requests get 503 draining.
  void drain();

  // A reload: every thread takes `cfg` and its keys for the requests that
  // start after it. The keys in it.
  std::size_t reconfigure(const GatewayConfig& cfg);
  // Each thread for /readyz: [{"connections":N}, ...].
  std::string threadsJson() const;

 private:
  class Session;
  awaitable<void> acceptLoop();
  // The thread serving the fewest connections (the first on a tie).
  GatewayThread& quietest();

  const GatewayConfig& cfg_;
  DaemonBridge& bridge_;
  std::vector<std::unique_ptr<GatewayThread>>& threads_;
  std::atomic<bool> draining_{false};
  // Shared: a session frame still pending when the loop stops is destroyed
  // with the io_context, after the front itself.
  std::shared_ptr<std::atomic<std::uint32_t>> connections_ =
      std::make_shared<std::atomic<std::uint32_t>>(0);
  struct Acceptor;
  std::unique_ptr<Acceptor> acceptor_;
};

}  // namespace fairsched::gateway
