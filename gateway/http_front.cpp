// The HTTP front over Boost.Beast (heavy to compile: with upstream_call.cpp
// one of the two translation units that include it).
#include "gateway/http_front.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "gateway/caller.hpp"
#include "gateway/daemon_bridge.hpp"
#include "gateway/error_reply.hpp"
#include "gateway/http_head.hpp"
#include "gateway/openai_json.hpp"
#include "gateway/relay.hpp"
#include "gateway/socket_write.hpp"

// GCC 12 takes asio's coroutine frames (allocated by the frame's operator
// new through thread_info_base::allocate, freed by its operator delete) for
// a mismatched pair where it inlines the allocation: a false positive.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

namespace fairsched::gateway {

namespace {

namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Socket = asio::basic_stream_socket<tcp, Executor>;
using TcpStream = beast::basic_stream<tcp, Executor>;

constexpr std::string_view kServerName = "fairsched-gateway";

// Beast (Boost 1.74) has its own string_view.
std::string_view ssv(beast::string_view s) {
  return {s.data(), s.size()};
}

// A read error that ends the connection without an answer (the caller left
// or was too slow; in the body, also a message cut short); any other is
// answered 400.
bool quietEnd(const error_code& ec, bool in_body) {
  return ec == beast::error::timeout || ec == http::error::end_of_stream ||
         ec == asio::error::eof || ec == asio::error::connection_reset ||
         (in_body && ec == http::error::partial_message);
}

}  // namespace

awaitable<bool> Caller::sendError(ErrorReply e, std::vector<HttpHeader> more) {
  std::vector<HttpHeader> h = e.headers;
  h.insert(h.end(), more.begin(), more.end());
  std::string body = errorJson(e.message, e.type, e.param, e.code);
  co_return co_await sendBody(e.status, std::move(body), "application/json", std::move(h));
}

struct HttpFront::Acceptor {
  explicit Acceptor(asio::io_context& io) : a(io) {}
  asio::basic_socket_acceptor<tcp, Executor> a;
};

// One accepted connection: its requests one after the other, and the
// Caller the relay answers through. On its thread `t_` only.
class HttpFront::Session final : public Caller {
 public:
  Session(HttpFront& front, GatewayThread& t, Socket s)
      : f_(front), t_(t), cfg_(t.cfg), stream_(std::move(s)) {}

  awaitable<void> serve();

  awaitable<bool> sendBody(int status, std::string body, std::string content_type,
                           std::vector<HttpHeader> headers) override;
  awaitable<bool> startStream(std::vector<HttpHeader> headers, bool with_data) override;
  awaitable<bool> writeChunk(std::string data) override;
  awaitable<bool> endStream(std::string tail) override;
  void watchHangup(std::function<bool()> watching, std::function<void()> gone) override;
  void endWatch() override {
    error_code ec;
    stream_.socket().cancel(ec);
  }

 private:
  // Reads the next request into `parser`. False: the connection ends
  // (after an error reply where one is due).
  awaitable<bool> read(http::request_parser<http::string_body>& parser);
  // Feeds `parser` what is buffered, up to the end of the header
  // (`header_only`) or of the message; stops early, with no error, where
  // more bytes are needed.
  void parseBuffered(http::request_parser<http::string_body>& parser, bool header_only,
                     error_code& ec) {
    while (buf_.size() != 0 && !(header_only ? parser.is_header_done() : parser.is_done())) {
      const std::size_t used = parser.put(buf_.data(), ec);
      buf_.consume(used);
      if (ec == http::error::need_more) ec = {};
      if (ec || used == 0) return;
    }
  }
  // Answers one request. False when the connection must close.
  awaitable<bool> handle(http::request<http::string_body>& req);
  awaitable<bool> generate(http::request<http::string_body>& req, const ApiKeyConfig& key,
                           Route route);
  // The head of an answer with `status`, and the fields every answer has.
  HttpHead head(int status) {
    const std::string_view reason =
        status == 499 ? "Client Closed Request"
                      : ssv(http::obsolete_reason(static_cast<http::status>(status)));
    HttpHead h = HttpHead::response(version_, status, reason);
    h.add("Server", kServerName).keepAlive(version_, keep_alive_);
    const auto spent = std::chrono::steady_clock::now() - timing.received;
    const auto own = spent - timing.queued - timing.upstream;
    char b[32];
    const auto ms = [&b](std::chrono::nanoseconds d) {
      const double v = static_cast<double>(std::max<std::int64_t>(d.count(), 0)) / 1e6;
      const auto r = std::to_chars(b, b + sizeof b, v, std::chars_format::fixed, 3);
      return std::string_view(b, static_cast<std::size_t>(r.ptr - b));
    };
    h.add("x-fairsched-overhead-ms", ms(own));
    if (timing.submitted) h.add("x-fairsched-queue-ms", ms(timing.queued));
    return h;
  }
  milliseconds writeTimeout() const { return milliseconds(cfg_->write_timeout_ms); }

