// The one translation unit with Boost.Beast in it (heavy to compile): the
// HTTP sessions, the upstream calls and the loops over libfairsched's
// descriptors. The decisions it acts on live in light units: key_table,
// error_reply, rate_limit_headers, sse, openai_json.
#include "gateway/gateway_server.hpp"

#include <utility>  // before asio: Boost 1.74's awaitable.hpp needs std::exchange

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include "fairsched/client.hpp"
#include "fairsched/worker.hpp"
#include "gateway/error_reply.hpp"
#include "gateway/key_table.hpp"
#include "gateway/openai_json.hpp"
#include "gateway/rate_limit_headers.hpp"
#include "gateway/sse.hpp"

namespace fairsched::gateway {

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using asio::awaitable;
using asio::use_awaitable;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr std::string_view kServerName = "fairsched-gateway";

// Beast (Boost 1.74) has its own string_view.
beast::string_view bsv(std::string_view s) {
  return {s.data(), s.size()};
}
std::string_view ssv(beast::string_view s) {
  return {s.data(), s.size()};
}

TimeNs nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

// One generation request between its submission and its end.
struct Exchange {
  explicit Exchange(const asio::any_io_executor& ex) : wake(ex) {
    wake.expires_at(asio::steady_timer::time_point::max());
  }
  void notify() { wake.cancel(); }

  std::uint64_t serial = 0;
  RequestId request_id = 0;
  std::string tenant;
  Route route = Route::kCompletions;
  GenerateRequest req;
  RateLimitHeaders::Sent sent;
  std::optional<Completion> final;  // the daemon's final completion
  std::optional<std::uint64_t> assignment;
  std::uint64_t reserved_kv = 0;
  bool aborted = false;      // the daemon sent ABORT, or the worker connection was lost
  bool caller_gone = false;  // the caller hung up
  bool worker_finished = false;
  std::uint32_t emitted = 0;
  beast::tcp_stream* upstream = nullptr;  // while the upstream call is open
  asio::steady_timer wake;                // cancelled on every change above
};

struct Conn {
  explicit Conn(tcp::socket s) : stream(std::move(s)) {}
  beast::tcp_stream stream;
  beast::flat_buffer buf;
  unsigned version = 11;
  bool keep_alive = true;
};

std::string routeName(Route r) {
  switch (r) {
    case Route::kCompletions:
      return "/v1/completions";
    case Route::kChatCompletions:
      return "/v1/chat/completions";
    case Route::kModels:
      return "/v1/models";
  }
  return "?";
}

class Gateway {
 public:
  Gateway(asio::io_context& io, GatewayConfig cfg)
      : io_(io), cfg_(std::move(cfg)), keys_(cfg_.keys), acceptor_(io), signals_(io) {
    std::random_device rd;
    instance_ = "fsgw " + std::to_string(::getpid()) + "." + std::to_string(rd()) + " ";
  }

  bool start() {
    loadDaemonConfig();
    ClientOptions co;
    co.socket_path = cfg_.socket;
    co.client_name = cfg_.name;
    co.connect_timeout = std::chrono::seconds(2);
    co.control_timeout = std::chrono::seconds(2);
    co.spin = std::chrono::nanoseconds(0);
    co.reconnect.enabled = true;
    co.reconnect.initial_delay = milliseconds(100);
    co.reconnect.max_delay = std::chrono::seconds(2);
    auto c = Client::connect(co);
    if (!c) {
      spdlog::error("cannot connect to fairschedd at {}: {}", cfg_.socket, c.error().toString());
      return false;
    }
    client_.emplace(std::move(*c));
    bool found = false;
    for (const EndpointDescription& e : client_->endpoints()) {
      if (e.name == cfg_.endpoint) {
        found = true;
        max_output_tokens_ = e.max_output_tokens;
      }
    }
    if (!found) {
      spdlog::error("fairschedd has no endpoint '{}'", cfg_.endpoint);
      return false;
    }
    if (!connectWorker(true)) return false;

    error_code ec;
    const auto addr = asio::ip::make_address(cfg_.listen_host, ec);
    if (ec) {
      spdlog::error("gateway.listen: bad address '{}': {}", cfg_.listen_host, ec.message());
      return false;
    }
    const tcp::endpoint ep(addr, cfg_.listen_port);
    acceptor_.open(ep.protocol(), ec);
    if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(ep, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      spdlog::error("cannot listen on {}: {}", cfg_.listen, ec.message());
      return false;
    }
    const tcp::endpoint bound = acceptor_.local_endpoint();
    std::cout << "fairsched-gateway: listening on " << bound.address().to_string() << ":"
              << bound.port() << " (endpoint " << cfg_.endpoint << ", upstream "
              << cfg_.upstream.url << ")" << std::endl;

    signals_.add(SIGTERM);
    signals_.add(SIGINT);
    signals_.add(SIGHUP);
    waitSignal();
    spawn(acceptLoop());
    spawn(completionLoop());
    spawn(workerLoop());
    return true;
  }

 private:
  template <typename A>
  void spawn(A&& a) {
    asio::co_spawn(io_, std::forward<A>(a), [](std::exception_ptr e) {
      if (!e) return;
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& x) {
        spdlog::error("internal error in a gateway task: {}", x.what());
      }
    });
  }

  // --- configuration ---------------------------------------------------------

