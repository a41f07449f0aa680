// fairschedd's request path: ingest from the submission rings (copy out,
// validate, admit through the core), dispatch batches to the executors
// (late binding), collect finished batches, and deliver every request's one
// completion back through its client's completion ring. A second source of
// completions (workers streaming tokens) joins collect() and complete().
#include "daemon/server/server.hpp"

#include <algorithm>
#include <cerrno>

#include <spdlog/spdlog.h>

#include "fairsched/name.hpp"

namespace fairsched::daemon {
namespace {

constexpr std::size_t kRingBudget = 64;  // slots drained from one ring per pass

std::uint32_t micros(TimeNs ns) {
  return static_cast<std::uint32_t>(std::min<TimeNs>(ns / 1000, UINT32_MAX));
}

}  // namespace

shm::CompletionSlot Server::completionFor(std::uint64_t request_id, std::uint64_t tag,
                                          Status status) {
  shm::CompletionSlot s;
  s.request_id = request_id;
  s.tag = tag;
  s.status = encodeStatus(status);
  return s;
}

void Server::armExecutorWatch(std::size_t e) {
  loop_->pollIn(executors_[e]->completionFd(), [this, e](int res) {
    if (res >= 0 || res == -EINTR) armExecutorWatch(e);
  });
}

bool Server::ingest(Connection& c, TimeNs now) {
  const std::uint64_t capacity = c.segment->layout().geometry.completion_capacity;
  c.bitmap.takeEach(
      [&](std::uint32_t ring) {
        if (ring < c.lanes.size()) c.pendLane(ring);
      },
      c.hot_bits.data());
  // Hot lanes: their next cells, directly (connection.hpp).
  for (const std::uint32_t ring : c.hot_lanes) {
    if (c.lanes[ring].mayHaveItem()) c.pendLane(ring);
  }
  bool worked = false;
  std::size_t i = 0;
  for (; i < c.pending_rings.size();) {
    const std::uint32_t ring = c.pending_rings[i];
    shm::SubmissionConsumer& lane = c.lanes[ring];
    const std::uint64_t used = c.outstanding + c.backlog.size();
    if (used >= capacity) break;  // no room for more completions: wait for the client
    // Its rejections spent (reject_budget.hpp): its cells wait in its lanes.
    const std::uint64_t may_reject = c.reject_budget.take(now);
    if (may_reject == 0) {
      ++stats_.reject_throttled;
      break;
    }
    const std::size_t budget = std::min<std::uint64_t>({kRingBudget, capacity - used, may_reject});
    const shm::DrainResult d = lane.drain(
        budget, [&](const shm::SubmissionSlot& slot, std::span<const std::uint32_t> prompt) {
          admit(c, slot, prompt, now);
        });
    if (d.popped > 0) {
      worked = true;
      c.heatLane(ring);
    }
    if (d.stop == shm::PopResult::kCorrupt) {
      if (lane.corruption() == shm::Corruption::kBadSlot) {
        shm::SubmissionSlot bad;
        lane.peek(bad);
        ++stats_.bad_slots;
        c.reject_budget.spend(now);
        spdlog::warn("client {} lane {}: request {} rejected: {}", c.id, ring, bad.request_id,
                     shm::toString(lane.slotCheck()));
        complete(c.id, completionFor(bad.request_id, bad.tag, Status::kInvalid), false);
        lane.skipBadSlot();
        worked = true;
        continue;  // the same ring again
      }
      spdlog::warn("client {} lane {}: submission ring broken (bad sequence {}); dropping it", c.id,
                   ring, lane.badSequence());
      c.closing = true;  // dropped after this pass over the connections
      drop_later_.push_back(c.id);
      return true;
    }
    if (d.stop == shm::PopResult::kEmpty) {
      c.ring_pending[ring] = false;
      c.pending_rings[i] = c.pending_rings.back();
      c.pending_rings.pop_back();
    } else {
      ++i;  // budget used up: come back next pass, after the other rings
    }
  }
  // Stopped for room before the end: the lanes not reached go first next
  // pass, and those served (the last one maybe in part) after them. Else the
  // lane first in the list would take all the room a client frees, and the
  // others' requests would wait for it to run dry.
  if (i > 0 && i < c.pending_rings.size()) {
    std::rotate(c.pending_rings.begin(), c.pending_rings.begin() + static_cast<std::ptrdiff_t>(i),
                c.pending_rings.end());
  }
  return worked;
}

void Server::admit(Connection& c, const shm::SubmissionSlot& slot,
                   std::span<const std::uint32_t> prompt, TimeNs now) {
  ++stats_.submissions;
  TenantHandles::Entry* open = nullptr;
  const TenantHandles::Found found = c.tenants.lookup(slot.tenant, open);
  auto reject = [&](Status s, TimeNs retry_after = 0) {
    if (metrics_ && open && !open->revoked) metrics_->rejected(open->tenant, slot.endpoint, s);
    // A stopping daemon answers everything at once; any other rejection is
    // the connection's to pay for.
    if (s != Status::kShuttingDown) c.reject_budget.spend(now);
    shm::CompletionSlot out = completionFor(slot.request_id, slot.tag, s);
    out.retry_after_ns = retry_after;
    complete(c.id, out, false);
  };
  if (slot.flags & shm::kSlotCancel) {  // not a request: nothing to answer but the cancel itself
    --stats_.submissions;
    cancelRequest(c, slot.request_id, now);
    return;
  }
  // The handle is the client's word: only this connection's table says what it names.
  if (found == TenantHandles::Found::kClosed) {
    ++stats_.bad_tenant_handles;
    return reject(Status::kCancelled);  // written before its tenant was closed
  }
  if (found == TenantHandles::Found::kUnknown) {
    ++stats_.bad_tenant_handles;
    return reject(Status::kInvalid);
  }
  if (shutting_down_ || draining_) return reject(Status::kShuttingDown);
  if (open->revoked) return reject(Status::kUnauthorized);
  if (slot.endpoint >= executors_.size() || slot.deadline_ns < 0) return reject(Status::kInvalid);
  if (!c.endpoint_allowed[slot.endpoint]) return reject(Status::kUnauthorized);
  const bool worker_endpoint = isWorkerEndpoint(slot.endpoint);
  if (worker_endpoint) {
    // What a worker is handed must fit its assignment payload.
    if (slot.promptWords() > cfg_.endpoints[slot.endpoint].worker.max_prompt_tokens)
      return reject(Status::kInvalid);
  } else if ((slot.flags & (shm::kSlotCountsOnly | shm::kSlotStream)) != 0 ||
             slot.paramsBytes() != 0) {
    return reject(Status::kInvalid);  // in-daemon executors run token ids, nothing else
  }
  const std::uint64_t id = pending_.reserve();
  core::Request r;
  r.id = id;
  r.tenant = open->tenant;
  r.endpoint = slot.endpoint;
  r.input_tokens = slot.prompt_tokens;
  r.max_output_tokens = slot.max_output_tokens;
  r.priority = slot.priority;
  r.deadline = slot.deadline_ns == 0 ? kNever : slot.deadline_ns;
  r.owner = c.id;
  const core::Admission a = sched_.submit(r, now);
  if (a.status != Status::kOk) {
    pending_.unreserve(id);
    return reject(a.status, a.retry_after);
  }
  if (metrics_) metrics_->admitted(r.tenant, r.endpoint);
  Pending& p = pending_.emplace(id);
  p.conn = c.id;
  p.request_id = slot.request_id;
  p.tag = slot.tag;
  p.handle = a.handle;
  p.endpoint = slot.endpoint;
  p.tenant = r.tenant;
  p.admitted = now;
  // The words kept for the worker: the prompt's ids and the parameters;
  // the prefix hashes between them are the daemon's alone.
  const auto prompt_words = static_cast<std::size_t>(slot.promptWords());
  const auto prefix_words = static_cast<std::size_t>(slot.prefixWords());
  p.prompt.assign(prompt.begin(), prompt.begin() + static_cast<std::ptrdiff_t>(prompt_words));
  p.prompt.insert(p.prompt.end(),
                  prompt.begin() + static_cast<std::ptrdiff_t>(prompt_words + prefix_words),
                  prompt.end());
  p.prompt_tokens = slot.prompt_tokens;
  p.params_bytes = slot.paramsBytes();
  p.counts_only = (slot.flags & shm::kSlotCountsOnly) != 0;
  p.stream = (slot.flags & shm::kSlotStream) != 0;
  p.max_output_tokens = slot.max_output_tokens;
  p.priority = slot.priority;
  p.deadline = r.deadline;
  if (worker_endpoint) notePrefix(p, slot, prompt);
  ++c.outstanding;
}

bool Server::dispatch(TimeNs now) {
  bool worked = false;
  for (std::size_t e = 0; e < executors_.size(); ++e) {
    Executor& ex = *executors_[e];
    for (;;) {
      if (ex.freeSlots() == 0) break;
      const TimeNs due = sched_.dueBy(static_cast<EndpointId>(e));
      if (!sched_.nextBatch(static_cast<EndpointId>(e), now, batch_, done_)) break;
      slot_meters_[e].dispatched(now, due);
      ExecBatch& eb = exec_batch_;
      eb.requests.clear();
      eb.tokens.clear();
      eb.id = next_batch_++;
      eb.endpoint = static_cast<EndpointId>(e);
      RunningBatch& running = batches_.open(eb.id);
      running.endpoint = eb.endpoint;
      running.dispatched = now;
      const std::uint64_t timeout_ms = cfg_.endpoints[e].batch_timeout_ms;
      running.deadline =
          timeout_ms == 0 ? kNever : now + static_cast<TimeNs>(timeout_ms) * kNsPerMs;
      std::vector<std::uint64_t>& ids = running.ids;
      for (const core::Dispatched& d : batch_.requests) {
        Pending& p = pending_[d.id];
        p.dispatched = now;
        eb.requests.push_back({d.id, d.input_tokens, d.max_output_tokens});
        eb.tokens.insert(eb.tokens.end(), p.prompt.begin(), p.prompt.end());
        ids.push_back(d.id);
      }
      const std::uint64_t batch_id = eb.id;
      worked = true;
      try {
        ex.submit(std::move(eb));
      } catch (const std::exception& err) {  // the batch fails, the daemon goes on
        spdlog::error(
            "endpoint {}: the {} executor refused batch {}: {}; its {} requests end "
            "EXECUTOR_FAILED",
            cfg_.endpoints[e].name, ex.name(), batch_id, escapeForDisplay(err.what()), ids.size());
        failRequests(ids, now);
        batches_.retire(batch_id);
        continue;
      }
      batches_.submitted();
      ++stats_.batches;
    }
    finishDone(done_);
  }
  return worked;
}

bool Server::collect(TimeNs now) {
  bool worked = false;
  for (std::size_t e = 0; e < executors_.size(); ++e) {
    if (lost_executor_ == e) continue;  // its batches were ended when it was lost
    finished_.clear();
    executors_[e]->drain(finished_);
    for (BatchDone& b : finished_) {
      worked = true;
      RunningBatch* batch = batches_.returned(b.id);
      if (!batch) continue;  // given up already: its requests have ended
      slot_meters_[e].batchEnded(std::min(now, batch->dispatched + b.service_ns), b.service_ns);
      std::uint64_t tokens = 0;
      if (!b.ok)
        spdlog::error("endpoint {}: batch {} failed: {}", cfg_.endpoints[e].name, b.id, b.error);
      const std::vector<std::uint64_t>& ids = batch->ids;
      for (std::size_t i = 0; i < ids.size(); ++i) {
        const std::uint64_t key = ids[i];
        const Pending* p = pending_.find(key);
        if (!p) continue;
        const bool ok = b.ok && i < b.results.size() && b.results[i].key == key;
        const std::uint32_t out_tokens = ok ? b.results[i].output_tokens : 0;
        tokens += p->prompt_tokens + out_tokens;
        endRequest(key, ok ? Status::kOk : Status::kExecutorFailed,
                   Ending::ran(out_tokens, ok ? b.results[i].checksum : 0), now);
      }
      sched_.batchServed(static_cast<EndpointId>(e), tokens, b.service_ns);
      batches_.retire(b.id);
      executors_[e]->recycle(std::move(b));
    }
    // What it reported is delivered; what it still held never will be.
    if (lost_executor_ == kNoExecutor && executors_[e]->fatal() != nullptr) {
      executorLost(e, now);
      worked = true;
    }
  }
  return worked;
}

void Server::expireBatches(TimeNs now) {
  // Batches are few (executor slots): a scan now and then is enough.
  if (now < next_batch_check_) return;
  next_batch_check_ = now + 10 * kNsPerMs;
  batches_.giveUpExpired(now, [&](std::uint64_t id, const RunningBatch& b) {
    const config::EndpointConfig& ec = cfg_.endpoints[b.endpoint];
    spdlog::error(
        "endpoint {}: batch {} still running after batch_timeout_ms = {}: its {} requests end "
        "EXECUTOR_FAILED; the executor slot stays taken until the batch returns",
        ec.name, id, ec.batch_timeout_ms, b.ids.size());
    failRequests(b.ids, now);  // a late result finds no batch and is dropped
  });
}

void Server::executorLost(std::size_t e, TimeNs now) {
  lost_executor_ = e;
  const std::string why = executors_[e]->fatal()->message;
  spdlog::critical(
      "endpoint {}: the {} executor is lost ({}); its running requests end EXECUTOR_FAILED and "
      "fairschedd stops with a non-zero status so its supervisor restarts it",
      cfg_.endpoints[e].name, executors_[e]->name(), escapeForDisplay(why));
  lost_executor_error_ = cfg_.endpoints[e].name + ": " + why;
  // Batches the executor will never report: end their requests now.
  batches_.giveUpEndpoint(static_cast<EndpointId>(e), [&](std::uint64_t, const RunningBatch& b) {
    failRequests(b.ids, now);  // never drained again: a late report is never read
  });
  notifier_->status("executor lost: " + lost_executor_error_);
  // Stop at once, without the grace period: what is queued cannot run on the
  // lost device, and a restarted daemon serves the retries sooner.
  beginShutdown();
  shutdown_deadline_ = now;
  armTimer(now);
}

void Server::failRequests(const std::vector<std::uint64_t>& ids, TimeNs now) {
  for (const std::uint64_t key : ids) {
    if (pending_.find(key)) endRequest(key, Status::kExecutorFailed, Ending::ran(0), now);
  }
}

void Server::finishDone(std::vector<core::Done>& done) {
  for (const core::Done& d : done) {
    if (pending_.find(d.id)) endRequest(d.id, d.status, Ending::queued(), 0);
  }
  done.clear();
}

void Server::endRequest(std::uint64_t key, Status status, Ending how, TimeNs now) {
  Pending& p = pending_[key];
  if (how.kind == Ending::Kind::kRan) {
    // One ended early (aborted) is counted by why it was, whatever the worker answered.
    sched_.complete(p.handle, how.output_tokens, now, p.aborted ? p.aborted_as : status);
  }
  if (!p.aborted) {  // an aborted request's completion went out when it was aborted
    shm::CompletionSlot s = completionFor(p.request_id, p.tag, status);
    if (how.kind == Ending::Kind::kRan || how.kind == Ending::Kind::kAbortedOnWorker) {
      const std::uint32_t out = how.kind == Ending::Kind::kRan ? how.output_tokens : p.streamed;
      s.queue_wait_ns = static_cast<std::uint64_t>(p.dispatched - p.admitted);
      s.service_ns = static_cast<std::uint64_t>(now - p.dispatched);
      s.output_tokens = out;
      s.input_tokens = p.prompt_tokens;
      s.ttft_us = p.first_token == 0 ? 0 : micros(p.first_token - p.dispatched);
      s.checksum = how.checksum;
      if (metrics_) {
        metrics_->completed(p.tenant, p.endpoint, status, p.admitted, p.dispatched, now,
                            std::uint64_t{p.prompt_tokens} + out);
      }
    } else if (metrics_) {
      metrics_->ended(p.tenant, p.endpoint, status);
    }
    complete(p.conn, s, true);
  }
  if (how.kind == Ending::Kind::kAbortedOnWorker) {
    p.aborted = true;  // released when the worker acknowledges
    p.aborted_as = status;
    return;
  }
  if (p.worker != 0) workers_.stopped(p.endpoint);
  pending_.release(key);
}

void Server::complete(std::uint64_t conn_id, shm::CompletionSlot slot, bool was_admitted) {
  Connection* found = conns_.find(conn_id);
  if (!found || found->closing) {
    ++stats_.completions_dropped;
    return;
  }
  Connection& c = *found;
  if (was_admitted && c.outstanding > 0) --c.outstanding;
  // Straight into the ring when nothing waits before it (flush() publishes
  // what was written in this pass with one store); held otherwise.
  markDirty(c);
  if (c.backlog.empty() && c.producer && c.producer->freeSlots(1) > 0) {
    c.producer->write(slot, {});
    c.unpublished = true;
    ++stats_.completions_delivered;
    return;
  }
  c.backlog.push_back(Outgoing{slot, {}});
}

bool Server::flush() {
  // Only the connections something was written or queued for: the pass does
  // not grow with connections that are idle.
  conns_.takeDirty(flushing_);
  published_.clear();
  for (Connection* cp : flushing_) {
    Connection& c = *cp;
    if (!c.producer) continue;
    std::size_t n = 0;
    if (c.worker) {  // aborts for a worker's assignment ring
      std::deque<shm::CompletionSlot>& aborts = c.worker->aborts;
      while (!aborts.empty() && c.producer->freeSlots(1) > 0) {
        c.producer->write(aborts.front(), {});
        aborts.pop_front();
        ++n;
      }
      if (!aborts.empty()) markDirty(c);  // no room yet: again next pass
    } else if (!c.backlog.empty()) {
      const std::uint64_t room = c.producer->freeSlots(c.backlog.size());
      while (n < room && n < c.backlog.size()) {
        const Outgoing& o = c.backlog[n];
        std::span<const std::uint32_t> payload;
        if (o.slot.status == shm::kStreamChunk) {
          payload = o.tokens;
          --c.backlog_chunks;
        } else {
          ++stats_.completions_delivered;
        }
        c.producer->write(o.slot, payload);
        ++n;
      }
      c.backlog.erase(c.backlog.begin(), c.backlog.begin() + static_cast<std::ptrdiff_t>(n));
      c.backlog_popped += n;
      if (!c.backlog.empty()) markDirty(c);  // the client has not made room yet
    }
    if (n == 0 && !c.unpublished) continue;
    c.unpublished = false;
    c.producer->publish();
    published_.push_back(&c);
  }
  flushing_.clear();
  if (published_.empty()) return false;
  // One fence after every publication, then each client's flag (doorbell.hpp).
  shm::seqCstFence();
  for (Connection* c : published_) {
    if (c->peer_sleep.sleepingAfterFence()) {
      loop_->write(c->completion_bell->fd(), &bell_value_, sizeof bell_value_, nullptr);
    }
  }
  return true;
}

}  // namespace fairsched::daemon
