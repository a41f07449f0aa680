#include "daemon/server/set_up_queue.hpp"

#include <algorithm>

namespace fairsched::daemon {

SetUpQueue::Uid& SetUpQueue::entry(uid_t uid) {
  auto [it, fresh] = uids_.try_emplace(uid);
  if (fresh) it->second.budget = RejectBudget(per_s_, burst_);
  return it->second;
}

bool SetUpQueue::admit(std::uint64_t conn, uid_t uid, TimeNs now) {
  if (per_s_ == 0) return true;
  if (uids_.size() > kPruneAbove) prune(now);
  Uid& u = entry(uid);
  // First come, first served within a uid: nobody passes a waiting Hello.
  if (u.waiting.empty() && u.budget.allows(now)) {
    u.budget.spend(now);
    return true;
  }
  u.waiting.push_back(conn);
  ++waiting_;
  return false;
}

std::vector<std::uint64_t> SetUpQueue::takeReady(TimeNs now) {
  std::vector<std::uint64_t> out;
  if (waiting_ == 0) return out;
  for (auto& [uid, u] : uids_) {
    while (!u.waiting.empty() && u.budget.allows(now)) {
      u.budget.spend(now);
      out.push_back(u.waiting.front());
      u.waiting.pop_front();
      --waiting_;
    }
  }
  return out;
}

void SetUpQueue::forget(std::uint64_t conn, uid_t uid) {
  auto it = uids_.find(uid);
  if (it == uids_.end()) return;
  auto& w = it->second.waiting;
  auto at = std::find(w.begin(), w.end(), conn);
  if (at == w.end()) return;
  w.erase(at);
  --waiting_;
}

TimeNs SetUpQueue::nextAt() const {
  TimeNs at = kNever;
  if (waiting_ == 0) return at;
  for (const auto& [uid, u] : uids_) {
    if (!u.waiting.empty()) at = std::min(at, u.budget.nextAt());
  }
  return at;
}

void SetUpQueue::prune(TimeNs now) {
  std::erase_if(uids_, [&](const auto& kv) {
    return kv.second.waiting.empty() && kv.second.budget.available(now) >= burst_;
  });
}

}  // namespace fairsched::daemon
