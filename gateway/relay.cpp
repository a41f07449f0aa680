#include "gateway/relay.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <memory>
#include <optional>
#include <variant>
#include <vector>

#include "gateway/daemon_bridge.hpp"
#include "gateway/exchange.hpp"
#include "gateway/sse.hpp"
#include "gateway/upstream_call.hpp"

// GCC 12 takes asio's coroutine frames (allocated by the frame's operator
// new through thread_info_base::allocate, freed by its operator delete) for
// a mismatched pair where it inlines the allocation: a false positive.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

namespace fairsched::gateway {

namespace {
// A refused call moves to another replica at most this many times.
constexpr int kMaxTakeOvers = 3;
// While every other replica that is up is full: how often room is looked for.
constexpr std::chrono::milliseconds kRoomPoll{5};
}  // namespace

struct Relay::Relayed {
  int status = 0;
  bool sse = false;                   // relayed as SSE events (a 200 to a streamed request)
  bool header_sent = false;           // the SSE response's header went out
  bool done = false;                  // [DONE] seen
  std::optional<std::string> broken;  // why the upstream's answer is unusable
  std::optional<Usage> usage;
  std::string whole;  // a non-streamed body (bounded)
  std::string held;   // the events read with [DONE], written with the stream's end
};

awaitable<bool> Relay::generate(Caller& c, const ApiKeyConfig& key, Route route,
                                GenerateRequest req, std::uint64_t timeout_ms) {
  auto submitted = bridge_.submit(co_await asio::this_coro::executor, key, route, std::move(req),
                                  milliseconds(timeout_ms));
  if (auto* e = std::get_if<ErrorReply>(&submitted)) {
    ErrorReply err = std::move(*e);
    co_return co_await c.sendError(std::move(err));
  }
  const std::shared_ptr<Exchange> ex = std::get<std::shared_ptr<Exchange>>(std::move(submitted));
  const auto submitted_at = std::chrono::steady_clock::now();
  c.timing.submitted = true;
  c.watchHangup([ex] { return !ex->caller_gone && !ex->worker_finished; },
                [this, ex] { bridge_.callerGone(*ex); });

  error_code ec;
  while (!ex->assignment && !ex->final && !ex->caller_gone) {
    ex->wake.expires_at(SteadyTimer::time_point::max());
    co_await ex->wake.async_wait(asio::redirect_error(use_awaitable, ec));
  }
  c.timing.queued = std::chrono::steady_clock::now() - submitted_at;
  if (ex->caller_gone) {
    if (ex->assignment) co_await bridge_.finishCancelled(*ex, 0);  // assigned as it hung up
    co_return false;
  }
  if (!ex->assignment) {
    const Completion& f = *ex->final;
    std::vector<HttpHeader> more;
    if (f.status == Status::kRateLimited) more = bridge_.limitHeaders(*ex, f.retry_after);
    c.endWatch();
    ErrorReply e = errorForCompletion(f);
    co_return co_await c.sendError(std::move(e), std::move(more));
  }
  const bool keep = co_await runUpstream(c, *ex);
  c.endWatch();
  // It ran and its assignment is ended: what the daemon says of it now
  // changes nothing here.
  if (ex->worker_finished) ex->settled.store(true, std::memory_order_release);
  co_return keep && !ex->caller_gone;
}

awaitable<bool> Relay::models(Caller& c, std::string path) {
  const std::shared_ptr<Replica> replica = bridge_.anyReplica();
  if (!replica) {
    ErrorReply e = schedulerUnavailable("no upstream is configured");
    co_return co_await c.sendError(std::move(e));
  }
  UpstreamPool& pool = *replica->pools[thread_];
  UpstreamCall up(pool);
  const auto called_at = std::chrono::steady_clock::now();
  std::optional<UpstreamError> err = co_await up.connect();
  std::string body;
  if (!err) {
    std::string none;
    std::string accept;
    err = co_await up.request(UpstreamCall::Method::kGet, path, std::move(none), std::move(accept));
  }
  if (!err) err = co_await up.readAll(body, pool.config().max_response_bytes);
  c.timing.upstream = std::chrono::steady_clock::now() - called_at;
  if (err) {
    err->why = "GET " + path + ": " + err->why;
    ErrorReply e = replyFor(*err);
    co_return co_await c.sendError(std::move(e));
  }
  co_return co_await c.sendBody(up.status(), std::move(body), up.contentType(), {});
}

// Calls the upstream for an assigned exchange and relays its answer.
awaitable<bool> Relay::runUpstream(Caller& c, Exchange& ex) {
  std::optional<UpstreamCall> call;
  struct Detach {
    Exchange& ex;
    ~Detach() { ex.upstream = nullptr; }
  } detach{ex};
  if (ex.aborted) co_return co_await endBeforeResponse(c, ex);

  const auto called_at = std::chrono::steady_clock::now();
  std::optional<UpstreamError> err;
  // The tenant's calls open on an upstream, this one included, while it is.
  struct TenantCall {
    std::shared_ptr<Replica> on;
    const std::string& tenant;
    std::uint32_t before;
    explicit TenantCall(std::shared_ptr<Replica> r, const std::string& t)
        : on(std::move(r)), tenant(t), before(on->callOpened(tenant)) {}
    ~TenantCall() { on->callClosed(tenant); }
    TenantCall(const TenantCall&) = delete;
    TenantCall& operator=(const TenantCall&) = delete;
  };
  std::optional<TenantCall> tenant_call;
  std::string rebuilt;  // the body with the engine's priority, where it has one
  bool sent = false;    // the request went out (or failed going out) on a connection
  // Connect and send; a replica that cannot be reached (its connection
  // refused, or a pooled one it closed before a byte of an answer and a new
  // one refused) hands the call to another with room (it answered nothing:
  // run elsewhere, as the request is sent again on a new connection) — when
  // every other one that is up is full, once one of its calls ends.
  for (int attempt = 0;; ++attempt) {
    ex.upstream = nullptr;
    tenant_call.reset();
    call.emplace(*ex.via->pools[thread_]);
    ex.upstream = &*call;
    err = co_await call->connect();
    sent = false;
    if (!err && !ex.caller_gone && !ex.aborted) {
      sent = true;
      const UpstreamConfig& via = ex.via->pools[thread_]->config();  // this thread's copy
      tenant_call.emplace(ex.via, ex.tenant);
      const std::string* body = &ex.req.upstream_body;
      if (via.engine_priority != UpstreamConfig::EnginePriority::kOff || ex.req.caller_priority) {
        rebuilt = bodyForEngine(ex.req.upstream_body, via.engine_priority, tenant_call->before,
                                ex.req.caller_priority);
        body = &rebuilt;
      }
      std::string accept = ex.req.stream ? "text/event-stream" : "application/json";
      err = co_await call->request(UpstreamCall::Method::kPost, std::string(routePath(ex.route)),
                                   *body, std::move(accept));
      if (err && !err->not_connected && !ex.caller_gone && !ex.aborted) {
        bridge_.upstreamFailed(*ex.via, false, err->why);
      }
    }
    if (!err || !err->not_connected || ex.caller_gone || ex.aborted) break;
    sent = false;  // nothing reached it
    bridge_.upstreamFailed(*ex.via, /*certain=*/true, err->why);
    if (attempt >= kMaxTakeOvers) break;
    std::shared_ptr<Replica> next = bridge_.takeOver(ex);
    while (!next && bridge_.roomLater(ex) && !ex.caller_gone && !ex.aborted) {
      SteadyTimer pause(co_await asio::this_coro::executor);
      pause.expires_after(kRoomPoll);
      error_code ec;
      co_await pause.async_wait(asio::redirect_error(use_awaitable, ec));
      next = bridge_.takeOver(ex);
    }
    if (!next) break;
  }
  UpstreamCall& up = *call;
  const UpstreamConfig& via = ex.via->pools[thread_]->config();  // this thread's copy
  // Sent or given up: the body is not needed again (a held stream keeps
  // this frame and the exchange as long as it runs).
  std::string().swap(rebuilt);
  std::string().swap(ex.req.upstream_body);
  // Gone while connecting (its close may have come before there was a socket
  // to close): nothing is sent, the assignment ends now.
  if (!sent && (ex.caller_gone || ex.aborted)) {
    up.close();
    c.timing.upstream = std::chrono::steady_clock::now() - called_at;
    co_return co_await endBeforeResponse(c, ex);
  }
  if (err) {
    c.timing.upstream = std::chrono::steady_clock::now() - called_at;
    if (ex.caller_gone || ex.aborted) co_return co_await endBeforeResponse(c, ex);
    spdlog::warn("request {}: upstream {}: {}", ex.serial, via.name, err->why);
    ErrorReply e = replyFor(*err);
    bridge_.finish(ex, Status::kExecutorFailed, ex.emitted, err->why);
    co_return co_await c.sendError(std::move(e));
  }
  // An engine that answers 502-504 itself is failing; any other answer is one.
  if (up.status() >= 502 && up.status() <= 504) {
    bridge_.upstreamFailed(*ex.via, false, "HTTP " + std::to_string(up.status()));
  } else {
    bridge_.upstreamOk(*ex.via);
  }

  Relayed r;
  r.status = up.status();
  r.sse = ex.req.stream && r.status == 200;
  if (r.sse) {
    c.timing.upstream = std::chrono::steady_clock::now() - called_at;
    co_await relayStream(c, ex, up, r);
  } else {
    if (auto e = co_await up.readAll(r.whole, via.max_response_bytes)) {
      r.broken = std::move(e->why);
    }
    c.timing.upstream = std::chrono::steady_clock::now() - called_at;
  }
  // A connection with a broken answer, or a stream cut short, is not reused.
  if (r.broken || (r.sse && !r.done)) {
    if (!ex.caller_gone && !ex.aborted) {
      bridge_.upstreamFailed(*ex.via, false, r.broken ? *r.broken : "a stream cut short");
    }
    up.close();
  }

  if (ex.caller_gone) {
    co_await bridge_.finishCancelled(ex, ex.emitted);
    co_return false;
  }
  if (ex.aborted && !ex.worker_finished) bridge_.finish(ex, Status::kCancelled, ex.emitted, "");
  if (ex.aborted || ex.worker_finished) {  // the daemon ended it (abort, lost worker)
    ErrorReply e = co_await abortReply(ex, r.header_sent);
    if (!r.header_sent) co_return co_await c.sendError(std::move(e));
    co_await writeStreamEnd(c, ex, errorJson(e.message, e.type, e.param, e.code), r.held);
    co_return false;
  }
  if (r.sse) co_return co_await endStream(c, ex, r);
  co_return co_await endWhole(c, ex, up, r);
}

// Relays the upstream's SSE events as they come, counting text chunks as
// tokens. Stops at [DONE], at the body's end, or when something broke.
awaitable<void> Relay::relayStream(Caller& c, Exchange& ex, UpstreamCall& up, Relayed& r) {
  std::vector<HttpHeader> headers = bridge_.limitHeaders(ex);
  // Events that came with the upstream's header go out with ours.
  const bool with_data = up.bodyBuffered();
  if (!co_await c.startStream(std::move(headers), with_data)) {
    bridge_.callerGone(ex);
    co_return;
  }
  r.header_sent = true;
  bool header_waits = with_data;  // not written yet: it goes with the first events
  const std::size_t limit = ex.via->pools[thread_]->config().max_response_bytes;
  const std::span<char> tmp = up.scratch();
  std::vector<std::string> events;
  SseParser parser(limit);
  while (!up.done() && !r.done) {
    // A read hands out every chunk that has arrived (UpstreamCall::read):
    // its events go out together.
    auto got = co_await up.read(tmp);
    if (auto* e = std::get_if<UpstreamError>(&got)) {
      r.broken = std::move(e->why);
      break;
    }
    events.clear();
    if (!parser.feed(std::string_view(tmp.data(), std::get<std::size_t>(got)), events)) {
      r.broken = "a stream event larger than " + std::to_string(limit) + " bytes";
    }
    std::string out;  // what this read forwards to the caller
    std::uint32_t pieces = 0;
    for (const std::string& data : events) {
      if (data == "[DONE]") {
        r.done = true;
        break;
      }
      const StreamChunk ch = parseStreamChunk(data);
      if (ch.usage) r.usage = ch.usage;
      if (ch.has_text) pieces += 1;
      if (ch.usage_only && !ex.req.caller_wants_usage) continue;
      out += sseEvent(data);
    }
    bridge_.emitTokens(ex, pieces, r.done);
    if (r.done) {  // the last read: its events go out with the end, in one write
      r.held = std::move(out);
      break;
    }
    // What the first read brought held no event (a comment, half an
    // event): the header waits no longer.
    if (!out.empty() || header_waits) {
      header_waits = false;
      const bool written = co_await c.writeChunk(std::move(out));
      if (!written) {
        bridge_.callerGone(ex);
        break;
      }
    }
    if (r.broken) break;
  }
}

// The end of a relayed stream: OK after [DONE], else an error event.
awaitable<bool> Relay::endStream(Caller& c, Exchange& ex, const Relayed& r) {
  if (r.broken || !r.done) {
    const std::string why = r.broken ? *r.broken : "the stream ended without [DONE]";
    spdlog::warn("request {}: upstream stream: {}", ex.serial, why);
    bridge_.finish(ex, Status::kExecutorFailed, ex.emitted, why);
    const ErrorReply e = upstreamBroken(why);
    co_await writeStreamEnd(c, ex, errorJson(e.message, e.type, e.param, e.code), r.held);
    co_return false;
  }
  const std::uint32_t output =
      std::max(ex.emitted, r.usage ? r.usage->completion_tokens : std::uint32_t{0});
  bridge_.finish(ex, Status::kOk, output, "", r.usage ? r.usage->prompt_tokens : 0);
  co_return co_await writeStreamEnd(c, ex, {}, r.held);
}

// A whole response (not streamed, or the upstream refused the stream):
// passed on with the upstream's status and content type.
awaitable<bool> Relay::endWhole(Caller& c, Exchange& ex, UpstreamCall& up, Relayed& r) {
  if (r.broken) {
    spdlog::warn("request {}: upstream response: {}", ex.serial, *r.broken);
    ErrorReply e = upstreamBroken(*r.broken);
    bridge_.finish(ex, Status::kExecutorFailed, ex.emitted, *r.broken);
    co_return co_await c.sendError(std::move(e));
  }
  if (r.status == 200) {
    const std::optional<Usage> us = parseResponseUsage(r.whole);
    const std::uint32_t output = us ? us->completion_tokens : 0;
    // Relayed whole: the tokens go with the finish (one ring event, not two).
    bridge_.finish(ex, Status::kOk, output, "", us ? us->prompt_tokens : 0);
  } else {
    const std::string why = "upstream answered HTTP " + std::to_string(r.status);
    bridge_.finish(ex,
                   r.status >= 400 && r.status < 500 ? Status::kInvalid : Status::kExecutorFailed,
                   ex.emitted, why);
  }
  std::vector<HttpHeader> headers;
  if (r.status == 200) headers = bridge_.limitHeaders(ex);
  co_return co_await c.sendBody(r.status, std::move(r.whole), up.contentType(), std::move(headers));
}

// The caller hung up, or the daemon ended the request, before the upstream
// answered: the request ends CANCELLED, and a caller still there hears why.
awaitable<bool> Relay::endBeforeResponse(Caller& c, Exchange& ex) {
  if (ex.caller_gone) {
    co_await bridge_.finishCancelled(ex, 0);
    co_return false;
  }
  bridge_.finish(ex, Status::kCancelled, 0, "");
  ErrorReply e = co_await abortReply(ex);
  co_return co_await c.sendError(std::move(e));
}

// The reply when the upstream call ended early because of the daemon
// (ABORT, a lost worker connection): its final completion says why.
// `ran`: the answer had started streaming.
awaitable<ErrorReply> Relay::abortReply(Exchange& ex, bool ran) {
  using Clock = std::chrono::steady_clock;  // asio's timers' clock
  error_code ec;
  const auto until = Clock::now() + milliseconds(1000);
  while (!ex.final && !ex.caller_gone && Clock::now() < until) {
    ex.wake.expires_after(milliseconds(20));
    co_await ex.wake.async_wait(asio::redirect_error(use_awaitable, ec));
  }
  if (ex.final && ex.final->status != Status::kOk) co_return errorForCompletion(*ex.final, ran);
  co_return schedulerUnavailable("the request was aborted by the scheduler");
}

// The end of an SSE response: `events` not written yet, an error event when
// `error` is set, then [DONE] and the last chunk. False when the connection
// must close.
awaitable<bool> Relay::writeStreamEnd(Caller& c, Exchange& ex, std::string error,
                                      std::string events) {
  std::string tail = std::move(events);
  if (!error.empty()) tail += sseEvent(error);
  tail += kSseDone;
  const bool written = co_await c.endStream(std::move(tail));
  if (!written) bridge_.callerGone(ex);
  co_return written&& error.empty();
}

}  // namespace fairsched::gateway