  HttpFront& f_;
  GatewayThread& t_;
  std::shared_ptr<const GatewayConfig> cfg_;  // the thread's, as the request being read began
  TcpStream stream_;
  beast::flat_buffer buf_;
  unsigned version_ = 11;
  std::string stream_header_;  // an SSE header waiting for its first data
  bool keep_alive_ = true;
  bool head_ = false;  // answering HEAD: the headers of the answer alone
};

HttpFront::HttpFront(const GatewayConfig& cfg, DaemonBridge& bridge,
                     std::vector<std::unique_ptr<GatewayThread>>& threads)
    : cfg_(cfg),
      bridge_(bridge),
      threads_(threads),
      acceptor_(std::make_unique<Acceptor>(threads.front()->io)) {}

HttpFront::~HttpFront() = default;

bool HttpFront::listen() {
  error_code ec;
  const auto addr = asio::ip::make_address(cfg_.listen_host, ec);
  if (ec) {
    spdlog::error("gateway.listen: bad address '{}': {}", cfg_.listen_host, ec.message());
    return false;
  }
  asio::basic_socket_acceptor<tcp, Executor>& a = acceptor_->a;
  const tcp::endpoint ep(addr, cfg_.listen_port);
  a.open(ep.protocol(), ec);
  if (!ec) a.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) a.bind(ep, ec);
  if (!ec) a.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    spdlog::error("cannot listen on {}: {}", cfg_.listen, ec.message());
    return false;
  }
  return true;
}

std::string HttpFront::boundAddress() const {
  const tcp::endpoint bound = acceptor_->a.local_endpoint();
  return bound.address().to_string() + ":" + std::to_string(bound.port());
}

void HttpFront::run() {
  spawn(threads_.front()->io, acceptLoop());
}

std::size_t HttpFront::reconfigure(const GatewayConfig& cfg) {
  auto next = std::make_shared<const GatewayConfig>(cfg);
  auto keys = std::make_shared<const KeyTable>(cfg.keys);
  for (const auto& t : threads_) {
    asio::post(t->io, [&t = *t, next, keys] {
      t.cfg = next;
      t.keys = keys;
    });
  }
  return keys->size();
}

std::string HttpFront::threadsJson() const {
  std::string out = "[";
  for (const auto& t : threads_) {
    if (out.size() > 1) out += ",";
    out += "{\"connections\":" + std::to_string(t->connections->load()) + "}";
  }
  return out + "]";
}

GatewayThread& HttpFront::quietest() {
  GatewayThread* best = threads_.front().get();
  for (const auto& t : threads_) {
    if (t->connections->load(std::memory_order_relaxed) <
        best->connections->load(std::memory_order_relaxed)) {
      best = t.get();
    }
  }
  return *best;
}

void HttpFront::drain() {
  draining_ = true;
  error_code ec;
  acceptor_->a.close(ec);
}

