// One caller's HTTP connection as the generation path sees it; the HTTP
// front implements it over Beast. A whole response (sendBody, sendError),
// or an SSE response: its header (startStream), its chunks (writeChunk) and
// its end (endStream). Each write is bounded by gateway.write_timeout_ms;
// false means it failed (the caller is gone, or the connection must close).
// Loop thread only.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "fairsched/http.hpp"
#include "gateway/coro.hpp"
#include "gateway/error_reply.hpp"

namespace fairsched::gateway {

class Caller {
 public:
  virtual ~Caller() = default;

  // Where the time of the request being answered went, for the headers of
  // its answer: x-fairsched-queue-ms (queued in fairsched, once submitted)
  // and x-fairsched-overhead-ms (the gateway's own: since the request was
  // read, less the queue and the wait on the upstream, up to the answer's
  // header). The front sets `received`; the relay the rest.
  struct Timing {
    std::chrono::steady_clock::time_point received{};
    std::chrono::nanoseconds queued{0};
    std::chrono::nanoseconds upstream{0};
    bool submitted = false;
  };
  Timing timing;

  // Parameters by value: GCC 12 mishandles some temporaries that live across
  // a co_await in the caller's expression, so callers pass named values.
  virtual awaitable<bool> sendBody(int status, std::string body, std::string content_type,
                                   std::vector<HttpHeader> headers) = 0;
  // `e` as an OpenAI-style error body, with its headers and `more`
  // (through sendBody; defined in http_front.cpp).
  awaitable<bool> sendError(ErrorReply e, std::vector<HttpHeader> more = {});

  // A 200 text/event-stream response's header, chunked, with `headers`.
  // `with_data`: the stream's first data has arrived already; the header
  // waits for it, to go out in the same write (the next writeChunk or
  // endStream).
  virtual awaitable<bool> startStream(std::vector<HttpHeader> headers, bool with_data) = 0;
  // `data` as one chunk (the header first, when it waits); empty: only a
  // waiting header.
  virtual awaitable<bool> writeChunk(std::string data) = 0;
  // `tail` as the last data chunk, then the terminating chunk.
  virtual awaitable<bool> endStream(std::string tail) = 0;

  // Calls `gone` once the caller hangs up while `watching()` still holds. A
  // pipelined request (bytes to read) ends the watch: the caller is there.
  virtual void watchHangup(std::function<bool()> watching, std::function<void()> gone) = 0;
  // Ends the watch (before the response is written).
  virtual void endWatch() = 0;
};

}  // namespace fairsched::gateway
