// The upstream call and its connection pool over Boost.Beast (heavy to
// compile: with http_front.cpp one of the two translation units that
// include it).
#include "gateway/upstream_call.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <sys/socket.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <limits>
#include <vector>

#include "gateway/http_head.hpp"
#include "gateway/socket_write.hpp"

namespace fairsched::gateway {

namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

ErrorReply replyFor(const UpstreamError& e) {
  if (e.timeout) return upstreamTimeout(e.why);
  return e.bad_response ? upstreamBroken(e.why) : upstreamUnavailable(e.why);
}

namespace {

// One connection to the upstream and the bytes read from it past a parse.
struct Conn {
  // Room for a whole streamed answer per read: beast reads no more than the
  // buffer's free capacity (512 bytes at first), a system call and a relayed
  // chunk for every event or two.
  explicit Conn(asio::io_context& io) : stream(io) { buf.reserve(kReadBytes); }
  static constexpr std::size_t kReadBytes = 16384;
  // Where a call's body reads land: allocated once per connection, not in
  // every call's coroutine frame.
  std::array<char, kReadBytes> scratch{};
  beast::basic_stream<tcp, Executor> stream;
  beast::flat_buffer buf;
  Clock::time_point idle_since{};
};

// The upstream closed it while it was idle, or sent bytes nobody asked for.
bool stale(Conn& c) {
  char b = 0;
  const ssize_t n = ::recv(c.stream.socket().native_handle(), &b, 1, MSG_PEEK | MSG_DONTWAIT);
  return !(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
}

// Errors of a request on a reused connection that mean the upstream closed
// it as the request went out (no byte of an answer came): worth one more try.
bool closedUnderUs(const error_code& ec) {
  return ec == http::error::end_of_stream || ec == asio::error::eof ||
         ec == asio::error::connection_reset || ec == asio::error::broken_pipe;
}

constexpr std::size_t kDrainLimit = 64 * 1024;
constexpr milliseconds kTrustedIdle{1000};

}  // namespace

struct UpstreamPool::Impl {
  Impl(asio::io_context& i, UpstreamConfig cfg) : io(i), u(std::move(cfg)) {}

  // A live pooled connection, newest first; none: nullptr. One idle for
  // less than kTrustedIdle is taken without a look: an upstream closes a
  // connection it keeps alive after seconds of idleness, and one it closed
  // sooner (it went down) fails as the request goes out, which
  // request() meets with a new connection, and a refused one with the
  // call handed to another replica.
  std::unique_ptr<Conn> take() {
    const auto now = Clock::now();
    while (!idle.empty()) {
      std::unique_ptr<Conn> c = std::move(idle.back());
      idle.pop_back();
      const auto idled = now - c->idle_since;
      if (idled < milliseconds(u.pool_idle_ms) && (idled < kTrustedIdle || !stale(*c))) {
        ++reused;
        return c;
      }
    }
    return nullptr;
  }
  void put(std::unique_ptr<Conn> c) {
    if (!open || u.pool_connections == 0 || c->buf.size() != 0) return;
    c->stream.expires_never();
    c->idle_since = Clock::now();
    const auto too_old = c->idle_since - milliseconds(u.pool_idle_ms);
    std::erase_if(idle, [&](const std::unique_ptr<Conn>& x) { return x->idle_since <= too_old; });
    if (idle.size() >= u.pool_connections) idle.erase(idle.begin());  // the oldest goes
    idle.push_back(std::move(c));
  }

  asio::io_context& io;
  UpstreamConfig u;
  std::vector<std::unique_ptr<Conn>> idle;  // oldest first
  std::uint64_t opened = 0;
  std::uint64_t reused = 0;
  bool open = true;  // false once the pool is gone: calls ending later close
};

UpstreamPool::UpstreamPool(asio::io_context& io, UpstreamConfig u)
    : impl_(std::make_shared<Impl>(io, std::move(u))) {}

UpstreamPool::~UpstreamPool() {
  // On the pool's thread, where its calls may still run: they close their
  // connections when they end. (A loop already stopped destroys the handler
  // with the io_context, connections included.)
  asio::io_context& io = impl_->io;
  asio::post(io, [m = std::move(impl_)] {
    m->open = false;
    m->idle.clear();
  });
}

const UpstreamConfig& UpstreamPool::config() const {
  return impl_->u;
}

void UpstreamPool::setConfig(UpstreamConfig u) {
  asio::post(impl_->io, [m = impl_, u = std::move(u)]() mutable { m->u = std::move(u); });
}

std::uint64_t UpstreamPool::opened() const {
  return impl_->opened;
}
std::uint64_t UpstreamPool::reused() const {
  return impl_->reused;
}
std::size_t UpstreamPool::idle() const {
  return impl_->idle.size();
}

struct UpstreamCall::Impl {
  explicit Impl(std::shared_ptr<UpstreamPool::Impl> p)
      : pool(std::move(p)),
        u(pool->u),
        resolver(pool->io),
        response_timeout(milliseconds(u.response_timeout_ms)) {
    newParser();
  }
  void newParser() {
    parser.emplace();
    parser->body_limit(std::numeric_limits<std::uint64_t>::max());
  }
  // `ec` as an UpstreamError; `timed_out` says what a timeout was.
  static UpstreamError failure(const error_code& ec, const std::string& timed_out) {
    const bool timeout = ec == beast::error::timeout;
    // Beast's parser refused what came back: something answered, not in HTTP.
    const bool bad = ec.category() == http::make_error_code(http::error::bad_version).category() &&
                     ec != http::error::end_of_stream && ec != http::error::partial_message;
    return UpstreamError{
        .timeout = timeout, .bad_response = bad, .why = timeout ? timed_out : ec.message()};
  }
  awaitable<std::optional<UpstreamError>> connectNew();
  awaitable<error_code> send(const std::string& head, const std::string& body);
  // Parses what is buffered into the body's buffer, without waiting.
  std::optional<UpstreamError> parseBuffered();
  // Reads the rest of a body nobody waits for, then pools the connection.
  static awaitable<void> drain(std::unique_ptr<Impl> m);

