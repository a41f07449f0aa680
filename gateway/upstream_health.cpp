#include "gateway/upstream_health.hpp"

#include <algorithm>

namespace fairsched::gateway {

UpstreamHealth::State UpstreamHealth::state(TimeNs now) const {
  if (!ejected_) return State::kHealthy;
  if (now < until_) return State::kEjected;
  return p_.checks ? State::kAwaitingCheck : State::kProbation;
}

void UpstreamHealth::eject(TimeNs now, std::string why) {
  // Again before it recovered from the last ejection: back off longer.
  if (ejected_) backoff_ = std::min(backoff_ * 2, p_.backoff_max);
  ejected_ = true;
  until_ = now + backoff_;
  failures_ = 0;
  ++ejections_;
  why_ = std::move(why);
}

void UpstreamHealth::callOk() {
  failures_ = 0;
  if (ejected_ && p_.checks) return;  // only a check ends an ejection that checks watch
  ejected_ = false;
  backoff_ = p_.backoff_min;
  why_.clear();
}

void UpstreamHealth::callFailed(TimeNs now, bool certain, std::string why) {
  const State s = state(now);
  if (s == State::kEjected) return;  // a call that started before the ejection
  if (certain || s == State::kProbation || s == State::kAwaitingCheck ||
      ++failures_ >= p_.eject_after) {
    eject(now, std::move(why));
  }
}

void UpstreamHealth::checked(bool ok, TimeNs now, std::string why) {
  const State s = state(now);
  if (!ok) {
    if (s != State::kEjected) eject(now, std::move(why));
    return;
  }
  if (s == State::kEjected) return;  // its backoff is not over
  ejected_ = false;
  failures_ = 0;
  backoff_ = p_.backoff_min;
  why_.clear();
}

std::string_view UpstreamHealth::toString(State s) {
  switch (s) {
    case State::kHealthy:
      return "healthy";
    case State::kEjected:
      return "ejected";
    case State::kAwaitingCheck:
      return "awaiting_check";
    case State::kProbation:
      return "probation";
  }
  return "?";
}

}  // namespace fairsched::gateway