  void loadDaemonConfig() {
    daemon_cfg_.reset();
    if (cfg_.daemon_config.empty()) return;
    auto r = config::loadConfigFile(cfg_.daemon_config);
    if (auto* e = std::get_if<config::ConfigError>(&r)) {
      spdlog::warn("gateway.daemon_config: {}; no x-ratelimit-limit headers", e->toString());
      return;
    }
    daemon_cfg_ = std::move(std::get<config::Config>(r));
    for (const ApiKeyConfig& k : cfg_.keys) {
      limits_.setLimits(k.tenant, effectiveLimits(*daemon_cfg_, cfg_.endpoint, k.tenant,
                                                  k.tier ? std::optional<std::string_view>(*k.tier)
                                                         : std::nullopt));
    }
  }

  void reload() {
    if (cfg_.source_path.empty()) return;
    auto r = loadGatewayConfigFile(cfg_.source_path);
    if (auto* e = std::get_if<config::ConfigError>(&r)) {
      spdlog::error("reload refused, keeping the running config: {}", e->toString());
      return;
    }
    GatewayConfig next = std::move(std::get<GatewayConfig>(r));
    if (next.listen != cfg_.listen || next.socket != cfg_.socket ||
        next.endpoint != cfg_.endpoint || next.upstream.url != cfg_.upstream.url ||
        next.upstream.max_sequences != cfg_.upstream.max_sequences ||
        next.upstream.max_tokens != cfg_.upstream.max_tokens) {
      spdlog::warn(
          "reload: listen, socket, endpoint and the upstream's url and capacity change only at a "
          "restart; applying the rest");
      next.listen = cfg_.listen;
      next.listen_host = cfg_.listen_host;
      next.listen_port = cfg_.listen_port;
      next.socket = cfg_.socket;
      next.endpoint = cfg_.endpoint;
      next.upstream.url = cfg_.upstream.url;
      next.upstream.host = cfg_.upstream.host;
      next.upstream.port = cfg_.upstream.port;
      next.upstream.prefix = cfg_.upstream.prefix;
      next.upstream.max_sequences = cfg_.upstream.max_sequences;
      next.upstream.max_tokens = cfg_.upstream.max_tokens;
    }
    cfg_ = std::move(next);
    keys_ = KeyTable(cfg_.keys);
    if (auto lvl = spdlog::level::from_str(cfg_.log_level);
        lvl != spdlog::level::off || cfg_.log_level == "off") {
      spdlog::set_level(lvl);
    }
    loadDaemonConfig();
    spdlog::info("reloaded {}: {} keys", cfg_.source_path, keys_.size());
  }

  void waitSignal() {
    signals_.async_wait([this](const error_code& ec, int sig) {
      if (ec) return;
      if (sig == SIGHUP) {
        reload();
        waitSignal();
        return;
      }
      spdlog::info("signal {}: draining", sig);
      spawn(drain());
    });
  }

