// fairschedd's worker role (docs/worker.md): engines attach to an endpoint with
// executor = "worker", say what they can take, and are handed the requests
// the core chooses at that moment (late binding); their tokens are charged
// to the tenant as they come and relayed to the submitting client; cancels,
// deadlines, dead clients and dead workers end every request explicitly.
//
// The worker's segment (shm/worker_protocol.hpp) is untrusted exactly like a
// client's: events are copied out, decoded and checked against the daemon's
// own table (the assignment must be this worker's, the token count within
// the request's max_output_tokens). A violation drops that worker; its
// requests end EXECUTOR_FAILED or go back to their queue.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <string>

#include <spdlog/spdlog.h>

#include "daemon/server/server.hpp"
#include "fairsched/name.hpp"

namespace fairsched::daemon {
namespace {

constexpr std::size_t kEventBudget = 256;  // events taken from one worker per pass
// How often an endpoint with a backlog looks for a sequence to preempt, and
// how long a worker has to answer a PREEMPT before it is not asked again.
constexpr TimeNs kPreemptCheckInterval = kNsPerMs;
constexpr TimeNs kPreemptAnswerTimeout = kNsPerSec;
// What is kept of a worker's KV events before its first CAPACITY says how
// large its cache is (about 4 MiB of blocks at most).
constexpr std::size_t kUnsizedCacheBlocks = 65536;
// The most blocks remembered of one worker unless cache_blocks says (about
// 60 MiB at most, however many KV tokens it states).
constexpr std::uint64_t kDefaultCacheBlocksMax = 1 << 20;

}  // namespace

void Server::handleWorkerHello(Connection& c, const shm::HelloMessage& m,
                               shm::HelloReplyMessage& reply, std::string_view name) {
  const std::string_view endpoint = *shm::getString(m.endpoint);
  std::size_t e = 0;
  while (e < cfg_.endpoints.size() && cfg_.endpoints[e].name != endpoint) ++e;
  auto refuse = [&](shm::ControlStatus status, const std::string& why) {
    reply.status = static_cast<std::uint32_t>(status);
    shm::setString(reply.message, why);
    spdlog::warn("worker uid {} pid {} refused: {}", c.cred.uid, c.cred.pid, why);
    ++stats_.connections_refused;
    sendReply(c, shm::bytesOf(reply), nullptr, 0);
    c.closing = true;
    dropConnection(c.id, "refused");
  };
  if (e == cfg_.endpoints.size()) {
    return refuse(shm::ControlStatus::kBadRequest,
                  "unknown endpoint \"" + escapeForDisplay(endpoint) + "\"");
  }
  const config::EndpointConfig& ec = cfg_.endpoints[e];
  if (ec.executor != config::ExecutorKind::kWorker) {
    return refuse(shm::ControlStatus::kBadRequest,
                  "endpoint " + ec.name + " is not served by workers (executor = \"worker\")");
  }
  if (!ClientRules::allowsWorker(*c.rule, ec.name)) {
    return refuse(shm::ControlStatus::kUnauthorized,
                  "rule '" + c.rule->name + "' does not let uid " + std::to_string(c.cred.uid) +
                      " serve endpoint " + ec.name + " (add it to the rule's workers)");
  }
  if (!openSegment(c, shm::workerGeometry(ec.worker.max_sequences, ec.worker.max_prompt_tokens))) {
    return refuse(shm::ControlStatus::kInternal, "could not create the shared segment or eventfds");
  }
  c.ring_pending.assign(1, false);
  c.endpoint_allowed.assign(cfg_.endpoints.size(), false);
  WorkerState& w = c.worker.emplace();
  w.endpoint = static_cast<EndpointId>(e);
  w.name = std::string(name);
  w.events.emplace(c.segment->submissionRing(0), 0);
  workers_.attach(c);

  reply.ring_count = 0;
  describeEndpoint(reply, e);
  if (!sendWelcome(c, reply, "welcome, worker")) return;
  spdlog::info("worker {} attached to endpoint {}: uid {} pid {} rule '{}' name '{}'", c.id,
               ec.name, c.cred.uid, c.cred.pid, c.rule->name, name);
}

namespace {

// "assignment 0x...": one the worker does not hold (never assigned, finished
// already, or taken back: the high 32 bits are the entry's generation).
std::string notHeld(std::uint64_t assignment) {
  char hex[19];
  std::snprintf(hex, sizeof hex, "%#llx", static_cast<unsigned long long>(assignment));
  return "assignment " + std::string(hex) + ", which it does not hold";
}

}  // namespace

Pending* Server::assignedTo(std::uint64_t assignment, std::uint64_t worker) {
  Pending* p = pending_.byAssignment(assignment);
  return p && p->worker == worker ? p : nullptr;
}

bool Server::ingestWorker(Connection& c, TimeNs now) {
  WorkerState& w = *c.worker;
  c.bitmap.takeEach([](std::uint32_t) {});
  bool worked = false;
  shm::SubmissionSlot slot;
  for (std::size_t n = 0; n < kEventBudget; ++n) {
    const shm::PopResult r = w.events->tryPop(slot, event_words_);
    if (r == shm::PopResult::kEmpty) break;
    std::string why;
    if (r == shm::PopResult::kCorrupt) {
      why = w.events->corruption() == shm::Corruption::kBadSequence
                ? "event ring broken (bad sequence)"
                : "bad event slot: " + std::string(shm::toString(w.events->slotCheck()));
    } else {
      shm::WorkerEvent ev;
      const shm::EventCheck check = shm::decodeWorkerEvent(slot, ev);
      if (check != shm::EventCheck::kValid) {
        why = "bad event: " + std::string(shm::toString(check));
      } else {
        why = onWorkerEvent(c, ev, event_words_, now);
        if (!why.empty()) why = "event breaks the protocol: " + why;
      }
    }
    if (!why.empty()) return dropWorker(c, std::move(why));
    worked = true;
  }
  // Its read index of the assignment ring, which it may overwrite with
  // anything: out of range, the daemon could never write to it again.
  if (!c.producer->checkReadIndex()) {
    return dropWorker(c, "assignment ring broken (its read index is out of range)");
  }
  return worked;
}

bool Server::dropWorker(Connection& c, std::string why) {
  ++stats_.bad_slots;
  spdlog::warn("worker {} (pid {}): {}; dropping it", c.id, c.cred.pid, why);
  dropLater(c, std::move(why));
  return true;
}

void Server::noteFirstToken(Pending& p, TimeNs now) {
  p.first_token = now;
  if (metrics_ && !p.aborted) metrics_->firstToken(p.tenant, p.endpoint, now - p.dispatched);
}

std::string Server::onTokens(Connection& c, std::uint64_t assignment,
                             std::span<const std::uint32_t> tokens, std::int64_t emit_ns,
                             TimeNs now) {
  WorkerState& w = *c.worker;
  Pending* p = assignedTo(assignment, c.id);
  if (!p) return "TOKENS for " + notHeld(assignment);
  const std::uint64_t count = tokens.size();
  if (p->streamed + count > p->max_output_tokens) {
    return "TOKENS past max_output_tokens: " + std::to_string(p->streamed) + " emitted + " +
           std::to_string(count) + " > " + std::to_string(p->max_output_tokens);
  }
  sched_.charge(p->handle, static_cast<std::uint32_t>(count), now);
  if (sched_.spec().endpoints[p->endpoint].preemption.enabled) {  // for a resume
    p->generated.insert(p->generated.end(), tokens.begin(), tokens.end());
  }
  if (metrics_) metrics_->tokensStreamed(p->tenant, p->endpoint, count);
  if (p->streamed == 0) noteFirstToken(*p, now);
  p->streamed += static_cast<std::uint32_t>(count);
  w.tokens += count;
  stats_.tokens_streamed += count;
  if (p->aborted || !p->stream) return {};  // charged, not relayed
  if (!relayTokens(*p, tokens, emit_ns)) {
    const std::uint64_t key = assignment & 0xffffffffu;
    spdlog::warn("client {}: request {} ends SLOW_CONSUMER: its token stream is not read", p->conn,
                 p->request_id);
    abortRunning(key, Status::kSlowConsumer, now);
  }
  return {};
}

std::string Server::onWorkerEvent(Connection& c, const shm::WorkerEvent& ev,
                                  std::span<const std::uint32_t> words, TimeNs now) {
  WorkerState& w = *c.worker;
  switch (ev.kind) {
    case shm::WorkerEventKind::kCapacity: {
      if (ev.assignments_seen < w.seen) {
        return "CAPACITY with assignments_seen " + std::to_string(ev.assignments_seen) +
               ", below the " + std::to_string(w.seen) + " of its previous statement";
      }
      if (ev.assignments_seen > w.assigned) {
        return "CAPACITY with assignments_seen " + std::to_string(ev.assignments_seen) +
               ", more than the " + std::to_string(w.assigned) + " assignments it was given";
      }
      while (w.seen < ev.assignments_seen) {
        w.unseen_token_sum -= w.unseen_tokens.front();
        w.unseen_tokens.pop_front();
        ++w.seen;
      }
      w.free_sequences = ev.free_sequences;
      w.free_kv_tokens = ev.free_kv_tokens;
      if (!w.cache_sized) {  // its first statement: its whole KV cache
        const config::WorkerEndpointConfig& wc = cfg_.endpoints[w.endpoint].worker;
        w.cache.setCapacity(wc.cache_blocks != 0 ? wc.cache_blocks
                                                 : std::min<std::uint64_t>(
                                                       ev.free_kv_tokens / wc.prefix_block_tokens,
                                                       kDefaultCacheBlocksMax));
        w.cache_sized = true;
      }
      return {};
    }
    case shm::WorkerEventKind::kCache:
      onCacheEvent(w, ev.cache_op, words);
      return {};
    case shm::WorkerEventKind::kTokens:
      return onTokens(c, ev.assignment, words, ev.emit_ns, now);
    case shm::WorkerEventKind::kStep: {
      // One token of each entry's assignment, in order; the first entry
      // that breaks a rule drops the worker (what came before it stands).
      const std::size_t n = words.size() / shm::kStepWordsPerToken;
      for (std::size_t i = 0; i < n; ++i) {
        const shm::StepWord t = shm::decodeStepToken(words, i);
        std::string why = onTokens(
            c, t.assignment, words.subspan(i * shm::kStepWordsPerToken + 2, 1), ev.emit_ns, now);
        if (!why.empty()) return "STEP entry " + std::to_string(i) + ": " + why;
      }
      return {};
    }
    case shm::WorkerEventKind::kFinish: {
      Pending* p = assignedTo(ev.assignment, c.id);
      if (!p) return "FINISH for " + notHeld(ev.assignment);
      if (ev.output_tokens < p->streamed) {
        return "FINISH with output_tokens " + std::to_string(ev.output_tokens) +
               ", fewer than the " + std::to_string(p->streamed) + " it emitted";
      }
      if (ev.output_tokens > p->max_output_tokens) {
        return "FINISH with output_tokens " + std::to_string(ev.output_tokens) +
               " > max_output_tokens " + std::to_string(p->max_output_tokens);
      }
      // A prompt counted by the engine: at most what one request may hold.
      if (ev.input_tokens > cfg_.endpoints[p->endpoint].max_batch_tokens) {
        return "FINISH with input_tokens " + std::to_string(ev.input_tokens) +
               " > the endpoint's max_batch_tokens " +
               std::to_string(cfg_.endpoints[p->endpoint].max_batch_tokens);
      }
      const std::uint64_t key = ev.assignment & 0xffffffffu;
      if (ev.input_tokens != 0 && ev.input_tokens != p->prompt_tokens) {
        sched_.settleInput(p->handle, ev.input_tokens, now);
        p->prompt_tokens = ev.input_tokens;
      }
      if (ev.output_tokens > p->streamed) {  // generated but not streamed: charged now
        // A stream whose tokens all came with its end: its first token is now.
        if (p->streamed == 0 && p->stream) noteFirstToken(*p, now);
        sched_.charge(p->handle, ev.output_tokens - p->streamed, now);
        w.tokens += ev.output_tokens - p->streamed;  // the worker's, told with its finish
      }
      if (w.running > 0) --w.running;
      ++w.finished;
      Status st = ev.status;
      if (st == Status::kCancelled && !p->aborted) st = Status::kExecutorFailed;  // unasked
      if (st != Status::kOk && st != Status::kCancelled && !p->aborted) {
        std::string msg(reinterpret_cast<const char*>(words.data()),
                        std::min<std::size_t>(ev.message_bytes, words.size_bytes()));
        spdlog::warn("worker {}: request {} of client {} ends {}: {}", c.id, p->request_id, p->conn,
                     toString(st), escapeForDisplay(msg));
      }
      endRequest(key, st, Ending::ran(ev.output_tokens), now);
      return {};
    }
    case shm::WorkerEventKind::kPreempted:
      return onPreempted(c, ev, now);
  }
  return "an event of unknown kind";
}

void Server::onCacheEvent(WorkerState& w, shm::CacheOp op, std::span<const std::uint32_t> words) {
  // From its first event on, what it reports is what it holds: the blocks
  // the daemon sent it before are forgotten.
  if (!w.cache_events) {
    w.cache_events = true;
    w.cache.clear();
    // Reported before its first statement: held up to the configured bound
    // until the statement sizes it.
    if (!w.cache_sized) {
      const std::uint64_t bound = cfg_.endpoints[w.endpoint].worker.cache_blocks;
      w.cache.setCapacity(bound != 0 ? bound : kUnsizedCacheBlocks);
    }
  }
  ++w.cache_reports;
  const std::size_t n = words.size() / shm::kCacheWordsPerBlock;
  switch (op) {
    case shm::CacheOp::kStored:
      cache_chain_.resize(n);
      for (std::size_t i = 0; i < n; ++i) cache_chain_[i] = shm::decodeCacheBlock(words, i);
      w.cache.insert(cache_chain_);
      break;
    case shm::CacheOp::kRemoved:
      for (std::size_t i = 0; i < n; ++i) w.cache.erase(shm::decodeCacheBlock(words, i));
      break;
    case shm::CacheOp::kCleared:
      w.cache.clear();
      break;
  }
}

std::string Server::onPreempted(Connection& c, const shm::WorkerEvent& ev, TimeNs now) {
  Pending* p = assignedTo(ev.assignment, c.id);
  // Only a sequence it was asked for, and only after emitting all it generated.
  if (!p) return "PREEMPTED for " + notHeld(ev.assignment);
  if (p->preempt_asked == 0)
    return "PREEMPTED for request " + std::to_string(p->request_id) +
           ", which it was not asked to give back";
  if (ev.output_tokens != p->streamed) {
    return "PREEMPTED with output_tokens " + std::to_string(ev.output_tokens) + ", but " +
           std::to_string(p->streamed) + " emitted";
  }
  const std::uint64_t key = ev.assignment & 0xffffffffu;
  const EndpointId e = p->endpoint;
  WorkerState& w = *c.worker;
  if (w.running > 0) --w.running;
  p->preempt_asked = 0;
  if (workers_.preemptOutstanding(e) == key)
    workers_.preemptOutstanding(e) = WorkerPool::kNoPreempt;
  if (p->aborted) {  // cancelled meanwhile: its completion is out
    endRequest(key, Status::kCancelled, Ending::ran(p->streamed), now);
    return {};
  }
  if (!sched_.preempt(p->handle, now)) {
    endRequest(key, Status::kExecutorFailed, Ending::ran(p->streamed), now);
    return {};
  }
  // Back in its tenant's queue; the stream to its client simply pauses.
  p->worker = 0;
  workers_.stopped(e);
  ++stats_.preemptions[e];
  ++p->gen;  // a late event from this worker can never match it
  return {};
}

void Server::maybePreempt(EndpointId e, TimeNs now) {
  if (!sched_.spec().endpoints[e].preemption.enabled || sched_.queued(e) == 0 ||
      !workers_.preemptCheckDue(e, now, kPreemptCheckInterval)) {
    return;
  }
  std::uint64_t& outstanding = workers_.preemptOutstanding(e);
  if (outstanding != WorkerPool::kNoPreempt && pending_[outstanding].live &&
      pending_[outstanding].preempt_asked != 0) {
    return;  // one at a time: its answer frees the room first
  }
  outstanding = WorkerPool::kNoPreempt;
  const config::WorkerEndpointConfig& wc = cfg_.endpoints[e].worker;
  // A resumed ASSIGN carries prompt + generated ids + parameters in one cell.
  const std::uint64_t room = std::uint64_t{wc.max_prompt_tokens} + (shm::kMaxParamsBytes + 3) / 4;
  preempt_running_.clear();
  preempt_keys_.clear();
  for (std::uint64_t key = 0; key < pending_.size(); ++key) {
    const Pending& p = pending_[key];
    if (!p.live || p.worker == 0 || p.aborted || p.endpoint != e || p.preempt_asked != 0) continue;
    const Connection* holder = conns_.find(p.worker);
    if (!holder || !holder->worker || holder->worker->ignores_preempt) continue;
    const std::uint64_t words = (p.counts_only ? 0 : std::uint64_t{p.prompt_tokens}) + p.streamed +
                                (std::uint64_t{p.params_bytes} + 3) / 4;
    if (words > room) continue;
    // Its prompt's blocks its worker holds are cheap to recompute.
    const std::size_t held = holder->worker->cache.matched(sched_.prefixOf(p.handle));
    const auto cached = static_cast<std::uint32_t>(
        std::min<std::uint64_t>(std::uint64_t{held} * wc.prefix_block_tokens, p.prompt_tokens));
    preempt_running_.push_back({p.handle, p.streamed - p.streamed_at_dispatch, cached});
    preempt_keys_.push_back(key);
  }
  const core::Handle victim = sched_.preemptionVictim(e, now, preempt_running_);
  if (victim == 0) return;
  for (std::size_t i = 0; i < preempt_running_.size(); ++i) {
    if (preempt_running_[i].handle != victim) continue;
    const std::uint64_t key = preempt_keys_[i];
    Pending& p = pending_[key];
    shm::AssignmentRecord a;
    a.kind = shm::AssignmentKind::kPreempt;
    a.assignment = pending_.assignmentId(key);
    Connection& holder = *conns_.find(p.worker);
    holder.worker->aborts.push_back(shm::encodeAssignment(a));
    markDirty(holder);
    p.preempt_asked = now;
    outstanding = key;
    return;
  }
}

bool Server::relayTokens(Pending& p, std::span<const std::uint32_t> tokens, TimeNs emit_ns) {
  Connection* client = conns_.find(p.conn);
  if (!client) return true;  // gone: nothing to relay to
  Connection& c = *client;
  const std::uint32_t per_chunk = c.segment->layout().geometry.reply_tokens_per_slot;
  // First into the request's open chunk: the record written this pass and
  // not yet published, or the one waiting in the backlog while the client
  // is behind. An engine emitting one token per call costs the client one
  // record per chunk of tokens, not one per token.
  if (p.chunk_at == Pending::ChunkAt::kRing && p.chunk_pos >= c.producer->published() &&
      p.chunk_pos < c.producer->written() && p.chunk.output_tokens < per_chunk) {
    const auto n = static_cast<std::uint32_t>(
        std::min<std::size_t>(per_chunk - p.chunk.output_tokens, tokens.size()));
    const std::uint32_t at = p.chunk.output_tokens;
    p.chunk.output_tokens += n;
    c.producer->amend(p.chunk_pos, p.chunk, at, tokens.first(n));
    tokens = tokens.subspan(n);
  } else if (p.chunk_at == Pending::ChunkAt::kBacklog && p.chunk_pos >= c.backlog_popped &&
             p.chunk_pos - c.backlog_popped < c.backlog.size()) {
    Outgoing& o = c.backlog[p.chunk_pos - c.backlog_popped];
    if (o.slot.status == shm::kStreamChunk && o.slot.request_id == p.request_id &&
        o.slot.output_tokens < per_chunk) {
      const auto n = static_cast<std::uint32_t>(
          std::min<std::size_t>(per_chunk - o.slot.output_tokens, tokens.size()));
      o.tokens.insert(o.tokens.end(), tokens.begin(), tokens.begin() + n);
      o.slot.output_tokens += n;
      tokens = tokens.subspan(n);
    }
  }
  if (tokens.empty()) return true;
  const std::size_t chunks = (tokens.size() + per_chunk - 1) / per_chunk;
  // New chunks go straight into the ring while it has room and nothing waits
  // before them (flush() publishes them); only what does not fit is held,
  // and that is bounded per client.
  const std::uint64_t direct =
      c.backlog.empty() ? std::min<std::uint64_t>(c.producer->freeSlots(chunks), chunks) : 0;
  if (c.backlog_chunks + (chunks - direct) >
      cfg_.endpoints[p.endpoint].worker.client_buffer_chunks) {
    return false;
  }
  const std::uint32_t first = p.streamed - static_cast<std::uint32_t>(tokens.size());
  std::size_t k = 0;
  for (std::size_t i = 0; i < tokens.size(); i += per_chunk, ++k) {
    const std::size_t n = std::min<std::size_t>(per_chunk, tokens.size() - i);
    shm::CompletionSlot slot;
    slot.request_id = p.request_id;
    slot.tag = p.tag;
    slot.status = shm::kStreamChunk;
    slot.output_tokens = static_cast<std::uint32_t>(n);
    slot.queue_wait_ns = first + i;
    slot.service_ns = static_cast<std::uint64_t>(emit_ns);
    if (k < direct) {
      p.chunk_at = Pending::ChunkAt::kRing;
      p.chunk_pos = c.producer->written();
      p.chunk = slot;
      c.producer->write(slot, tokens.subspan(i, n));
      c.unpublished = true;
      markDirty(c);
      continue;
    }
    Outgoing& o = c.backlog.emplace_back();
    o.slot = slot;
    o.tokens.reserve(per_chunk);
    o.tokens.assign(tokens.begin() + static_cast<std::ptrdiff_t>(i),
                    tokens.begin() + static_cast<std::ptrdiff_t>(i + n));
    p.chunk_at = Pending::ChunkAt::kBacklog;
    p.chunk_pos = c.backlog_popped + c.backlog.size() - 1;
    markDirty(c);
    ++c.backlog_chunks;
  }
  return true;
}

void Server::abortRunning(std::uint64_t key, Status why, TimeNs now) {
  Pending& p = pending_[key];
  if (p.aborted) return;
  endRequest(key, why, Ending::abortedOnWorker(), now);
  Connection* holder = conns_.find(p.worker);
  if (!holder || !holder->worker) return;
  shm::AssignmentRecord a;
  a.kind = shm::AssignmentKind::kAbort;
  a.assignment = pending_.assignmentId(key);
  holder->worker->aborts.push_back(shm::encodeAssignment(a));
  markDirty(*holder);
}

void Server::cancelRequest(Connection& c, std::uint64_t request_id, TimeNs now) {
  for (std::uint64_t key = 0; key < pending_.size(); ++key) {
    Pending& p = pending_[key];
    if (!p.live || p.conn != c.id || p.request_id != request_id || p.aborted) continue;
    if (p.worker != 0) {
      abortRunning(key, Status::kCancelled, now);
    } else if (sched_.cancel(p.handle, Status::kCancelled, done_)) {
      finishDone(done_);
    }  // running on an in-daemon executor: it finishes, as it cannot be stopped
    return;
  }
}

void Server::abortClientRequests(const Connection& c, TimeNs now) {
  if (workers_.running() == 0) return;
  for (std::uint64_t key = 0; key < pending_.size(); ++key) {
    const Pending& p = pending_[key];
    if (p.live && p.conn == c.id && p.worker != 0 && !p.aborted) {
      abortRunning(key, Status::kCancelled, now);
    }
  }
}

void Server::workerLost(Connection& c, std::string_view why, TimeNs now) {
  const bool requeue = cfg_.endpoints[c.worker->endpoint].worker.requeue_on_loss && !shutting_down_;
  std::size_t requeued = 0, failed = 0;
  for (std::uint64_t key = 0; key < pending_.size(); ++key) {
    Pending& p = pending_[key];
    if (!p.live || p.worker != c.id) continue;
    if (p.aborted) {  // its completion is out; only the core's account is left
      endRequest(key, Status::kCancelled, Ending::ran(p.streamed), now);
    } else if (requeue && p.streamed == 0 && sched_.requeue(p.handle, now)) {
      p.worker = 0;
      workers_.stopped(p.endpoint);
      ++p.gen;  // a late event from the lost worker can never match it
      ++requeued;
    } else {
      ++failed;
      endRequest(key, Status::kExecutorFailed, Ending::ran(p.streamed), now);
    }
  }
  workers_.detach(c);
  spdlog::warn(
      "worker {} (pid {}) of endpoint {} is gone ({}): {} requests requeued, {} end "
      "EXECUTOR_FAILED",
      c.id, c.cred.pid, cfg_.endpoints[c.worker->endpoint].name, why, requeued, failed);
}

void Server::expireRunning(TimeNs now) {
  if (!workers_.runningCheckDue(now)) return;
  for (std::uint64_t key = 0; key < pending_.size(); ++key) {
    const Pending& p = pending_[key];
    if (!p.live || p.worker == 0 || p.aborted) continue;
    if (p.preempt_asked != 0 && now - p.preempt_asked >= kPreemptAnswerTimeout) {
      Connection* holder = conns_.find(p.worker);
      if (holder && holder->worker && !holder->worker->ignores_preempt) {
        holder->worker->ignores_preempt = true;
        spdlog::warn(
            "worker {} left a PREEMPT unanswered for {} ms; its sequences are not preempted "
            "again (it keeps running request {})",
            p.worker, kPreemptAnswerTimeout / kNsPerMs, p.request_id);
      }
      ++stats_.preempts_ignored;
      pending_[key].preempt_asked = 0;
      if (workers_.preemptOutstanding(p.endpoint) == key) {
        workers_.preemptOutstanding(p.endpoint) = WorkerPool::kNoPreempt;
      }
    }
    if (p.deadline <= now) {
      abortRunning(key, Status::kDeadlineExceeded, now);
      continue;
    }
    const std::uint64_t timeout_ms = cfg_.endpoints[p.endpoint].batch_timeout_ms;
    if (timeout_ms != 0 && now - p.dispatched >= static_cast<TimeNs>(timeout_ms) * kNsPerMs) {
      spdlog::error(
          "worker {}: request {} of client {} still running after batch_timeout_ms = {}; "
          "it ends EXECUTOR_FAILED",
          p.worker, p.request_id, p.conn, timeout_ms);
      abortRunning(key, Status::kExecutorFailed, now);
    }
  }
}

}  // namespace fairsched::daemon