awaitable<void> HttpFront::acceptLoop() {
  asio::basic_socket_acceptor<tcp, Executor>& a = acceptor_->a;
  for (;;) {
    error_code ec;
    GatewayThread& to = quietest();
    Socket s =
        co_await a.async_accept(to.io.get_executor(), asio::redirect_error(use_awaitable, ec));
    if (ec) {
      if (ec == asio::error::operation_aborted || !a.is_open()) co_return;
      spdlog::warn("accept: {}", ec.message());
      SteadyTimer t(threads_.front()->io, milliseconds(50));  // EMFILE: do not spin
      co_await t.async_wait(asio::redirect_error(use_awaitable, ec));
      continue;
    }
    s.set_option(tcp::no_delay(true), ec);
    // Bounded, so a caller that stops reading is noticed within
    // write_timeout_ms instead of after megabytes of autotuned buffer.
    s.set_option(asio::socket_base::send_buffer_size(static_cast<int>(cfg_.send_buffer_bytes)), ec);
    // Counted at once, so the next accept sees it.
    to.connections->fetch_add(1, std::memory_order_relaxed);
    spawn(to.io, [](HttpFront& f, GatewayThread& t, Socket sock) -> awaitable<void> {
      Session session(f, t, std::move(sock));
      co_await session.serve();
    }(*this, to, std::move(s)));
  }
}

awaitable<void> HttpFront::Session::serve() {
  const std::uint32_t open = f_.connections_->fetch_add(1) + 1;
  struct Guard {
    std::shared_ptr<std::atomic<std::uint32_t>> all;
    std::shared_ptr<std::atomic<std::uint32_t>> here;
    ~Guard() {
      all->fetch_sub(1);
      here->fetch_sub(1, std::memory_order_relaxed);
    }
  } guard{f_.connections_, t_.connections};
  error_code ec;
  if (open > cfg_->max_connections) {
    keep_alive_ = false;
    co_await sendError(tooManyConnections());
    stream_.socket().shutdown(Socket::shutdown_send, ec);
    co_return;
  }
  for (;;) {
    http::request_parser<http::string_body> parser;
    cfg_ = t_.cfg;  // a reload applies from the next request on
    if (!co_await read(parser)) break;
    stream_.expires_never();
    http::request<http::string_body> req = parser.release();
    timing = Timing{std::chrono::steady_clock::now()};
    const bool ok = co_await handle(req);
    if (!ok || !keep_alive_) break;
  }
  stream_.socket().shutdown(Socket::shutdown_send, ec);
}

awaitable<bool> HttpFront::Session::read(http::request_parser<http::string_body>& parser) {
  const GatewayConfig& cfg = *cfg_;
  error_code ec;
  // Keep-alive: wait for the first byte of the next request.
  if (buf_.size() == 0) {
    stream_.expires_after(milliseconds(cfg.idle_timeout_ms));
    const std::size_t n = co_await stream_.async_read_some(buf_.prepare(4096),
                                                           asio::redirect_error(use_awaitable, ec));
    if (ec) co_return false;
    buf_.commit(n);
  }
  parser.header_limit(cfg.max_header_bytes);
  parser.body_limit(cfg.max_body_bytes);
  // What came already is parsed here; the loop is waited on only for the
  // rest (nearly always the whole request came with its first byte).
  parseBuffered(parser, true, ec);
  if (!ec && !parser.is_header_done()) {
    stream_.expires_after(milliseconds(cfg.header_timeout_ms));
    co_await http::async_read_header(stream_, buf_, parser,
                                     asio::redirect_error(use_awaitable, ec));
  }
  bool in_body = false;
  if (!ec) {
    auto& hdr = parser.get();
    version_ = hdr.version();
    keep_alive_ = hdr.keep_alive();
    if (parser.content_length() && *parser.content_length() > cfg.max_body_bytes) {
      ec = http::error::body_limit;
    } else if (auto e = hdr.find(http::field::expect);
               e != hdr.end() && beast::iequals(e->value(), "100-continue")) {
      const std::string cont = std::move(HttpHead::response(version_, 100, "Continue")).finish();
      ec = co_await writeBuffers(stream_, std::array{bytes(cont)}, writeTimeout());
      if (ec) co_return false;
    }
    if (!ec) {
      in_body = true;
      parseBuffered(parser, false, ec);
    }
    if (!ec && !parser.is_done()) {
      stream_.expires_after(milliseconds(cfg.body_timeout_ms));
      co_await http::async_read(stream_, buf_, parser, asio::redirect_error(use_awaitable, ec));
    }
  }
  if (!ec) co_return true;
  keep_alive_ = false;
  if (ec == http::error::header_limit) {
    co_await sendError(headersTooLarge());
  } else if (ec == http::error::body_limit) {
    co_await sendError(bodyTooLarge(cfg.max_body_bytes));
  } else if (!quietEnd(ec, in_body)) {
    co_await sendError(badRequest("malformed HTTP request: " + ec.message()));
  }
  co_return false;
}

