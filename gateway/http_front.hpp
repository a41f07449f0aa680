// The gateway's HTTP front: accepts connections on gateway.listen (at most
// max_connections at once; past it a 503 and close), reads requests within
// their bounds (max_header_bytes, max_body_bytes; header, body and
// keep-alive idle timeouts), answers /healthz and /readyz itself, routes
// POST /v1/completions, POST /v1/chat/completions and GET /v1/models[/...],
// authenticates the API key (Authorization: Bearer) against the key table
// and the key's routes, parses the generation body, and hands the request
// to the relay. Keep-alive and pipelining per HTTP/1.1.
//
// State: the acceptor, the key table (replaced on reload), the draining
// flag and the count of open connections. Loop thread only. Boost.Beast
// lives in http_front.cpp; this header keeps it out of its users.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "gateway/coro.hpp"
#include "gateway/gateway_config.hpp"
#include "gateway/key_table.hpp"

namespace fairsched::gateway {

class DaemonBridge;
class Relay;

class HttpFront {
 public:
  // `cfg` (the running config), `bridge` and `relay` outlive the front.
  HttpFront(asio::io_context& io, const GatewayConfig& cfg, DaemonBridge& bridge, Relay& relay);
  ~HttpFront();

  // Binds and listens on cfg.listen. False (logged) when it cannot.
  bool listen();
  // The address and port it listens on ("127.0.0.1:8080").
  std::string boundAddress() const;
  // Spawns the accept loop.
  void run();
  // Stops accepting; new generation requests get 503 draining.
  void drain();

  void setKeys(KeyTable keys) { keys_ = std::move(keys); }
  std::size_t keyCount() const { return keys_.size(); }

 private:
  class Session;
  awaitable<void> acceptLoop();

  asio::io_context& io_;
  const GatewayConfig& cfg_;
  DaemonBridge& bridge_;
  Relay& relay_;
  KeyTable keys_;
  bool draining_ = false;
  // Shared: a session frame still pending when the loop stops is destroyed
  // with the io_context, after the front itself.
  std::shared_ptr<std::uint32_t> connections_ = std::make_shared<std::uint32_t>(0);
  struct Acceptor;
  std::unique_ptr<Acceptor> acceptor_;
};

}  // namespace fairsched::gateway