  std::shared_ptr<UpstreamPool::Impl> pool;
  const UpstreamConfig& u;  // the pool's: it lives as long as the call
  asio::ip::basic_resolver<tcp, Executor> resolver;
  milliseconds response_timeout;
  std::unique_ptr<Conn> conn;
  std::optional<http::response_parser<http::buffer_body>> parser;
  bool reused = false;     // conn came from the pool
  bool requested = false;  // a request went out and its header came back
  bool failed = false;     // an error on conn, or close(): never reused
};

UpstreamCall::UpstreamCall(UpstreamPool& pool) : impl_(std::make_unique<Impl>(pool.impl_)) {}

UpstreamCall::~UpstreamCall() {
  if (!impl_) return;
  Impl& m = *impl_;
  if (!m.pool->open || !m.conn || m.failed || !m.requested || m.u.pool_connections == 0) return;
  if (!m.parser->keep_alive()) return;
  if (m.parser->is_done()) {
    m.pool->put(std::move(m.conn));
    return;
  }
  spawn(m.pool->io, Impl::drain(std::move(impl_)));
}

awaitable<void> UpstreamCall::Impl::drain(std::unique_ptr<Impl> m) {
  std::span<char> tmp = m->conn->scratch;
  std::size_t total = 0;
  error_code ec;
  while (!m->parser->is_done() && total <= kDrainLimit) {
    m->parser->get().body().data = tmp.data();
    m->parser->get().body().size = tmp.size();
    m->conn->stream.expires_after(milliseconds(m->u.idle_timeout_ms));
    co_await http::async_read_some(m->conn->stream, m->conn->buf, *m->parser,
                                   asio::redirect_error(use_awaitable, ec));
    if (ec == http::error::need_buffer) ec = {};
    if (ec) co_return;
    total += tmp.size() - m->parser->get().body().size;
  }
  if (m->parser->is_done() && m->pool->open) m->pool->put(std::move(m->conn));
}

awaitable<std::optional<UpstreamError>> UpstreamCall::Impl::connectNew() {
  error_code ec;
  conn = std::make_unique<Conn>(pool->io);
  reused = false;
  conn->stream.expires_after(milliseconds(u.connect_timeout_ms));
  auto addrs = co_await resolver.async_resolve(u.host, std::to_string(u.port),
                                               asio::redirect_error(use_awaitable, ec));
  if (!ec) co_await conn->stream.async_connect(addrs, asio::redirect_error(use_awaitable, ec));
  if (ec) {
    failed = true;
    UpstreamError e = failure(ec, "timed out");
    e.why = "connect to " + u.host + ":" + std::to_string(u.port) + ": " + e.why;
    e.not_connected = true;
    co_return e;
  }
  ++pool->opened;
  if (failed) {  // close() came while connecting: the socket it closed was not open yet
    conn->stream.close();
    co_return UpstreamError{.why = "closed while connecting"};
  }
  conn->stream.socket().set_option(tcp::no_delay(true), ec);
  co_return std::nullopt;
}

awaitable<std::optional<UpstreamError>> UpstreamCall::connect() {
  Impl& m = *impl_;
  m.conn = m.pool->take();
  if (m.conn) {
    m.reused = true;
    co_return std::nullopt;
  }
  co_return co_await m.connectNew();
}

awaitable<error_code> UpstreamCall::Impl::send(const std::string& head, const std::string& body) {
  error_code ec =
      co_await writeBuffers(conn->stream, std::array{bytes(head), bytes(body)}, response_timeout);
  if (!ec) {
    conn->stream.expires_after(response_timeout);
    co_await http::async_read_header(conn->stream, conn->buf, *parser,
                                     asio::redirect_error(use_awaitable, ec));
  }
  co_return ec;
}

void UpstreamCall::setResponseTimeout(milliseconds t) {
  impl_->response_timeout = t;
}

awaitable<std::optional<UpstreamError>> UpstreamCall::request(Method method, std::string path,
                                                              const std::string& body,
                                                              std::string accept,
                                                              bool under_prefix) {
  Impl& m = *impl_;
  const bool post = method == Method::kPost;
  std::string target = under_prefix ? m.u.prefix + path : std::move(path);
  HttpHead h = HttpHead::request(post ? "POST" : "GET", target);
  h.add("Host", m.u.host + ":" + std::to_string(m.u.port));
  if (post) h.add("Content-Type", "application/json").add("Accept", accept);
  h.add("User-Agent", "fairsched-gateway").keepAlive(11, m.u.pool_connections > 0);
  if (post || !body.empty()) h.add("Content-Length", std::to_string(body.size()));
  const std::string head = std::move(h).finish();
  error_code ec = co_await m.send(head, body);
  if (ec && m.reused && !m.failed && closedUnderUs(ec)) {
    // The upstream closed the pooled connection as the request went out.
    m.conn.reset();
    m.newParser();
    if (auto e = co_await m.connectNew()) co_return e;
    ec = co_await m.send(head, body);
  }
  if (ec) {
    m.failed = true;
    co_return Impl::failure(
        ec, "no response within " + std::to_string(m.response_timeout.count()) + " ms");
  }
  m.requested = true;
  co_return std::nullopt;
}

int UpstreamCall::status() const {
  return impl_->parser->get().result_int();
}

std::string UpstreamCall::contentType() const {
  const auto& res = impl_->parser->get();
  const auto it = res.find(http::field::content_type);
  return it == res.end() ? std::string("application/json") : std::string(it->value());
}

bool UpstreamCall::done() const {
  return impl_->parser->is_done();
}

bool UpstreamCall::bodyBuffered() const {
  return !done() && impl_->conn && impl_->conn->buf.size() != 0;
}

awaitable<std::variant<std::size_t, UpstreamError>> UpstreamCall::read(std::span<char> buf) {
  Impl& m = *impl_;
  m.parser->get().body().data = buf.data();
  m.parser->get().body().size = buf.size();
  // What came with the header or an earlier read is parsed without waiting
  // (nearly always a whole JSON body comes with its header).
  if (auto e = m.parseBuffered()) co_return std::move(*e);
  if (buf.size() != m.parser->get().body().size || m.parser->is_done()) {
    co_return buf.size() - m.parser->get().body().size;
  }
  m.conn->stream.expires_after(milliseconds(m.u.idle_timeout_ms));
  error_code ec;
  // read_some: back with whatever arrived (a token), not when the buffer is full.
  co_await http::async_read_some(m.conn->stream, m.conn->buf, *m.parser,
                                 asio::redirect_error(use_awaitable, ec));
  if (ec == http::error::need_buffer) ec = {};
  if (ec) {
    m.failed = true;
    co_return Impl::failure(ec, "no data for " + std::to_string(m.u.idle_timeout_ms) + " ms");
  }
  // read_some hands out one chunk of a chunked body at a time; the chunks
  // that arrived with it are parsed on here, without waiting, so that the
  // events one read brought go out in one write.
  if (auto e = m.parseBuffered()) co_return std::move(*e);
  co_return buf.size() - m.parser->get().body().size;
}

std::optional<UpstreamError> UpstreamCall::Impl::parseBuffered() {
  error_code ec;
  while (!parser->is_done() && conn->buf.size() != 0 && parser->get().body().size != 0) {
    const std::size_t used = parser->put(conn->buf.data(), ec);
    conn->buf.consume(used);
    if (ec == http::error::need_more || ec == http::error::need_buffer) break;
    if (ec) {
      failed = true;
      return failure(ec, "an unreadable chunk");
    }
    if (used == 0) break;
  }
  return std::nullopt;
}

std::span<char> UpstreamCall::scratch() {
  return impl_->conn->scratch;
}

awaitable<std::optional<UpstreamError>> UpstreamCall::readAll(std::string& out, std::size_t limit) {
  const std::span<char> tmp = scratch();
  while (!done()) {
    auto r = co_await read(tmp);
    if (auto* e = std::get_if<UpstreamError>(&r)) co_return std::move(*e);
    const std::size_t n = std::get<std::size_t>(r);
    if (out.size() + n > limit) {
      impl_->failed = true;
      co_return UpstreamError{.bad_response = true,
                              .why = "response larger than " + std::to_string(limit) + " bytes"};
    }
    out.append(tmp.data(), n);
  }
  co_return std::nullopt;
}

void UpstreamCall::close() {
  Impl& m = *impl_;
  m.failed = true;
  if (m.conn) m.conn->stream.close();
}

}  // namespace fairsched::gateway
