// The upstream call over Boost.Beast (heavy to compile: with http_front.cpp
// one of the two translation units that include it).
#include "gateway/upstream_call.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <array>
#include <limits>

namespace fairsched::gateway {

namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

ErrorReply replyFor(const UpstreamError& e) {
  if (e.timeout) return upstreamTimeout(e.why);
  return e.bad_response ? upstreamBroken(e.why) : upstreamUnavailable(e.why);
}

struct UpstreamCall::Impl {
  Impl(asio::io_context& io, const UpstreamConfig& cfg) : u(cfg), stream(io), resolver(io) {
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
  }
  // `ec` as an UpstreamError; `timed_out` says what a timeout was.
  static UpstreamError failure(const error_code& ec, const std::string& timed_out) {
    const bool timeout = ec == beast::error::timeout;
    // Beast's parser refused what came back: something answered, not in HTTP.
    const bool bad = ec.category() == http::make_error_code(http::error::bad_version).category() &&
                     ec != http::error::end_of_stream && ec != http::error::partial_message;
    return UpstreamError{timeout, bad, timeout ? timed_out : ec.message()};
  }

  const UpstreamConfig& u;
  beast::tcp_stream stream;
  tcp::resolver resolver;
  beast::flat_buffer buf;
  http::response_parser<http::buffer_body> parser;
};

UpstreamCall::UpstreamCall(asio::io_context& io, const UpstreamConfig& u)
    : impl_(std::make_unique<Impl>(io, u)) {}

UpstreamCall::~UpstreamCall() = default;

awaitable<std::optional<UpstreamError>> UpstreamCall::connect() {
  Impl& m = *impl_;
  error_code ec;
  m.stream.expires_after(milliseconds(m.u.connect_timeout_ms));
  auto addrs = co_await m.resolver.async_resolve(m.u.host, std::to_string(m.u.port),
                                                 asio::redirect_error(use_awaitable, ec));
  if (!ec) co_await m.stream.async_connect(addrs, asio::redirect_error(use_awaitable, ec));
  if (ec) {
    UpstreamError e = Impl::failure(ec, "timed out");
    e.why = "connect to " + m.u.host + ":" + std::to_string(m.u.port) + ": " + e.why;
    co_return e;
  }
  m.stream.socket().set_option(tcp::no_delay(true), ec);
  co_return std::nullopt;
}

awaitable<std::optional<UpstreamError>> UpstreamCall::request(Method method, std::string path,
                                                              std::string body,
                                                              std::string accept) {
  Impl& m = *impl_;
  const bool post = method == Method::kPost;
  http::request<http::string_body> req{post ? http::verb::post : http::verb::get, m.u.prefix + path,
                                       11};
  req.set(http::field::host, m.u.host + ":" + std::to_string(m.u.port));
  if (post) {
    req.set(http::field::content_type, "application/json");
    req.set(http::field::accept, accept);
  }
  req.set(http::field::user_agent, "fairsched-gateway");
  req.keep_alive(false);
  req.body() = std::move(body);
  req.prepare_payload();
  error_code ec;
  m.stream.expires_after(milliseconds(m.u.response_timeout_ms));
  co_await http::async_write(m.stream, req, asio::redirect_error(use_awaitable, ec));
  if (!ec) {
    co_await http::async_read_header(m.stream, m.buf, m.parser,
                                     asio::redirect_error(use_awaitable, ec));
  }
  if (ec) {
    co_return Impl::failure(
        ec, "no response within " + std::to_string(m.u.response_timeout_ms) + " ms");
  }
  co_return std::nullopt;
}

int UpstreamCall::status() const {
  return impl_->parser.get().result_int();
}

std::string UpstreamCall::contentType() const {
  const auto& res = impl_->parser.get();
  const auto it = res.find(http::field::content_type);
  return it == res.end() ? std::string("application/json") : std::string(it->value());
}

bool UpstreamCall::done() const {
  return impl_->parser.is_done();
}

awaitable<std::variant<std::size_t, UpstreamError>> UpstreamCall::read(std::span<char> buf) {
  Impl& m = *impl_;
  m.parser.get().body().data = buf.data();
  m.parser.get().body().size = buf.size();
  m.stream.expires_after(milliseconds(m.u.idle_timeout_ms));
  error_code ec;
  // read_some: back with whatever arrived (a token), not when the buffer is full.
  co_await http::async_read_some(m.stream, m.buf, m.parser,
                                 asio::redirect_error(use_awaitable, ec));
  if (ec == http::error::need_buffer) ec = {};
  if (ec) co_return Impl::failure(ec, "no data for " + std::to_string(m.u.idle_timeout_ms) + " ms");
  co_return buf.size() - m.parser.get().body().size;
}

awaitable<std::optional<UpstreamError>> UpstreamCall::readAll(std::string& out, std::size_t limit) {
  std::array<char, 16384> tmp{};
  while (!done()) {
    auto r = co_await read(tmp);
    if (auto* e = std::get_if<UpstreamError>(&r)) co_return std::move(*e);
    const std::size_t n = std::get<std::size_t>(r);
    if (out.size() + n > limit) {
      co_return UpstreamError{false, true,
                              "response larger than " + std::to_string(limit) + " bytes"};
    }
    out.append(tmp.data(), n);
  }
  co_return std::nullopt;
}

void UpstreamCall::close() {
  impl_->stream.close();
}

}  // namespace fairsched::gateway
