// Whether the gateway sends calls to one upstream (one engine replica):
// passive ejection on failed calls and active health checks, with backoff,
// as Envoy's outlier detection does.
//
//   healthy ── eject_after failures in a row, or one certain failure
//              (connect refused, a failed check) ──▶ ejected for `backoff`
//   ejected ── its time is up ──▶ on probation (no checks configured), or
//              waiting for a passing check (checks configured)
//   probation ── a call or check succeeds ──▶ healthy (backoff reset)
//              ── one fails ──▶ ejected again, backoff doubled (≤ backoff_max)
//
// A check passes when the upstream answers HTTP below 500 in time (vLLM and
// SGLang answer /health 200, or 5xx when their engine died; a server
// without the path still answers). Pure: time is passed in; one thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "daemon/core/types.hpp"

namespace fairsched::gateway {

class UpstreamHealth {
 public:
  struct Policy {
    std::uint32_t eject_after = 3;  // failed calls in a row
    TimeNs backoff_min = 1'000'000'000;
    TimeNs backoff_max = 30'000'000'000;
    bool checks = true;  // active checks run: an ejection ends with a passing one
  };
  enum class State : std::uint8_t { kHealthy, kEjected, kAwaitingCheck, kProbation };

  explicit UpstreamHealth(Policy p) : p_(p), backoff_(p.backoff_min) {}

  // A call got an answer it could use.
  void callOk();
  // A call failed at the upstream; `certain`: it cannot have reached it
  // (connect refused or timed out), so one is enough to eject.
  void callFailed(TimeNs now, bool certain, std::string why);
  // An active check's outcome.
  void checked(bool ok, TimeNs now, std::string why = {});

  // May take calls now.
  bool usable(TimeNs now) const {
    const State s = state(now);
    return s == State::kHealthy || s == State::kProbation;
  }
  State state(TimeNs now) const;
  // When an ejection ends (kNever when not ejected).
  TimeNs ejectedUntil() const { return ejected_ ? until_ : kNever; }
  std::uint64_t ejections() const { return ejections_; }
  // The last failure's words ("" when healthy).
  const std::string& why() const { return why_; }

  static std::string_view toString(State s);

 private:
  void eject(TimeNs now, std::string why);

  Policy p_;
  TimeNs backoff_;
  TimeNs until_ = 0;
  bool ejected_ = false;  // ejected or, past until_, not yet healthy again
  std::uint32_t failures_ = 0;
  std::uint64_t ejections_ = 0;
  std::string why_;
};

}  // namespace fairsched::gateway
