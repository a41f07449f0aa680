// One HTTP/1.1 call to the upstream (gateway.upstream): connect, send one
// request and read the response's header, then read its body in pieces.
//
// Bounds: connect_timeout_ms for the connect, response_timeout_ms for the
// request and the response header, idle_timeout_ms for each body read.
// Every failure is an UpstreamError, its text written here alone, and it
// becomes the caller's reply in one place (replyFor: 504 on a timeout, 502
// upstream_bad_response on bytes that are not HTTP, 502 upstream_unavailable
// otherwise). close() may come at any time (the caller hung up, the daemon
// aborted): the step in progress fails. No connection is reused.
//
// Beast lives in upstream_call.cpp; this header keeps it out of its users.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>

#include "gateway/coro.hpp"
#include "gateway/error_reply.hpp"
#include "gateway/gateway_config.hpp"

namespace fairsched::gateway {

struct UpstreamError {
  bool timeout = false;
  bool bad_response = false;  // it answered, but not HTTP (or HTTP that cannot be read)
  std::string why;            // for logs and the caller
};

// The caller's reply when the upstream could not be called.
ErrorReply replyFor(const UpstreamError& e);

class UpstreamCall {
 public:
  enum class Method { kGet, kPost };

  UpstreamCall(asio::io_context& io, const UpstreamConfig& u);
  ~UpstreamCall();
  UpstreamCall(const UpstreamCall&) = delete;
  UpstreamCall& operator=(const UpstreamCall&) = delete;

  // Resolves and connects to the upstream's host and port.
  awaitable<std::optional<UpstreamError>> connect();
  // Sends `method` on the upstream's prefix + `path` (kPost: `body` as JSON,
  // asking for `accept` back), then reads the response's header.
  awaitable<std::optional<UpstreamError>> request(Method method, std::string path, std::string body,
                                                  std::string accept);
  // After request(): the response's status and content type
  // ("application/json" when it names none).
  int status() const;
  std::string contentType() const;
  // The whole body has been read.
  bool done() const;
  // Reads what has arrived of the body into `buf` (back with a token, not a
  // full buffer): the bytes read, or why the upstream's answer is unusable.
  awaitable<std::variant<std::size_t, UpstreamError>> read(std::span<char> buf);
  // Reads the rest of the body into `out`, at most `limit` bytes in all.
  awaitable<std::optional<UpstreamError>> readAll(std::string& out, std::size_t limit);
  void close();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fairsched::gateway
