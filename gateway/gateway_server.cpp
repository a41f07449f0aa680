#include "gateway/gateway_server.hpp"

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/signal_set.hpp>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <csignal>
#include <iostream>
#include <thread>
#include <variant>
#include <vector>

#include "gateway/coro.hpp"
#include "gateway/daemon_bridge.hpp"
#include "gateway/http_front.hpp"

namespace fairsched::gateway {

void logTaskFailure(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    spdlog::error("internal error in a gateway task: {}", x.what());
  }
}

std::size_t gatewayThreads(const GatewayConfig& cfg) {
  if (cfg.threads != 0) return cfg.threads;
  const unsigned cores = std::thread::hardware_concurrency();
  return std::clamp<std::size_t>(cores, 1, kMaxDefaultThreads);
}

namespace {

std::vector<std::unique_ptr<asio::io_context>> makeContexts(std::size_t n) {
  std::vector<std::unique_ptr<asio::io_context>> out;
  for (std::size_t i = 0; i < n; ++i) out.push_back(std::make_unique<asio::io_context>(1));
  return out;
}

std::vector<asio::io_context*> pointers(const std::vector<std::unique_ptr<asio::io_context>>& v) {
  std::vector<asio::io_context*> out;
  for (const auto& io : v) out.push_back(io.get());
  return out;
}

}  // namespace

// Declared in the order they are built; a coroutine frame still pending
// when the loops stop is destroyed with its io_context, after the rest.
struct GatewayServer::Parts {
  Parts(GatewayConfig c, daemon::Env& env)
      : ios(makeContexts(gatewayThreads(c))),
        cfg(std::move(c)),
        bridge(pointers(ios), cfg, env),
        threads(makeThreads()),
        front(cfg, bridge, threads),
        signals(*ios.front()) {}

  std::vector<std::unique_ptr<GatewayThread>> makeThreads() {
    std::vector<std::unique_ptr<GatewayThread>> out;
    for (std::size_t i = 0; i < ios.size(); ++i) {
      out.push_back(std::make_unique<GatewayThread>(i, *ios[i], cfg, bridge));
    }
    return out;
  }

  bool start();
  void waitSignal();
  void reload();
  awaitable<void> drain();

  std::vector<std::unique_ptr<asio::io_context>> ios;  // the first: the bridge's and the acceptor's
  GatewayConfig cfg;  // the running config, the first thread's (the others hold copies)
  DaemonBridge bridge;
  std::vector<std::unique_ptr<GatewayThread>> threads;
  HttpFront front;
  asio::signal_set signals;
};

GatewayServer::GatewayServer(GatewayConfig cfg, daemon::Env& env)
    : parts_(std::make_unique<Parts>(std::move(cfg), env)) {}

GatewayServer::~GatewayServer() = default;

int GatewayServer::run() {
  Parts& p = *parts_;
  if (!p.start()) return 3;
  std::vector<asio::executor_work_guard<asio::io_context::executor_type>> busy;
  std::vector<std::thread> others;
  for (std::size_t i = 1; i < p.ios.size(); ++i) {
    busy.push_back(asio::make_work_guard(*p.ios[i]));
    others.emplace_back([io = p.ios[i].get()] { io->run(); });
  }
  p.ios.front()->run();
  for (const auto& io : p.ios) io->stop();
  for (std::thread& t : others) t.join();
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
            << ", " << ios.size() << (ios.size() == 1 ? " thread" : " threads") << ")" << std::endl;
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
    spawn(*ios.front(), drain());
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
  if (next.listen != cfg.listen || next.socket != cfg.socket || next.endpoint != cfg.endpoint ||
      next.threads != cfg.threads) {
    spdlog::warn(
        "reload: listen, socket, endpoint and threads change only at a restart; applying the rest");
    next.listen = cfg.listen;
    next.listen_host = cfg.listen_host;
    next.listen_port = cfg.listen_port;
    next.socket = cfg.socket;
    next.endpoint = cfg.endpoint;
    next.threads = cfg.threads;
  }
  cfg = std::move(next);
  const std::size_t keys = front.reconfigure(cfg);
  if (auto lvl = spdlog::level::from_str(cfg.log_level);
      lvl != spdlog::level::off || cfg.log_level == "off") {
    spdlog::set_level(lvl);
  }
  bridge.loadLimits();
  bridge.syncTenants();
  bridge.setUpstreams();
  spdlog::info("reloaded {}: {} keys, {} upstreams", cfg.source_path, keys, cfg.upstreams.size());
}

awaitable<void> GatewayServer::Parts::drain() {
  using Clock = std::chrono::steady_clock;  // asio's timers' clock
  front.drain();
  const auto until =
      Clock::now() + milliseconds(std::min<std::uint64_t>(cfg.request_timeout_ms, 30'000));
  SteadyTimer t(*ios.front());
  error_code ec;
  while (!bridge.idle() && Clock::now() < until) {
    t.expires_after(milliseconds(20));
    co_await t.async_wait(asio::redirect_error(use_awaitable, ec));
  }
  bridge.stop();
  for (const auto& io : ios) io->stop();
}

}  // namespace fairsched::gateway
