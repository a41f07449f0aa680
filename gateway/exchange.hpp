// One generation request between its submission to fairschedd and its end:
// the state the daemon bridge (submit, assignment, completion, abort), the
// relay (the upstream call and the answer) and the caller's watch share.
// Every change to it is followed by notify(), which wakes whoever waits on
// `wake`.
//
// Threads: an exchange lives on its home thread, the gateway thread of its
// caller's connection (`wake`'s executor). Its fields change there only:
// the bridge, whose loops run on its own thread, posts what the daemon said
// (home()), and keeps its own record of an assignment under its lock. What
// submit() set before the exchange was published (serial, request_id,
// tenant, route, req's counts, sent) is read anywhere.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "daemon/core/types.hpp"
#include "fairsched/request.hpp"
#include "gateway/coro.hpp"
#include "gateway/gateway_config.hpp"
#include "gateway/openai_json.hpp"
#include "gateway/rate_limit_headers.hpp"

namespace fairsched::gateway {

class UpstreamCall;
struct Replica;

struct Exchange {
  explicit Exchange(const Executor& ex) : home_(ex), wake(ex) {
    wake.expires_at(SteadyTimer::time_point::max());
  }
  void notify() { wake.cancel(); }
  const Executor& home() const { return home_; }

  Executor home_;
  std::uint64_t serial = 0;
  RequestId request_id = 0;
  std::string tenant;
  Route route = Route::kCompletions;
  GenerateRequest req;
  RateLimitHeaders::Sent sent;
  std::optional<Completion> final;  // the daemon's final completion
  std::optional<std::uint64_t> assignment;
  std::uint64_t reserved_kv = 0;
  std::shared_ptr<Replica> replica;  // whose worker holds the assignment
  std::shared_ptr<Replica> via;      // whose upstream is called (another: taken over)
  bool aborted = false;              // the daemon sent ABORT, or the worker connection was lost
  bool caller_gone = false;          // the caller hung up
  bool worker_finished = false;
  std::uint32_t emitted = 0;   // output tokens relayed
  std::uint32_t reported = 0;  // of those, emitted to the daemon (the rest go with the finish)
  TimeNs reported_at = 0;
  UpstreamCall* upstream = nullptr;  // while the upstream call is open
  SteadyTimer wake;                  // cancelled on every change above
  // Set on the home thread once the exchange ran and its assignment ended
  // (nothing waits on it any more): the bridge need not post the daemon's
  // final completion to it. Read on the bridge's thread.
  std::atomic<bool> settled{false};
};

}  // namespace fairsched::gateway
