#include "gateway/gateway_server.hpp"

#include <boost/asio/signal_set.hpp>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <csignal>
#include <iostream>
#include <variant>

#include "gateway/coro.hpp"
#include "gateway/daemon_bridge.hpp"
#include "gateway/http_front.hpp"
#include "gateway/relay.hpp"

namespace fairsched::gateway {

void logTaskFailure(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    spdlog::error("internal error in a gateway task: {}", x.what());
  }
}

// Declared in the order they are built; a coroutine frame still pending
// when the loop stops is destroyed with `io`, after the rest.
struct GatewayServer::Parts {
  Parts(GatewayConfig c, daemon::Env& env)
      : cfg(std::move(c)),
        bridge(io, cfg, env),
        relay(cfg, bridge),
        front(io, cfg, bridge, relay),
        signals(io) {}

  bool start();
  void waitSignal();
  void reload();
  awaitable<void> drain();

  asio::io_context io{1};
  GatewayConfig cfg;
  DaemonBridge bridge;
  Relay relay;
  HttpFront front;
  asio::signal_set signals;
};

GatewayServer::GatewayServer(GatewayConfig cfg, daemon::Env& env)
    : parts_(std::make_unique<Parts>(std::move(cfg), env)) {}

GatewayServer::~GatewayServer() = default;

int GatewayServer::run() {
  if (!parts_->start()) return 3;
  parts_->io.run();
  spdlog::info("stopped");
  return 0;
}

int runGateway(GatewayConfig cfg) {
  return GatewayServer(std::move(cfg)).run();
}

bool GatewayServer::Parts::start() {
  bridge.loadLimits();
  if (!bridge.start() || !front.listen()) return false;
  std::cout << "fairsched-gateway: listening on " << front.boundAddress() << " (endpoint "
            << cfg.endpoint << ", upstream " << cfg.upstreams[0].url
            << (cfg.upstreams.size() > 1
                    ? " and " + std::to_string(cfg.upstreams.size() - 1) + " more"
                    : std::string())
            << ")" << std::endl;
  signals.add(SIGTERM);
  signals.add(SIGINT);
  signals.add(SIGHUP);
  waitSignal();
  front.run();
  bridge.run();
  return true;
}

void GatewayServer::Parts::waitSignal() {
  signals.async_wait([this](const error_code& ec, int sig) {
    if (ec) return;
    if (sig == SIGHUP) {
      reload();
      waitSignal();
      return;
    }
    spdlog::info("signal {}: draining", sig);
    spawn(io, drain());
  });
}

void GatewayServer::Parts::reload() {
  if (cfg.source_path.empty()) return;
  auto r = loadGatewayConfigFile(cfg.source_path);
  if (auto* e = r.errorOrNull()) {
    spdlog::error("reload refused, keeping the running config: {}", e->toString());
    return;
  }
  GatewayConfig next = std::move(r).value();
  if (next.listen != cfg.listen || next.socket != cfg.socket || next.endpoint != cfg.endpoint) {
    spdlog::warn("reload: listen, socket and endpoint change only at a restart; applying the rest");
    next.listen = cfg.listen;
    next.listen_host = cfg.listen_host;
    next.listen_port = cfg.listen_port;
    next.socket = cfg.socket;
    next.endpoint = cfg.endpoint;
  }
  cfg = std::move(next);
  front.setKeys(KeyTable(cfg.keys));
  if (auto lvl = spdlog::level::from_str(cfg.log_level);
      lvl != spdlog::level::off || cfg.log_level == "off") {
    spdlog::set_level(lvl);
  }
  bridge.loadLimits();
  bridge.syncTenants();
  bridge.setUpstreams();
  spdlog::info("reloaded {}: {} keys, {} upstreams", cfg.source_path, front.keyCount(),
               cfg.upstreams.size());
}

awaitable<void> GatewayServer::Parts::drain() {
  using Clock = std::chrono::steady_clock;  // asio's timers' clock
  front.drain();
  const auto until =
      Clock::now() + milliseconds(std::min<std::uint64_t>(cfg.request_timeout_ms, 30'000));
  asio::steady_timer t(io);
  error_code ec;
  while (!bridge.idle() && Clock::now() < until) {
    t.expires_after(milliseconds(20));
    co_await t.async_wait(asio::redirect_error(use_awaitable, ec));
  }
  bridge.stop();
  io.stop();
}

}  // namespace fairsched::gateway