awaitable<bool> HttpFront::Session::handle(http::request<http::string_body>& req) {
  const std::string target(req.target());
  const std::string path = target.substr(0, target.find('?'));
  const auto method = req.method();
  if ((path == "/healthz" || path == "/readyz") && method != http::verb::get &&
      method != http::verb::head) {
    co_return co_await sendError(methodNotAllowed(ssv(req.method_string()), path));
  }
  head_ = method == http::verb::head;
  if (path == "/healthz") {
    co_return co_await sendBody(200, "{\"status\":\"ok\"}", "application/json", {});
  }
  if (path == "/readyz") {
    const std::string_view why = f_.draining_ ? "draining" : f_.bridge_.unready();
    if (why.empty()) {
      std::string body = "{\"status\":\"ready\",\"upstreams\":" + f_.bridge_.upstreamsJson() +
                         ",\"threads\":" + f_.threadsJson() + "}";
      co_return co_await sendBody(200, std::move(body), "application/json", {});
    }
    // Unready: the error, with each upstream's state beside it.
    const ErrorReply e = schedulerUnavailable(why);
    std::string body = errorJson(e.message, e.type, e.param, e.code);
    body.pop_back();
    body += ",\"upstreams\":" + f_.bridge_.upstreamsJson() + "}";
    co_return co_await sendBody(e.status, std::move(body), "application/json", e.headers);
  }
  std::optional<Route> route;
  if (path == "/v1/completions") route = Route::kCompletions;
  if (path == "/v1/chat/completions") route = Route::kChatCompletions;
  if (path == "/v1/embeddings") route = Route::kEmbeddings;
  if (path == "/v1/models" || path.starts_with("/v1/models/")) route = Route::kModels;
  if (!route) co_return co_await sendError(notFound(path));
  const bool get = method == http::verb::get;
  if ((*route == Route::kModels) != get || (!get && method != http::verb::post)) {
    co_return co_await sendError(methodNotAllowed(ssv(req.method_string()), path));
  }
  const ApiKeyConfig* key = nullptr;
  const std::shared_ptr<const KeyTable> keys = t_.keys;  // `key` points into it
  if (auto a = req.find(http::field::authorization); a != req.end()) {
    auto token = bearerToken(ssv(a->value()));
    if (!token) co_return co_await sendError(missingKey());
    key = keys->find(*token);
    if (key == nullptr) co_return co_await sendError(unknownKey());
  } else {
    co_return co_await sendError(missingKey());
  }
  if ((key->routes & routeBit(*route)) == 0) {
    co_return co_await sendError(routeNotAllowed(routePath(*route)));
  }
  if (*route == Route::kModels) co_return co_await t_.relay.models(*this, path);
  co_return co_await generate(req, *key, *route);
}

