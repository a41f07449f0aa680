// One HTTP/1.1 call to the upstream (gateway.upstream): take a connection
// (a pooled keep-alive one, else a new one), send one request and read the
// response's header, then read its body in pieces.
//
// Bounds: connect_timeout_ms for the connect, response_timeout_ms for the
// request and the response header, idle_timeout_ms for each body read.
// Every failure is an UpstreamError, its text written here alone, and it
// becomes the caller's reply in one place (replyFor: 504 on a timeout, 502
// upstream_bad_response on bytes that are not HTTP, 502 upstream_unavailable
// otherwise). close() may come at any time (the caller hung up, the daemon
// aborted): the step in progress fails and the connection is not reused.
//
// Pooling (UpstreamPool): a call that read its whole response on a
// keep-alive connection gives the connection back when it ends; one that
// ends with its body unread (a stream after [DONE]: the last chunk still on
// its way) gives it back after reading the rest in the background (bounded:
// one idle_timeout_ms read, 64 KiB). A pooled connection is checked before
// reuse (closed by the upstream, or holding stray bytes: dropped), kept at
// most pool_idle_ms, and a request that fails on a reused connection before
// any byte of its answer is sent once more on a new one (the upstream closed
// it as the request went out).
//
// Beast lives in upstream_call.cpp; this header keeps it out of its users.
#pragma once

#include <cstddef>
#include <cstdint>
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
  // No connection could be made: nothing reached the upstream, so the call
  // may run on another (connect(), or request()'s new connection after a
  // pooled one turned out closed).
  bool not_connected = false;
  std::string why;  // for logs and the caller
};

// The caller's reply when the upstream could not be called.
ErrorReply replyFor(const UpstreamError& e);

// The idle keep-alive connections to one upstream on one of the gateway's
// threads (each thread has its own: a connection belongs to one
// io_context), with that thread's copy of the upstream's config. Its
// thread only, but for setConfig and the destructor, which may run on any
// thread (they post to the pool's own).
class UpstreamPool {
 public:
  UpstreamPool(asio::io_context& io, UpstreamConfig u);
  ~UpstreamPool();
  UpstreamPool(const UpstreamPool&) = delete;
  UpstreamPool& operator=(const UpstreamPool&) = delete;

  std::uint64_t opened() const;  // connections opened since start
  std::uint64_t reused() const;  // calls served on a pooled connection
  std::size_t idle() const;      // connections idle now
  // The upstream's config as this pool's thread sees it.
  const UpstreamConfig& config() const;
  // A reload: the calls made after it on the pool's thread use `u`.
  void setConfig(UpstreamConfig u);

 private:
  friend class UpstreamCall;
  struct Impl;
  std::shared_ptr<Impl> impl_;  // shared with the calls, which may end after the pool
};

class UpstreamCall {
 public:
  enum class Method { kGet, kPost };

  explicit UpstreamCall(UpstreamPool& pool);
  // Gives a reusable connection back to the pool (see above); else closes it.
  ~UpstreamCall();
  UpstreamCall(const UpstreamCall&) = delete;
  UpstreamCall& operator=(const UpstreamCall&) = delete;

  // Takes a pooled connection, or resolves and connects to the upstream.
  awaitable<std::optional<UpstreamError>> connect();
  // Sends `method` on the upstream's prefix + `path` (kPost: `body` as JSON,
  // asking for `accept` back), then reads the response's header.
  // !under_prefix: `path` from the server's root (a health check).
  // A pooled connection the upstream closed as the request went out is
  // replaced by a new one, once.
  awaitable<std::optional<UpstreamError>> request(Method method, std::string path,
                                                  const std::string& body, std::string accept,
                                                  bool under_prefix = true);
  // A bound for request() other than response_timeout_ms (a health check's).
  void setResponseTimeout(milliseconds t);
  // After request(): the response's status and content type
  // ("application/json" when it names none).
  int status() const;
  std::string contentType() const;
  // A buffer for read() that lives as long as the connection (one call at a
  // time has it). After connect().
  std::span<char> scratch();
  // The whole body has been read.
  bool done() const;
  // Bytes of the body have arrived that no read() has handed out yet.
  bool bodyBuffered() const;
  // Reads what has arrived of the body into `buf` (back with a token, not a
  // full buffer; every chunk that arrived, as far as `buf` holds): the bytes
  // read, or why the upstream's answer is unusable.
  awaitable<std::variant<std::size_t, UpstreamError>> read(std::span<char> buf);
  // Reads the rest of the body into `out`, at most `limit` bytes in all.
  awaitable<std::optional<UpstreamError>> readAll(std::string& out, std::size_t limit);
  // Ends the call now; the connection is not reused.
  void close();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fairsched::gateway
