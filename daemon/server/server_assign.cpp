// Handing queued requests to an endpoint's workers (docs/worker.md).
//
// routing = "roomiest": the worker with the most room takes a batch, in
// fair order, as much as it has room for. routing = "prefix": one request
// at a time — the fair choice (or, when one worker has room, a request
// whose prefix that worker holds, within fairness: Scheduler::take with a
// probe) — goes to the worker core::chooseWorker names: the one holding
// most of its leading blocks while its load stays within the bound, else
// the roomiest. What a worker holds is what it reported in KV events, or
// else the blocks it was sent (WorkerState::cache).
#include <algorithm>

#include "daemon/server/server.hpp"
#include "fairsched/prefix_hash.hpp"

namespace fairsched::daemon {
namespace {

// What one worker holds, for the core's locality choice.
class WorkerCacheProbe final : public core::Scheduler::LocalityProbe {
 public:
  explicit WorkerCacheProbe(const WorkerState& w) : w_(w) {}
  std::size_t matched(std::span<const std::uint64_t> chain) const override {
    return w_.cache.matched(chain);
  }

 private:
  const WorkerState& w_;
};

}  // namespace

void Server::notePrefix(const Pending& p, const shm::SubmissionSlot& slot,
                        std::span<const std::uint32_t> words) {
  const config::WorkerEndpointConfig& wc = cfg_.endpoints[p.endpoint].worker;
  if (wc.routing != core::Routing::kPrefix) return;
  std::vector<std::uint64_t> chain;
  if (slot.prefixBlocks() > 0) {  // the submitter's own, after the prompt's ids
    const std::size_t n = std::min<std::size_t>(slot.prefixBlocks(), wc.max_prefix_blocks);
    const auto hashes = words.subspan(static_cast<std::size_t>(slot.promptWords()), 2 * n);
    chain.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      chain[i] = std::uint64_t{hashes[2 * i]} | (std::uint64_t{hashes[2 * i + 1]} << 32);
    }
  } else if (!p.counts_only && p.prompt_tokens >= wc.prefix_block_tokens) {
    chain = prefixBlockHashes(words.first(p.prompt_tokens), wc.prefix_block_tokens,
                              wc.max_prefix_blocks);
  }
  if (!chain.empty()) sched_.setPrefix(p.handle, std::move(chain));
}

void Server::assignOne(Connection& wc, const core::Dispatched& d, TimeNs now) {
  WorkerState& w = *wc.worker;
  Pending& p = pending_[d.id];
  if (d.resumed_tokens == 0) p.dispatched = now;  // a resumed one keeps its first
  p.worker = wc.id;
  workers_.started(w.endpoint);
  shm::AssignmentRecord a;
  a.assignment = pending_.assignmentId(d.id);
  a.tenant = p.tenant;
  a.priority = p.priority;
  a.deadline_ns = p.deadline == kNever ? 0 : p.deadline;
  a.prompt_tokens = p.prompt_tokens;
  a.max_output_tokens = p.max_output_tokens;
  a.params_bytes = p.params_bytes;
  a.counts_only = p.counts_only;
  if (d.resumed_tokens == 0) {
    wc.producer->write(shm::encodeAssignment(a), p.prompt);
  } else {  // resumed: prompt ids, the ids generated so far, parameters
    a.resume_tokens = static_cast<std::uint32_t>(p.generated.size());
    const std::size_t prompt_words = p.counts_only ? 0 : p.prompt_tokens;
    resume_payload_.assign(p.prompt.begin(),
                           p.prompt.begin() + static_cast<std::ptrdiff_t>(prompt_words));
    resume_payload_.insert(resume_payload_.end(), p.generated.begin(), p.generated.end());
    resume_payload_.insert(resume_payload_.end(),
                           p.prompt.begin() + static_cast<std::ptrdiff_t>(prompt_words),
                           p.prompt.end());
    wc.producer->write(shm::encodeAssignment(a), resume_payload_);
  }
  p.streamed_at_dispatch = p.streamed;
  const std::uint64_t tokens = std::uint64_t{d.input_tokens} + d.max_output_tokens;
  ++w.assigned;
  w.unseen_tokens.push_back(tokens);
  w.unseen_token_sum += tokens;
  ++w.running;
}

void Server::publishAssignments(Connection& wc) {
  wc.producer->publish();
  stats_.batches += 1;
  if (wc.segment->peerSleepFlag().sleeping()) {
    loop_->write(wc.completion_bell->fd(), &bell_value_, sizeof bell_value_, nullptr);
  }
}