awaitable<bool> HttpFront::Session::generate(http::request<http::string_body>& req,
                                             const ApiKeyConfig& key, Route route) {
  if (f_.draining_) co_return co_await sendError(draining());
  PrefixOptions prefix;
  prefix.block_bytes = cfg_->prefix_block_bytes;
  auto parsed = parseGenerateRequest(route, req.body(), cfg_->default_max_tokens,
                                     f_.bridge_.maxOutputTokens(), prefix);
  if (auto* e = std::get_if<BodyError>(&parsed)) {
    co_return co_await sendError(badRequest(e->message, e->param));
  }
  req.body().clear();
  req.body().shrink_to_fit();
  // x-fairsched-timeout-ms: a shorter deadline for this request (queueing + running).
  std::uint64_t timeout_ms = cfg_->request_timeout_ms;
  if (auto h = req.find("x-fairsched-timeout-ms"); h != req.end()) {
    const std::string v(h->value());
    char* end = nullptr;
    const unsigned long long t = std::strtoull(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || t == 0) {
      ErrorReply e = badRequest("x-fairsched-timeout-ms must be a positive integer");
      co_return co_await sendError(std::move(e));
    }
    timeout_ms = std::min<std::uint64_t>(timeout_ms, t);
  }
  GenerateRequest g = std::move(std::get<GenerateRequest>(parsed));
  co_return co_await t_.relay.generate(*this, key, route, std::move(g), timeout_ms);
}

awaitable<bool> HttpFront::Session::sendBody(int status, std::string body, std::string content_type,
                                             std::vector<HttpHeader> headers) {
  stream_header_.clear();  // a stream's header never goes out before another answer
  HttpHead h = head(status);
  h.add("Content-Type", content_type);
  for (const HttpHeader& f : headers) h.set(f.name, f.value);
  h.set("Content-Length", std::to_string(body.size()));
  const std::string text = std::move(h).finish();
  if (std::exchange(head_, false)) body.clear();  // HEAD: the head alone
  const error_code ec =
      co_await writeBuffers(stream_, std::array{bytes(text), bytes(body)}, writeTimeout());
  co_return !ec;
}

awaitable<bool> HttpFront::Session::startStream(std::vector<HttpHeader> headers, bool with_data) {
  HttpHead h = head(200);
  h.add("Content-Type", "text/event-stream").add("Cache-Control", "no-cache");
  for (const HttpHeader& f : headers) h.set(f.name, f.value);
  h.set("Transfer-Encoding", "chunked");
  stream_header_ = std::move(h).finish();
  if (with_data) co_return true;  // written with the first data
  co_return co_await writeChunk({});
}

awaitable<bool> HttpFront::Session::writeChunk(std::string data) {
  const std::string header = std::exchange(stream_header_, {});  // "" once it went out
  // An empty chunk would end the body: the header alone.
  const std::string size = data.empty() ? std::string() : chunkSizeLine(data.size());
  const std::string_view end = data.empty() ? std::string_view() : kChunkEnd;
  const error_code ec = co_await writeBuffers(
      stream_, std::array{bytes(header), bytes(size), bytes(data), bytes(end)}, writeTimeout());
  co_return !ec;
}

awaitable<bool> HttpFront::Session::endStream(std::string tail) {
  // The tail's chunk and the last chunk in one write (with the header when
  // it waited for data).
  const std::string header = std::exchange(stream_header_, {});
  const std::string size = tail.empty() ? std::string() : chunkSizeLine(tail.size());
  const std::string_view end = tail.empty() ? std::string_view() : kChunkEnd;
  const error_code ec = co_await writeBuffers(
      stream_, std::array{bytes(header), bytes(size), bytes(tail), bytes(end), bytes(kLastChunk)},
      writeTimeout());
  co_return !ec;
}

void HttpFront::Session::watchHangup(std::function<bool()> watching, std::function<void()> gone) {
  stream_.socket().async_wait(
      Socket::wait_read,
      [this, watching = std::move(watching), gone = std::move(gone)](const error_code& ec) mutable {
        if (ec || !watching()) return;
        char b = 0;
        const ssize_t n = ::recv(stream_.socket().native_handle(), &b, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n > 0) return;  // a pipelined request: the caller is still there
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
          watchHangup(std::move(watching), std::move(gone));
          return;
        }
        gone();
      });
}

}  // namespace fairsched::gateway
