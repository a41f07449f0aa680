// The generation path after the HTTP front has authenticated and parsed a
// request: submit it through the daemon bridge, wait for its assignment
// (or the daemon's refusal), call the upstream (UpstreamCall) and relay the
// answer to the caller, as SSE events (text chunks counted as tokens, the
// usage chunk dropped unless the caller asked for it, an error event and
// [DONE] when the stream breaks) or as one whole response (its usage
// counted at the end). Also GET /v1/models, passed through unscheduled.
//
// Contract: every assigned exchange's assignment is ended exactly once
// (DaemonBridge::finish), on every path: OK with the tokens the upstream
// produced, CANCELLED when the caller hung up or the daemon ended it
// first, EXECUTOR_FAILED (INVALID on an upstream 4xx) with why otherwise.
// The returned bool: false when the caller's connection must close.
// One relay per gateway thread: its calls run there, on that thread's
// upstream pools.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "gateway/caller.hpp"
#include "gateway/coro.hpp"
#include "gateway/gateway_config.hpp"
#include "gateway/openai_json.hpp"
#include "gateway/upstream_call.hpp"

namespace fairsched::gateway {

class DaemonBridge;
struct Exchange;

class Relay {
 public:
  // `bridge` outlives the relay; `thread`: the index of its gateway thread.
  Relay(DaemonBridge& bridge, std::size_t thread) : bridge_(bridge), thread_(thread) {}

  // Serves one generation request of `key` on `route`, with a deadline of
  // `timeout_ms` (queueing and running).
  awaitable<bool> generate(Caller& c, const ApiKeyConfig& key, Route route, GenerateRequest req,
                           std::uint64_t timeout_ms);
  // GET `path` (/v1/models[/...]) from the upstream, its answer as it is.
  awaitable<bool> models(Caller& c, std::string path);

 private:
  // What the upstream's body came to.
  struct Relayed;
  awaitable<bool> runUpstream(Caller& c, Exchange& ex);
  awaitable<void> relayStream(Caller& c, Exchange& ex, UpstreamCall& up, Relayed& r);
  awaitable<bool> endStream(Caller& c, Exchange& ex, const Relayed& r);
  awaitable<bool> endWhole(Caller& c, Exchange& ex, UpstreamCall& up, Relayed& r);
  awaitable<bool> endBeforeResponse(Caller& c, Exchange& ex);
  awaitable<ErrorReply> abortReply(Exchange& ex, bool ran = false);
  awaitable<bool> writeStreamEnd(Caller& c, Exchange& ex, std::string error,
                                 std::string events = {});

  DaemonBridge& bridge_;
  std::size_t thread_;
};

}  // namespace fairsched::gateway
