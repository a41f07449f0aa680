#include "daemon/server/worker_pool.hpp"

#include <algorithm>

namespace fairsched::daemon {

WorkerPool::WorkerPool(const config::Config& cfg, ServerStats& stats)
    : cfg_(cfg),
      stats_(stats),
      by_endpoint_(cfg.endpoints.size()),
      preempt_outstanding_(cfg.endpoints.size(), kNoPreempt),
      next_preempt_check_(cfg.endpoints.size(), 0) {
  stats_.workers.assign(cfg.endpoints.size(), 0);
  stats_.running_on_workers.assign(cfg.endpoints.size(), 0);
}

void WorkerPool::attach(Connection& c) {
  const EndpointId e = c.worker->endpoint;
  by_endpoint_[e].push_back(&c);
  ++stats_.workers[e];
}

void WorkerPool::detach(const Connection& c) {
  const EndpointId e = c.worker->endpoint;
  std::vector<Connection*>& list = by_endpoint_[e];
  const auto it = std::find(list.begin(), list.end(), &c);
  if (it == list.end()) return;
  list.erase(it);
  --stats_.workers[e];
}

namespace {

// A worker's statement, capped by max_sequences less what it runs and by the
// `ring` free cells of its assignment ring less the aborts waiting for them.
std::uint32_t sequencesWithin(const WorkerState& w, std::uint32_t cap, std::uint64_t ring) {
  const std::uint32_t below_cap = w.running >= cap ? 0 : cap - w.running;
  const std::uint64_t ring_room = ring > w.aborts.size() ? ring - w.aborts.size() : 0;
  return static_cast<std::uint32_t>(
      std::min<std::uint64_t>({w.freeSequences(), below_cap, ring_room}));
}

}  // namespace

std::uint32_t WorkerPool::sequencesFor(Connection& c) const {
  return sequencesWithin(*c.worker, cfg_.endpoints[c.worker->endpoint].worker.max_sequences,
                         c.producer->freeSlots(1));
}

std::uint32_t WorkerPool::sequencesShown(const Connection& c) const {
  return sequencesWithin(*c.worker, cfg_.endpoints[c.worker->endpoint].worker.max_sequences,
                         c.producer->knownFreeSlots());
}

Connection* WorkerPool::roomiest(EndpointId e) const {
  Connection* best = nullptr;
  std::uint64_t best_kv = 0;
  std::uint32_t best_seqs = 0;
  for (Connection* c : by_endpoint_[e]) {
    if (c->closing) continue;
    const std::uint32_t seqs = sequencesFor(*c);
    const std::uint64_t kv = c->worker->freeKvTokens();
    if (seqs == 0 || kv == 0) continue;
    if (kv > best_kv || (kv == best_kv && seqs > best_seqs)) {
      best = c;
      best_kv = kv;
      best_seqs = seqs;
    }
  }
  return best;
}

std::uint32_t WorkerPool::freeSequences(EndpointId e) const {
  std::uint32_t total = 0;
  for (Connection* c : by_endpoint_[e]) {
    if (c->closing || c->worker->freeKvTokens() == 0) continue;
    total += sequencesFor(*c);
  }
  return total;
}

void WorkerPool::started(EndpointId e) {
  ++running_;
  ++stats_.running_on_workers[e];
}

void WorkerPool::stopped(EndpointId e) {
  if (running_ == 0) return;
  --running_;
  --stats_.running_on_workers[e];
}

bool WorkerPool::preemptCheckDue(EndpointId e, TimeNs now, TimeNs interval) {
  if (now < next_preempt_check_[e]) return false;
  next_preempt_check_[e] = now + interval;
  return true;
}

bool WorkerPool::runningCheckDue(TimeNs now) {
  if (running_ == 0 || now < next_running_check_) return false;
  next_running_check_ = now + 10 * kNsPerMs;
  return true;
}

}  // namespace fairsched::daemon