  awaitable<void> drain() {
    draining_ = true;
    error_code ec;
    acceptor_.close(ec);
    const auto until =
        Clock::now() + milliseconds(std::min<std::uint64_t>(cfg_.request_timeout_ms, 30'000));
    asio::steady_timer t(io_);
    while ((!by_serial_.empty() || !by_assignment_.empty()) && Clock::now() < until) {
      t.expires_after(milliseconds(20));
      co_await t.async_wait(asio::redirect_error(use_awaitable, ec));
    }
    stopping_ = true;
    io_.stop();
  }

  // --- fairschedd: the client side ------------------------------------------

  awaitable<void> completionLoop() {
    asio::posix::stream_descriptor sd(io_, ::dup(client_->completionFd()));
    asio::steady_timer t(io_);
    std::vector<Completion> done;
    error_code ec;
    for (;;) {
      done.clear();
      client_->poll(done, 256);
      for (Completion& c : done) onCompletion(std::move(c));
      if (!done.empty()) continue;
      auto r = client_->prepareToBlock();
      if (!r) {
        t.expires_after(milliseconds(100));
        co_await t.async_wait(asio::redirect_error(use_awaitable, ec));
        continue;
      }
      if (!*r) continue;
      co_await sd.async_wait(asio::posix::descriptor_base::wait_read,
                             asio::redirect_error(use_awaitable, ec));
      if (ec && ec != asio::error::interrupted) co_return;
    }
  }

  void onCompletion(Completion c) {
    if (c.partial) return;  // counts-only, not streamed through the daemon
    const auto it = by_serial_.find(c.tag);
    if (it == by_serial_.end()) return;
    std::shared_ptr<Exchange> ex = it->second;
    by_serial_.erase(it);
    spdlog::debug("request {} completed {} ({} output tokens)", ex->serial, toString(c.status),
                  c.output_tokens);
    const bool refused = c.status == Status::kRateLimited || c.status == Status::kOverloaded ||
                         c.status == Status::kQueueFull || c.status == Status::kInvalid ||
                         c.status == Status::kUnauthorized;
    const std::uint64_t used = std::uint64_t{ex->req.prompt_tokens} + c.output_tokens;
    const std::uint64_t reserved = std::uint64_t{ex->req.prompt_tokens} + ex->req.max_tokens;
    limits_.refund(ex->tenant, ex->sent, refused, reserved > used ? reserved - used : 0);
    ex->final = std::move(c);
    ex->notify();
  }

  std::variant<Tenant, ErrorReply> tenantFor(const ApiKeyConfig& key) {
    if (auto it = tenants_.find(key.tenant); it != tenants_.end()) return it->second;
    auto t = client_->openTenant(
        key.tenant, key.tier ? std::optional<std::string_view>(*key.tier) : std::nullopt);
    if (!t) {
      spdlog::warn("cannot open tenant '{}' (key '{}'): {}", key.tenant, key.name,
                   t.error().toString());
      return errorForSubmit(t.error());
    }
    tenants_.emplace(key.tenant, *t);
    return *t;
  }

  // --- fairschedd: the worker side ------------------------------------------

  bool connectWorker(bool first) {
    WorkerOptions wo;
    wo.socket_path = cfg_.socket;
    wo.endpoint = cfg_.endpoint;
    wo.worker_name = cfg_.name;
    wo.connect_timeout = std::chrono::seconds(2);
    auto w = Worker::connect(wo);
    if (!w) {
      if (first) {
        spdlog::error("cannot attach as the worker of endpoint '{}': {}", cfg_.endpoint,
                      w.error().toString());
      }
      return false;
    }
    worker_.emplace(std::move(*w));
    stated_.reset();
    stateCapacity();
    spdlog::info("attached as worker {} of endpoint '{}' ({} sequences, {} tokens upstream)",
                 worker_->workerId(), cfg_.endpoint, cfg_.upstream.max_sequences,
                 cfg_.upstream.max_tokens);
    return true;
  }

  void stateCapacity() {
    if (!worker_) return;
    const std::uint32_t seqs =
        running_ >= cfg_.upstream.max_sequences ? 0 : cfg_.upstream.max_sequences - running_;
    const std::uint64_t kv =
        reserved_ >= cfg_.upstream.max_tokens ? 0 : cfg_.upstream.max_tokens - reserved_;
    const std::pair<std::uint32_t, std::uint64_t> now{seqs, kv};
    if (stated_ == now) return;
    spdlog::debug("capacity: {} sequences, {} tokens", seqs, kv);
    if (worker_->setCapacity(seqs, kv)) stated_ = now;
  }

  void workerLost() {
    spdlog::error("the worker connection to fairschedd was lost; reconnecting");
    worker_.reset();
    worker_fd_.reset();
    // The daemon has ended or requeued what this worker ran.
    auto running = std::move(by_assignment_);
    by_assignment_.clear();
    for (auto& [id, ex] : running) {
      ex->worker_finished = true;
      ex->aborted = true;
      if (ex->upstream != nullptr) ex->upstream->close();
      ex->notify();
    }
    running_ = 0;
    reserved_ = 0;
  }

  awaitable<void> workerLoop() {
    asio::steady_timer t(io_);
    std::vector<WorkItem> items;
    error_code ec;
    for (;;) {
      if (stopping_) co_return;
      if (!worker_) {
        if (!connectWorker(false)) {
          t.expires_after(milliseconds(500));
          co_await t.async_wait(asio::redirect_error(use_awaitable, ec));
          continue;
        }
      }
      if (!worker_fd_) {
        worker_fd_.emplace(io_, ::dup(worker_->eventFd()));
      }
      items.clear();
      worker_->poll(items, 256);
      for (WorkItem& item : items) onWorkItem(item);
      stateCapacity();
      if (!items.empty()) continue;
      auto r = worker_->prepareToBlock();
      if (!r) {
        workerLost();
        continue;
      }
      if (!*r) continue;
      co_await worker_fd_->async_wait(asio::posix::descriptor_base::wait_read,
                                      asio::redirect_error(use_awaitable, ec));
      if (worker_ && !worker_->connected()) workerLost();
    }
  }

  void onWorkItem(WorkItem& item) {
    // An upstream's stream cannot be given back and resumed: PREEMPT is
    // ignored (the daemon stops asking this worker after a second).
    if (item.kind == WorkItem::Kind::kPreempt) return;
    if (item.kind == WorkItem::Kind::kAbort) {
      const auto it = by_assignment_.find(item.id);
      if (it == by_assignment_.end()) return;  // already finished
      Exchange& ex = *it->second;
      ex.aborted = true;
      if (ex.upstream != nullptr) ex.upstream->close();
      ex.notify();
      return;
    }
    Assignment& a = item.assignment;
    running_ += 1;
    reserved_ += std::uint64_t{a.prompt_tokens} + a.max_output_tokens;
    std::shared_ptr<Exchange> ex;
    const std::string_view params(reinterpret_cast<const char*>(a.params.data()), a.params.size());
    if (params.starts_with(instance_)) {
      const std::uint64_t serial =
          std::strtoull(std::string(params.substr(instance_.size())).c_str(), nullptr, 10);
      if (auto it = by_serial_.find(serial); it != by_serial_.end()) ex = it->second;
    } else {
      spdlog::warn(
          "assignment {} was not submitted by this gateway (another gateway on endpoint '{}'?)",
          a.id, cfg_.endpoint);
    }
    if (!ex || ex->caller_gone) {
      endAssignment(a.id, std::uint64_t{a.prompt_tokens} + a.max_output_tokens,
                    ex ? Status::kCancelled : Status::kExecutorFailed, 0,
                    ex ? "" : "not a request of this gateway instance");
      return;
    }
    spdlog::debug("request {} assigned as {} (prompt {}, max output {})", ex->serial, a.id,
                  a.prompt_tokens, a.max_output_tokens);
    ex->assignment = a.id;
    ex->reserved_kv = std::uint64_t{a.prompt_tokens} + a.max_output_tokens;
    by_assignment_[a.id] = ex;
    ex->notify();
  }

  void endAssignment(std::uint64_t id, std::uint64_t kv, Status status, std::uint32_t output,
                     std::string_view message, std::uint32_t input = 0) {
    spdlog::debug("assignment {} ends {} after {} tokens", id, toString(status), output);
    running_ -= std::min<std::uint32_t>(running_, 1);
    reserved_ -= std::min(reserved_, kv);
    if (worker_) {
      if (auto r = worker_->finish(id, status, output, message, input); !r) {
        spdlog::warn("finish of assignment {}: {}", id, r.error().toString());
      }
    }
    stateCapacity();
  }

  // `input`: the prompt tokens the upstream's usage counted (0: unknown), so
  // the daemon settles the estimate the request was submitted with.
  void finishExchange(Exchange& ex, Status status, std::uint32_t output, std::string_view msg,
                      std::uint32_t input = 0) {
    if (ex.worker_finished || !ex.assignment) return;
    ex.worker_finished = true;
    by_assignment_.erase(*ex.assignment);
    endAssignment(*ex.assignment, ex.reserved_kv, status, std::min(output, ex.req.max_tokens), msg,
                  input);
  }

  void emitTokens(Exchange& ex, std::uint32_t n) {
    if (ex.worker_finished || !ex.assignment || !worker_) return;
    n = std::min(n, ex.req.max_tokens - std::min(ex.emitted, ex.req.max_tokens));
    if (n == 0) return;
    static const std::vector<std::uint32_t> kZeros(256, 0);
    while (n > 0) {
      const std::uint32_t k = std::min<std::uint32_t>(n, 256);
      if (!worker_->emit(*ex.assignment, std::span(kZeros.data(), k))) return;
      ex.emitted += k;
      n -= k;
    }
  }

  // --- HTTP: accepting, reading, answering ----------------------------------

  awaitable<void> acceptLoop() {
    for (;;) {
      error_code ec;
      tcp::socket s = co_await acceptor_.async_accept(asio::redirect_error(use_awaitable, ec));
      if (ec) {
        if (ec == asio::error::operation_aborted || !acceptor_.is_open()) co_return;
        spdlog::warn("accept: {}", ec.message());
        asio::steady_timer t(io_, milliseconds(50));  // EMFILE and friends: do not spin
        co_await t.async_wait(asio::redirect_error(use_awaitable, ec));
        continue;
      }
      s.set_option(tcp::no_delay(true), ec);
      spawn(session(std::move(s)));
    }
  }

  template <typename Body>
  void commonHeaders(http::response<Body>& res, const Conn& c) {
    res.set(http::field::server, bsv(kServerName));
    res.keep_alive(c.keep_alive);
  }

  // Parameters by value: GCC 12 mishandles some temporaries that live across
  // a co_await in the caller's expression, so callers pass named values.
  awaitable<bool> sendBody(Conn& c, int status, std::string body, std::string content_type,
                           std::vector<HttpHeader> headers) {
    http::response<http::string_body> res{static_cast<http::status>(status), c.version};
    commonHeaders(res, c);
    res.set(http::field::content_type, bsv(content_type));
    for (const HttpHeader& h : headers) res.set(h.name, h.value);
    res.body() = std::move(body);
    res.prepare_payload();
    error_code ec;
    c.stream.expires_after(milliseconds(cfg_.write_timeout_ms));
    co_await http::async_write(c.stream, res, asio::redirect_error(use_awaitable, ec));
    co_return !ec;
  }

  awaitable<bool> sendError(Conn& c, ErrorReply e, std::vector<HttpHeader> more = {}) {
    std::vector<HttpHeader> h = e.headers;
    h.insert(h.end(), more.begin(), more.end());
    std::string body = errorJson(e.message, e.type, e.param, e.code);
    co_return co_await sendBody(c, e.status, std::move(body), "application/json", std::move(h));
  }

  awaitable<void> session(tcp::socket s) {
    Conn c(std::move(s));
    *connections_ += 1;
    // Shared: a session frame still pending when the loop stops is destroyed
    // with the io_context, after the gateway itself.
    struct Guard {
      std::shared_ptr<std::uint32_t> n;
      ~Guard() { *n -= 1; }
    } guard{connections_};
    if (*connections_ > cfg_.max_connections) {
      c.keep_alive = false;
      co_await sendError(c, tooManyConnections());
      error_code ec;
      c.stream.socket().shutdown(tcp::socket::shutdown_send, ec);
      co_return;
    }
    error_code ec;
    for (;;) {
      // Keep-alive: wait for the first byte of the next request.
      if (c.buf.size() == 0) {
        c.stream.expires_after(milliseconds(cfg_.idle_timeout_ms));
        const std::size_t n = co_await c.stream.async_read_some(
            c.buf.prepare(4096), asio::redirect_error(use_awaitable, ec));
        if (ec) break;
        c.buf.commit(n);
      }
      http::request_parser<http::string_body> parser;
      parser.header_limit(cfg_.max_header_bytes);
      parser.body_limit(cfg_.max_body_bytes);
      c.stream.expires_after(milliseconds(cfg_.header_timeout_ms));
      co_await http::async_read_header(c.stream, c.buf, parser,
                                       asio::redirect_error(use_awaitable, ec));
      if (ec) {
        c.keep_alive = false;
        if (ec == http::error::header_limit) {
          co_await sendError(c, headersTooLarge());
        } else if (ec == http::error::body_limit) {
          co_await sendError(c, bodyTooLarge(cfg_.max_body_bytes));
        } else if (ec != beast::error::timeout && ec != http::error::end_of_stream &&
                   ec != asio::error::eof && ec != asio::error::connection_reset) {
          co_await sendError(c, badRequest("malformed HTTP request: " + ec.message()));
        }
        break;
      }
      auto& hdr = parser.get();
      c.version = hdr.version();
      c.keep_alive = hdr.keep_alive();
      if (parser.content_length() && *parser.content_length() > cfg_.max_body_bytes) {
        c.keep_alive = false;
        co_await sendError(c, bodyTooLarge(cfg_.max_body_bytes));
        break;
      }
      if (auto e = hdr.find(http::field::expect);
          e != hdr.end() && beast::iequals(e->value(), "100-continue")) {
        http::response<http::empty_body> cont{http::status::continue_, c.version};
        c.stream.expires_after(milliseconds(cfg_.write_timeout_ms));
        co_await http::async_write(c.stream, cont, asio::redirect_error(use_awaitable, ec));
        if (ec) break;
      }
      c.stream.expires_after(milliseconds(cfg_.body_timeout_ms));
      co_await http::async_read(c.stream, c.buf, parser, asio::redirect_error(use_awaitable, ec));
      if (ec) {
        c.keep_alive = false;
        if (ec == http::error::body_limit) {
          co_await sendError(c, bodyTooLarge(cfg_.max_body_bytes));
        } else if (ec != beast::error::timeout && ec != asio::error::eof &&
                   ec != http::error::end_of_stream && ec != asio::error::connection_reset &&
                   ec != http::error::partial_message) {
          co_await sendError(c, badRequest("malformed HTTP request: " + ec.message()));
        }
        break;
      }
      c.stream.expires_never();
      http::request<http::string_body> req = parser.release();
      const bool ok = co_await handle(c, req);
      if (!ok || !c.keep_alive) break;
    }
    c.stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  }

  // Answers one request. False when the connection must close.
  awaitable<bool> handle(Conn& c, http::request<http::string_body>& req) {
    const std::string target(req.target());
    const std::string path = target.substr(0, target.find('?'));
    const auto method = req.method();
    if (path == "/healthz") {
      co_return co_await sendBody(c, 200, "{\"status\":\"ok\"}", "application/json", {});
    }
    if (path == "/readyz") {
      const bool ready = !draining_ && worker_ && client_ && client_->connected();
      std::string why = draining_               ? "draining"
                        : !worker_              ? "not attached as the worker"
                        : !client_->connected() ? "no connection to fairschedd"
                                                : "";
      if (ready)
        co_return co_await sendBody(c, 200, "{\"status\":\"ready\"}", "application/json", {});
      co_return co_await sendError(c, schedulerUnavailable(why));
    }
    std::optional<Route> route;
    if (path == "/v1/completions") route = Route::kCompletions;
    if (path == "/v1/chat/completions") route = Route::kChatCompletions;
    if (path == "/v1/models" || path.starts_with("/v1/models/")) route = Route::kModels;
    if (!route) co_return co_await sendError(c, notFound(path));
    const bool get = method == http::verb::get;
    if ((*route == Route::kModels) != get || (!get && method != http::verb::post)) {
      co_return co_await sendError(c, methodNotAllowed(ssv(req.method_string()), path));
    }
    const ApiKeyConfig* key = nullptr;
    if (auto a = req.find(http::field::authorization); a != req.end()) {
      auto token = bearerToken(ssv(a->value()));
      if (!token) co_return co_await sendError(c, missingKey());
      key = keys_.find(*token);
      if (key == nullptr) co_return co_await sendError(c, unknownKey());
    } else {
      co_return co_await sendError(c, missingKey());
    }
    if ((key->routes & routeBit(*route)) == 0) {
      co_return co_await sendError(c, routeNotAllowed(routeName(*route)));
    }
    if (*route == Route::kModels) co_return co_await models(c, path);
    co_return co_await generate(c, req, *key, *route);
  }

  // --- the generation path ---------------------------------------------------

  void watchCaller(Conn& c, const std::shared_ptr<Exchange>& ex) {
    c.stream.socket().async_wait(tcp::socket::wait_read, [this, &c, ex](const error_code& ec) {
      if (ec || ex->caller_gone || ex->worker_finished) return;
      char b = 0;
      const ssize_t n = ::recv(c.stream.socket().native_handle(), &b, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n > 0) return;  // a pipelined request: the caller is still there
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        watchCaller(c, ex);
        return;
      }
      callerGone(*ex);
    });
  }

  void callerGone(Exchange& ex) {
    if (ex.caller_gone) return;
    ex.caller_gone = true;
    spdlog::debug("caller of request {} hung up; cancelling it", ex.serial);
    if (!ex.final && client_) (void)client_->cancel(ex.request_id);
    if (ex.upstream != nullptr) ex.upstream->close();
    ex.notify();
  }

  std::vector<HttpHeader> limitHeaders(const Exchange& ex,
                                       std::optional<std::chrono::nanoseconds> retry_after = {}) {
    if (!limits_.hasLimits(ex.tenant)) return {};
    return limits_.headers(ex.tenant, nowNs(), retry_after,
                           std::uint64_t{ex.req.prompt_tokens} + ex.req.max_tokens);
  }

  awaitable<bool> generate(Conn& c, http::request<http::string_body>& req, const ApiKeyConfig& key,
                           Route route) {
    if (draining_) co_return co_await sendError(c, draining());
    auto parsed =
        parseGenerateRequest(route, req.body(), cfg_.default_max_tokens, max_output_tokens_);
    if (auto* e = std::get_if<BodyError>(&parsed)) {
      co_return co_await sendError(c, badRequest(e->message, e->param));
    }
    auto ex = std::make_shared<Exchange>(io_.get_executor());
    ex->req = std::move(std::get<GenerateRequest>(parsed));
    ex->tenant = key.tenant;
    ex->route = route;
    req.body().clear();
    req.body().shrink_to_fit();

    auto tenant = tenantFor(key);
    if (auto* e = std::get_if<ErrorReply>(&tenant)) co_return co_await sendError(c, *e);
    ex->serial = next_serial_++;
    const std::string params = instance_ + std::to_string(ex->serial);
    SubmitRequest sr;
    sr.tenant = std::get<Tenant>(tenant);
    sr.endpoint = cfg_.endpoint;
    sr.max_output_tokens = ex->req.max_tokens;
    sr.priority = key.priority;
    // x-fairsched-timeout-ms: a shorter deadline for this request (queueing + running).
    std::uint64_t timeout_ms = cfg_.request_timeout_ms;
    if (auto h = req.find("x-fairsched-timeout-ms"); h != req.end()) {
      const std::string v(h->value());
      char* end = nullptr;
      const unsigned long long t = std::strtoull(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || t == 0) {
        ErrorReply e = badRequest("x-fairsched-timeout-ms must be a positive integer");
        co_return co_await sendError(c, std::move(e));
      }
      timeout_ms = std::min<std::uint64_t>(timeout_ms, t);
    }
    sr.timeout = milliseconds(timeout_ms);
    sr.tag = ex->serial;
    sr.params = std::as_bytes(std::span(params.data(), params.size()));
    sr.prompt_token_count = ex->req.prompt_tokens;
    auto id = client_->submit(sr);
    if (!id) {
      if (id.error().code == ErrorCode::kUnknownTenant) tenants_.erase(key.tenant);
      co_return co_await sendError(c, errorForSubmit(id.error()));
    }
    ex->request_id = *id;
    ex->sent =
        limits_.add(ex->tenant, std::uint64_t{ex->req.prompt_tokens} + ex->req.max_tokens, nowNs());
    by_serial_[ex->serial] = ex;
    watchCaller(c, ex);

    error_code ec;
    while (!ex->assignment && !ex->final && !ex->caller_gone) {
      ex->wake.expires_at(asio::steady_timer::time_point::max());
      co_await ex->wake.async_wait(asio::redirect_error(use_awaitable, ec));
    }
    if (ex->caller_gone) co_return false;
    if (!ex->assignment) {
      const Completion& f = *ex->final;
      std::vector<HttpHeader> more;
      if (f.status == Status::kRateLimited) more = limitHeaders(*ex, f.retry_after);
      c.stream.socket().cancel(ec);
      co_return co_await sendError(c, errorForCompletion(f), more);
    }
    const bool keep = co_await runUpstream(c, *ex);
    c.stream.socket().cancel(ec);  // the caller watch
    co_return keep && !ex->caller_gone;
  }

  // The reply when the upstream call ended early because of the daemon
  // (ABORT, a lost worker connection): its final completion says why.
  awaitable<ErrorReply> abortReply(Exchange& ex) {
    error_code ec;
    const auto until = Clock::now() + milliseconds(1000);
    while (!ex.final && !ex.caller_gone && Clock::now() < until) {
      ex.wake.expires_after(milliseconds(20));
      co_await ex.wake.async_wait(asio::redirect_error(use_awaitable, ec));
    }
    if (ex.final && ex.final->status != Status::kOk) co_return errorForCompletion(*ex.final);
    co_return schedulerUnavailable("the request was aborted by the scheduler");
  }

  // Calls the upstream for an assigned exchange and relays its answer.
  // Every path ends the assignment exactly once. False: close the connection.
  // The caller hung up, or the daemon ended the request, before the upstream
  // answered: the request ends CANCELLED, and a caller still there hears why.
  awaitable<bool> endBeforeResponse(Conn& c, Exchange& ex) {
    finishExchange(ex, Status::kCancelled, 0, "");
    if (ex.caller_gone) co_return false;
    ErrorReply e = co_await abortReply(ex);
    co_return co_await sendError(c, std::move(e));
  }

  awaitable<bool> runUpstream(Conn& c, Exchange& ex) {
    const UpstreamConfig& u = cfg_.upstream;
    beast::tcp_stream up(io_);
    ex.upstream = &up;
    struct Detach {
      Exchange& ex;
      ~Detach() { ex.upstream = nullptr; }
    } detach{ex};
    error_code ec;

    auto failed = [&](ErrorReply reply, Status status, std::string_view why) -> ErrorReply {
      finishExchange(ex, status, ex.emitted, why);
      return reply;
    };
    if (ex.aborted) {
      finishExchange(ex, Status::kCancelled, 0, "");
      {
        ErrorReply e = co_await abortReply(ex);
        co_return co_await sendError(c, std::move(e));
      }
    }

    // Connect.
    tcp::resolver resolver(io_);
    up.expires_after(milliseconds(u.connect_timeout_ms));
    auto addrs = co_await resolver.async_resolve(u.host, std::to_string(u.port),
                                                 asio::redirect_error(use_awaitable, ec));
    if (!ec) co_await up.async_connect(addrs, asio::redirect_error(use_awaitable, ec));
    if (ec) {
      if (ex.caller_gone || ex.aborted) co_return co_await endBeforeResponse(c, ex);
      const std::string why = "connect to " + u.host + ":" + std::to_string(u.port) + ": " +
                              (ec == beast::error::timeout ? "timed out" : ec.message());
      spdlog::warn("request {}: {}", ex.serial, why);
      ErrorReply e = ec == beast::error::timeout ? upstreamTimeout(why) : upstreamUnavailable(why);
      e = failed(std::move(e), Status::kExecutorFailed, why);
      co_return co_await sendError(c, std::move(e));
    }
    up.socket().set_option(tcp::no_delay(true), ec);

    // Send.
    const std::string path = u.prefix + routeName(ex.route);
    http::request<http::string_body> ureq{http::verb::post, path, 11};
    ureq.set(http::field::host, u.host + ":" + std::to_string(u.port));
    ureq.set(http::field::content_type, "application/json");
    ureq.set(http::field::accept, ex.req.stream ? "text/event-stream" : "application/json");
    ureq.set(http::field::user_agent, bsv(kServerName));
    ureq.keep_alive(false);
    ureq.body() = std::move(ex.req.upstream_body);
    ureq.prepare_payload();
    up.expires_after(milliseconds(u.response_timeout_ms));
    co_await http::async_write(up, ureq, asio::redirect_error(use_awaitable, ec));
    beast::flat_buffer ubuf;
    http::response_parser<http::buffer_body> p;
    p.body_limit(std::numeric_limits<std::uint64_t>::max());
    if (!ec) co_await http::async_read_header(up, ubuf, p, asio::redirect_error(use_awaitable, ec));
    if (ec) {
      if (ex.caller_gone || ex.aborted) co_return co_await endBeforeResponse(c, ex);
      const std::string why =
          ec == beast::error::timeout
              ? "no response within " + std::to_string(u.response_timeout_ms) + " ms"
              : ec.message();
      spdlog::warn("request {}: upstream: {}", ex.serial, why);
      ErrorReply e = ec == beast::error::timeout ? upstreamTimeout(why) : upstreamUnavailable(why);
      e = failed(std::move(e), Status::kExecutorFailed, why);
      co_return co_await sendError(c, std::move(e));
    }
    const int status = p.get().result_int();
    const bool sse = ex.req.stream && status == 200;

    // Relay.
    std::array<char, 16384> tmp{};
    std::string whole;  // a non-streamed body (bounded)
    std::string out;    // what one read forwards to the caller
    std::vector<std::string> events;
    SseParser parser(u.max_response_bytes);
    std::optional<Usage> usage;
    bool done = false;  // [DONE] seen
    bool header_sent = false;
    std::optional<std::string> broken;  // why the upstream's answer is unusable

    http::response<http::empty_body> res{http::status::ok, c.version};
    http::response_serializer<http::empty_body> sr{res};
    if (sse) {
      commonHeaders(res, c);
      res.set(http::field::content_type, "text/event-stream");
      res.set(http::field::cache_control, "no-cache");
      for (const HttpHeader& h : limitHeaders(ex)) res.set(h.name, h.value);
      res.chunked(true);
      c.stream.expires_after(milliseconds(cfg_.write_timeout_ms));
      co_await http::async_write_header(c.stream, sr, asio::redirect_error(use_awaitable, ec));
      if (ec) {
        callerGone(ex);
        finishExchange(ex, Status::kCancelled, 0, "");
        co_return false;
      }
      header_sent = true;
    }
    while (!p.is_done() && !done) {
      p.get().body().data = tmp.data();
      p.get().body().size = tmp.size();
      up.expires_after(milliseconds(u.idle_timeout_ms));
      // read_some: back with whatever arrived (a token), not when the buffer is full.
      co_await http::async_read_some(up, ubuf, p, asio::redirect_error(use_awaitable, ec));
      if (ec == http::error::need_buffer) ec = {};
      const std::size_t n = tmp.size() - p.get().body().size;
      if (ec) {
        if (!ex.caller_gone && !ex.aborted) {
          broken = ec == beast::error::timeout
                       ? "no data for " + std::to_string(u.idle_timeout_ms) + " ms"
                       : ec.message();
        }
        break;
      }
      if (!sse) {
        if (whole.size() + n > u.max_response_bytes) {
          broken = "response larger than " + std::to_string(u.max_response_bytes) + " bytes";
          break;
        }
        whole.append(tmp.data(), n);
        continue;
      }
      events.clear();
      if (!parser.feed(std::string_view(tmp.data(), n), events)) {
        broken = "a stream event larger than " + std::to_string(u.max_response_bytes) + " bytes";
      }
      out.clear();
      std::uint32_t pieces = 0;
      for (const std::string& data : events) {
        if (data == "[DONE]") {
          done = true;
          break;
        }
        const StreamChunk ch = parseStreamChunk(data);
        if (ch.usage) usage = ch.usage;
        if (ch.has_text) pieces += 1;
        if (ch.usage_only && !ex.req.caller_wants_usage) continue;
        out += sseEvent(data);
      }
      emitTokens(ex, pieces);
      if (!out.empty()) {
        c.stream.expires_after(milliseconds(cfg_.write_timeout_ms));
        co_await asio::async_write(c.stream, http::make_chunk(asio::buffer(out)),
                                   asio::redirect_error(use_awaitable, ec));
        if (ec) {
          callerGone(ex);
          break;
        }
      }
      if (broken) break;
    }
    up.close();

    if (ex.caller_gone) {
      finishExchange(ex, Status::kCancelled, ex.emitted, "");
      co_return false;
    }
    if (ex.aborted && !ex.worker_finished) finishExchange(ex, Status::kCancelled, ex.emitted, "");
    if (ex.aborted || ex.worker_finished) {  // the daemon ended it (abort, lost worker)
      if (!header_sent) {
        ErrorReply e = co_await abortReply(ex);
        co_return co_await sendError(c, std::move(e));
      }
      ErrorReply e = co_await abortReply(ex);
      co_await writeStreamEnd(c, ex, errorJson(e.message, e.type, e.param, e.code));
      co_return false;
    }
    if (sse) {
      if (broken || !done) {
        const std::string why = broken ? *broken : "the stream ended without [DONE]";
        spdlog::warn("request {}: upstream stream: {}", ex.serial, why);
        finishExchange(ex, Status::kExecutorFailed, ex.emitted, why);
        const ErrorReply e = upstreamBroken(why);
        co_await writeStreamEnd(c, ex, errorJson(e.message, e.type, e.param, e.code));
        co_return false;
      }
      const std::uint32_t output =
          std::max(ex.emitted, usage ? usage->completion_tokens : std::uint32_t{0});
      finishExchange(ex, Status::kOk, output, "", usage ? usage->prompt_tokens : 0);
      co_return co_await writeStreamEnd(c, ex, {});
    }
    // Not streamed (or the upstream refused the stream).
    if (broken) {
      spdlog::warn("request {}: upstream response: {}", ex.serial, *broken);
      ErrorReply e = failed(upstreamBroken(*broken), Status::kExecutorFailed, *broken);
      co_return co_await sendError(c, std::move(e));
    }
    if (status == 200) {
      const std::optional<Usage> us = parseResponseUsage(whole);
      const std::uint32_t output = us ? us->completion_tokens : 0;
      emitTokens(ex, output);
      finishExchange(ex, Status::kOk, output, "", us ? us->prompt_tokens : 0);
    } else {
      const std::string why = "upstream answered HTTP " + std::to_string(status);
      finishExchange(ex, status >= 400 && status < 500 ? Status::kInvalid : Status::kExecutorFailed,
                     ex.emitted, why);
    }
    std::string ctype = "application/json";
    if (auto it = p.get().find(http::field::content_type); it != p.get().end()) {
      ctype = std::string(it->value());
    }
    std::vector<HttpHeader> headers;
    if (status == 200) headers = limitHeaders(ex);
    co_return co_await sendBody(c, status, std::move(whole), std::move(ctype), std::move(headers));
  }

  // The end of an SSE response: an error event when `error` is set, then
  // [DONE] and the last chunk. False when the connection must close.
  awaitable<bool> writeStreamEnd(Conn& c, Exchange& ex, std::string error) {
    std::string tail;
    if (!error.empty()) tail += sseEvent(error);
    tail += kSseDone;
    error_code ec;
    c.stream.expires_after(milliseconds(cfg_.write_timeout_ms));
    co_await asio::async_write(c.stream, http::make_chunk(asio::buffer(tail)),
                               asio::redirect_error(use_awaitable, ec));
    if (!ec) {
      co_await asio::async_write(c.stream, http::make_chunk_last(),
                                 asio::redirect_error(use_awaitable, ec));
    }
    if (ec) callerGone(ex);
    co_return !ec && error.empty();
  }

  // GET /v1/models[/...]: passed through to the upstream, not scheduled.
  awaitable<bool> models(Conn& c, const std::string& path) {
    const UpstreamConfig& u = cfg_.upstream;
    beast::tcp_stream up(io_);
    tcp::resolver resolver(io_);
    error_code ec;
    up.expires_after(milliseconds(u.connect_timeout_ms));
    auto addrs = co_await resolver.async_resolve(u.host, std::to_string(u.port),
                                                 asio::redirect_error(use_awaitable, ec));
    if (!ec) co_await up.async_connect(addrs, asio::redirect_error(use_awaitable, ec));
    if (ec) co_return co_await sendError(c, upstreamUnavailable("connect: " + ec.message()));
    http::request<http::empty_body> ureq{http::verb::get, u.prefix + path, 11};
    ureq.set(http::field::host, u.host + ":" + std::to_string(u.port));
    ureq.set(http::field::user_agent, bsv(kServerName));
    ureq.keep_alive(false);
    up.expires_after(milliseconds(u.response_timeout_ms));
    co_await http::async_write(up, ureq, asio::redirect_error(use_awaitable, ec));
    beast::flat_buffer ubuf;
    http::response_parser<http::string_body> p;
    p.body_limit(u.max_response_bytes);
    if (!ec) co_await http::async_read(up, ubuf, p, asio::redirect_error(use_awaitable, ec));
    if (ec) {
      ErrorReply e = ec == beast::error::timeout
                         ? upstreamTimeout("GET " + path)
                         : upstreamUnavailable("GET " + path + ": " + ec.message());
      co_return co_await sendError(c, std::move(e));
    }
    std::string ctype = "application/json";
    if (auto it = p.get().find(http::field::content_type); it != p.get().end()) {
      ctype = std::string(it->value());
    }
    co_return co_await sendBody(c, p.get().result_int(), std::move(p.get().body()), ctype, {});
  }

  asio::io_context& io_;
  GatewayConfig cfg_;
  KeyTable keys_;
  std::optional<config::Config> daemon_cfg_;
  RateLimitHeaders limits_;
  std::optional<Client> client_;
  std::optional<Worker> worker_;
  std::optional<asio::posix::stream_descriptor> worker_fd_;
  std::unordered_map<std::string, Tenant> tenants_;
  std::unordered_map<std::uint64_t, std::shared_ptr<Exchange>> by_serial_;
  std::unordered_map<std::uint64_t, std::shared_ptr<Exchange>> by_assignment_;
  std::uint64_t next_serial_ = 1;
  std::string instance_;
  std::uint32_t max_output_tokens_ = 0;
  std::uint32_t running_ = 0;
  std::uint64_t reserved_ = 0;
  std::optional<std::pair<std::uint32_t, std::uint64_t>> stated_;
  std::shared_ptr<std::uint32_t> connections_ = std::make_shared<std::uint32_t>(0);
  bool draining_ = false;
  bool stopping_ = false;
  tcp::acceptor acceptor_;
  asio::signal_set signals_;
};

}  // namespace

int runGateway(GatewayConfig cfg) {
  asio::io_context io(1);
  auto gw = std::make_unique<Gateway>(io, std::move(cfg));
  if (!gw->start()) return 3;
  io.run();
  spdlog::info("stopped");
  return 0;
}

}  // namespace fairsched::gateway