bool Server::assignToWorkers(TimeNs now) {
  bool worked = false;
  for (std::size_t e = 0; e < cfg_.endpoints.size(); ++e) {
    if (!isWorkerEndpoint(e)) continue;
    const auto ep = static_cast<EndpointId>(e);
    if (cfg_.endpoints[e].worker.routing == core::Routing::kPrefix) {
      worked |= assignByPrefix(ep, now);
      maybePreempt(ep, now);
      finishDone(done_);
      continue;
    }
    // Headroom: while no more than `headroom` sequences are free across the
    // endpoint, only tenants with nothing running take them.
    const std::uint32_t headroom = cfg_.endpoints[e].worker.headroom;
    std::uint32_t free_total = headroom > 0 ? workers_.freeSequences(ep) : 0;
    while (sched_.queued(ep) > 0) {
      Connection* wc = workers_.roomiest(ep);
      if (!wc) break;
      WorkerState& w = *wc->worker;
      const std::uint32_t seqs = workers_.sequencesFor(*wc);
      const std::uint32_t open =
          headroom == 0 ? seqs : std::min(seqs, free_total > headroom ? free_total - headroom : 0);
      const bool took =
          (open > 0 && sched_.take(ep, now, open, w.freeKvTokens(), batch_, done_)) ||
          (headroom > 0 && sched_.takeHeadroom(ep, now, seqs, w.freeKvTokens(), batch_, done_));
      if (!took) break;
      free_total -=
          std::min<std::uint32_t>(free_total, static_cast<std::uint32_t>(batch_.requests.size()));
      for (const core::Dispatched& d : batch_.requests) assignOne(*wc, d, now);
      publishAssignments(*wc);
      worked = true;
    }
    maybePreempt(ep, now);
    finishDone(done_);
  }
  return worked;
}

bool Server::assignByPrefix(EndpointId ep, TimeNs now) {
  const config::WorkerEndpointConfig& cfg = cfg_.endpoints[ep].worker;
  const std::uint32_t headroom = cfg.headroom;
  std::uint32_t free_total = headroom > 0 ? workers_.freeSequences(ep) : 0;
  bool worked = false;
  while (sched_.queued(ep) > 0) {
    route_workers_.clear();
    std::uint64_t total_load = 0, max_kv = 0;
    Connection* only = nullptr;
    std::size_t with_room = 0;
    for (Connection* c : workers_.of(ep)) {
      if (c->closing) continue;
      route_workers_.push_back(c);
      total_load += c->worker->running;
      const std::uint64_t kv = c->worker->freeKvTokens();
      if (kv == 0 || workers_.sequencesFor(*c) == 0) continue;
      ++with_room;
      only = c;
      max_kv = std::max(max_kv, kv);
    }
    if (with_room == 0) break;
    // One worker with room: the core picks for it, locality within
    // fairness; several: the fair choice, placed by prefix among them.
    const WorkerCacheProbe probe(*only->worker);
    const core::Scheduler::LocalityProbe* p = with_room == 1 ? &probe : nullptr;
    const bool open = headroom == 0 || free_total > headroom;
    const bool took = (open && sched_.take(ep, now, 1, max_kv, batch_, done_, p)) ||
                      (headroom > 0 && sched_.takeHeadroom(ep, now, 1, max_kv, batch_, done_));
    if (!took) break;
    if (free_total > 0) --free_total;
    const core::Dispatched d = batch_.requests.front();
    const std::span<const std::uint64_t> chain = sched_.prefixOf(d.handle);
    const std::uint64_t need = std::uint64_t{d.input_tokens} + d.max_output_tokens;
    route_.clear();
    for (Connection* c : route_workers_) {
      const WorkerState& w = *c->worker;
      const std::uint64_t kv = w.freeKvTokens();
      route_.push_back(
          {w.running, kv == 0 ? 0 : workers_.sequencesFor(*c), w.cache.matched(chain), kv >= need});
    }
    // take() fitted the request to the largest free KV of a worker with a
    // free sequence: one fits.
    const std::size_t r = core::chooseWorker(core::Routing::kPrefix, route_, total_load,
                                             route_workers_.size(), cfg.load_slack);
    Connection& wc = *route_workers_[r == core::kNoRoute ? 0 : r];
    WorkerState& w = *wc.worker;
    w.prefix_blocks += chain.size();
    w.prefix_hits += r == core::kNoRoute ? 0 : route_[r].matched;
    if (!w.cache_events) w.cache.insert(chain);  // approximate: what it was sent
    assignOne(wc, d, now);
    if (std::find(route_touched_.begin(), route_touched_.end(), &wc) == route_touched_.end()) {
      route_touched_.push_back(&wc);
    }
    worked = true;
  }
  // Each worker's assignments of this pass go out together (one bell).
  for (Connection* c : route_touched_) publishAssignments(*c);
  route_touched_.clear();
  return worked;
}

}  // namespace fairsched::daemon
