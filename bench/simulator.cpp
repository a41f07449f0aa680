#include "bench/simulator.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <queue>

#include "daemon/core/prefix_cache.hpp"
#include "daemon/core/prefix_router.hpp"
#include "daemon/core/scheduler.hpp"

namespace fairsched::bench {
namespace {

struct Running {
  TimeNs done_at;
  TimeNs service;
  EndpointId endpoint;
  std::uint64_t tokens;  // input + max output, the unit of the backlog throttle
  std::vector<core::Dispatched> requests;
  bool operator>(const Running& o) const { return done_at > o.done_at; }
};

TimeNs micros(double us) {
  return std::max<TimeNs>(1, static_cast<TimeNs>(std::llround(us * kNsPerUs)));
}

// One continuous-batching engine of a worker endpoint, with its prefix cache.
class Engine {
 public:
  Engine(EndpointId e, const ExecutorModel& m, std::uint32_t replica,
         const std::vector<SimArrival>& arrivals, std::vector<SimOutcome>& out)
      : e_(e),
        m_(*m.engine),
        replica_(replica),
        block_tokens_(std::max<std::uint32_t>(1, m.block_tokens)),
        cache_(m.cache_blocks),
        arrivals_(arrivals),
        out_(out) {}

  TimeNs stepEnd() const { return step_end_; }
  bool busy() const { return step_end_ != kNever; }
  std::uint32_t load() const { return static_cast<std::uint32_t>(seqs_.size()); }
  std::uint32_t freeSeqs() const {
    return static_cast<std::uint32_t>(m_.max_sequences -
                                      std::min<std::size_t>(seqs_.size(), m_.max_sequences));
  }
  std::uint64_t freeKv() const { return m_.kv_tokens - std::min(kv_used_, m_.kv_tokens); }
  std::size_t matched(std::span<const std::uint64_t> chain) const { return cache_.matched(chain); }

  // At a step boundary: take work (pull: from `sched` itself; placed: what
  // `refill` places) — preempting where the core says so — and start the
  // next step; stays idle when there is nothing to run.
  template <class Refill>
  void start(core::Scheduler& sched, TimeNs now, std::vector<core::Done>& done, bool pull,
             Refill&& refill) {
    if (pull) takeWork(sched, now, done);
    if (seqs_.empty()) return;
    const core::EndpointSpec& spec = sched.spec().endpoints[e_];
    if (spec.preemption.enabled && sched.queued(e_) > 0) {
      // Give back what the core names, one at a time, while the waiting
      // request still does not fit.
      for (std::size_t n = seqs_.size(); n > 0 && sched.queued(e_) > 0; --n) {
        running_.clear();
        for (const Seq& s : seqs_) {
          const auto cached = static_cast<std::uint32_t>(std::min<std::uint64_t>(
              std::uint64_t{cache_.matched(arrivals_[s.index].blocks)} * block_tokens_,
              arrivals_[s.index].input_tokens));
          running_.push_back({s.handle, s.progress, cached});
        }
        const core::Handle victim = sched.preemptionVictim(e_, now, running_);
        if (victim == 0) break;
        auto it = std::find_if(seqs_.begin(), seqs_.end(),
                               [&](const Seq& s) { return s.handle == victim; });
        kv_used_ -= it->reserved;
        out_[it->index].preemptions++;
        seqs_.erase(it);
        sched.preempt(victim, now);
        if (pull) {
          takeWork(sched, now, done);
        } else {
          refill();
        }
      }
    }
    // Prefill within the chunk budget, oldest first; then one token per
    // prefilled sequence (one that completes its prefill decodes at once).
    std::uint64_t budget = m_.chunked_prefill_tokens;
    std::uint64_t prefilled = 0;
    std::uint32_t decoding = 0;
    for (Seq& s : seqs_) {
      if (s.prefilled < s.prompt) {
        const auto n =
            static_cast<std::uint32_t>(std::min<std::uint64_t>(budget, s.prompt - s.prefilled));
        s.prefilled += n;
        budget -= n;
        prefilled += n;
        out_[s.index].prefilled_tokens += n;
        if (s.prefilled < s.prompt) continue;
      }
      ++decoding;
    }
    step_end_ = now + micros(m_.step_us + m_.prefill_token_us * static_cast<double>(prefilled) +
                             m_.decode_token_us * decoding);
  }

  // The step ends at `now`: each prefilled sequence emitted one token.
  void finishStep(core::Scheduler& sched, TimeNs now) {
    step_end_ = kNever;
    for (std::size_t i = 0; i < seqs_.size();) {
      Seq& s = seqs_[i];
      if (s.prefilled < s.prompt || !s.in_step) {
        s.in_step = true;  // one placed mid-step joins the next step
        ++i;
        continue;
      }
      SimOutcome& o = out_[s.index];
      if (o.first_token < 0) o.first_token = now;
      ++s.generated;
      ++s.progress;
      sched.charge(s.handle, 1, now);
      if (s.generated >= s.target) {
        sched.complete(s.handle, s.generated, now);
        o.status = Status::kOk;
        o.completion = now;
        kv_used_ -= s.reserved;
        seqs_.erase(seqs_.begin() + static_cast<std::ptrdiff_t>(i));  // keeps arrival order
        continue;
      }
      ++i;
    }
  }

  // A request the core dispatched joins this engine: at once when idle, at
  // the next step when one is running. The cached leading blocks of its
  // prompt are not prefilled (at least one token always is, as engines do),
  // and the engine holds its whole chain from now on.
  void accept(core::Scheduler& sched, const core::Dispatched& d, TimeNs now) {
    const std::size_t index = d.id - 1;
    const SimArrival& a = arrivals_[index];
    SimOutcome& o = out_[index];
    if (o.dispatch < 0) o.dispatch = now;
    o.replica = replica_;
    Seq s;
    s.handle = d.handle;
    s.index = index;
    s.in_step = !busy();
    const std::size_t hit = cache_.touch(a.blocks);
    o.blocks_queried += static_cast<std::uint32_t>(a.blocks.size());
    o.blocks_hit += static_cast<std::uint32_t>(hit);
    cache_.insert(a.blocks);
    const std::uint64_t cached = std::min<std::uint64_t>(
        hit * std::uint64_t{block_tokens_}, d.input_tokens > 0 ? d.input_tokens - 1 : 0);
    o.cached_tokens += cached;
    s.prompt = d.input_tokens + d.resumed_tokens - static_cast<std::uint32_t>(cached);
    s.generated = d.resumed_tokens;
    s.target = std::min(a.output_tokens, d.max_output_tokens);
    s.reserved = std::uint64_t{d.input_tokens} + d.max_output_tokens;
    if (s.generated >= s.target) {  // nothing (more) to generate
      sched.complete(d.handle, s.generated, now);
      o.status = Status::kOk;
      o.completion = now;
      return;
    }
    kv_used_ += s.reserved;
    seqs_.push_back(s);
  }

 private:
  struct Seq {
    core::Handle handle = 0;
    std::size_t index = 0;     // into arrivals / outcomes
    std::uint32_t prompt = 0;  // to prefill: input, plus the prefix a resumed one recomputes
    std::uint32_t prefilled = 0;
    std::uint32_t target = 0;  // true output length
    std::uint32_t generated = 0;
    std::uint32_t progress = 0;  // tokens since this dispatch
    std::uint64_t reserved = 0;  // KV tokens
    bool in_step = true;         // part of the running step (placed mid-step: not yet)
  };

  void takeWork(core::Scheduler& sched, TimeNs now, std::vector<core::Done>& done) {
    const std::uint32_t free_seqs = freeSeqs();
    if (free_seqs == 0 || !sched.take(e_, now, free_seqs, freeKv(), batch_, done)) return;
    for (const core::Dispatched& d : batch_.requests) accept(sched, d, now);
  }

  EndpointId e_;
  config::EngineConfig m_;
  std::uint32_t replica_;
  std::uint32_t block_tokens_;
  core::BlockLru cache_;
  const std::vector<SimArrival>& arrivals_;
  std::vector<SimOutcome>& out_;
  std::vector<Seq> seqs_;
  std::uint64_t kv_used_ = 0;
  TimeNs step_end_ = kNever;
  core::Batch batch_;
  std::vector<core::Scheduler::Running> running_;
};

}  // namespace

std::vector<ExecutorModel> executorModels(const config::Config& cfg) {
  std::vector<ExecutorModel> out;
  for (const auto& ec : cfg.endpoints) {
    ExecutorModel m{ec.cpu.per_batch_us, ec.cpu.per_token_us, ec.cpu.threads, std::nullopt};
    if (ec.executor == config::ExecutorKind::kWorker) m.engine = ec.engine;
    out.push_back(m);
  }
  return out;
}

namespace {

// What one engine holds, for the core's locality choice.
class CacheProbe final : public core::Scheduler::LocalityProbe {
 public:
  explicit CacheProbe(const Engine& engine) : engine_(engine) {}
  std::size_t matched(std::span<const std::uint64_t> chain) const override {
    return engine_.matched(chain);
  }

 private:
  const Engine& engine_;
};

// The engines of one worker endpoint and where each takes its work from.
struct EngineGroup {
  ExecutorModel model;
  std::vector<Engine> engines;
  std::vector<core::Scheduler*> sched;           // per engine: the shared core, or its own (router)
  std::vector<core::BlockLru> routed;            // router: what it sent to each engine
  std::vector<core::RouteCandidate> candidates;  // scratch
};

// The router's choice for `a`: by prefix within the load bound, each
// engine's load being what it runs and what waits in its own queue.
std::size_t routeOnArrival(EngineGroup& g, EndpointId e, const SimArrival& a) {
  g.candidates.clear();
  std::uint64_t total = 0;
  for (std::size_t r = 0; r < g.engines.size(); ++r) {
    const auto load = static_cast<std::uint32_t>(g.engines[r].load() + g.sched[r]->queued(e));
    total += load;
    g.candidates.push_back({load, 1, g.routed[r].matched(a.blocks), true});
  }
  const std::size_t r = core::chooseWorker(core::Routing::kPrefix, g.candidates, total,
                                           g.engines.size(), g.model.load_slack);
  g.routed[r].insert(a.blocks);
  return r;
}

}  // namespace

std::vector<SimOutcome> simulate(const core::SchedulerSpec& spec,
                                 const std::vector<ExecutorModel>& executors,
                                 const std::vector<SimArrival>& arrivals) {
  // Request ids are arrival index + 1.
  core::Scheduler sched(spec);
  std::vector<SimOutcome> out(arrivals.size());
  std::vector<std::uint32_t> free_slots(spec.endpoints.size(), 0);
  std::vector<std::optional<EngineGroup>> groups(spec.endpoints.size());
  // Router placement: each engine queues first come, first served.
  core::SchedulerSpec fifo_spec = spec;
  fifo_spec.policy = Policy::kFifo;
  std::vector<std::unique_ptr<core::Scheduler>> own;
  for (std::size_t e = 0; e < spec.endpoints.size(); ++e) {
    free_slots[e] = e < executors.size() ? std::max<std::uint32_t>(1, executors[e].slots) : 1;
    if (e >= executors.size() || !executors[e].engine) continue;
    EngineGroup& g = groups[e].emplace();
    g.model = executors[e];
    const std::uint32_t n = std::max<std::uint32_t>(1, g.model.replicas);
    g.engines.reserve(n);
    for (std::uint32_t r = 0; r < n; ++r) {
      g.engines.emplace_back(static_cast<EndpointId>(e), g.model, r, arrivals, out);
      if (g.model.placement == Placement::kRouter) {
        own.push_back(std::make_unique<core::Scheduler>(fifo_spec));
        g.sched.push_back(own.back().get());
        g.routed.emplace_back(g.model.cache_blocks);
      } else {
        g.sched.push_back(&sched);
      }
    }
  }
  std::vector<core::Scheduler*> all_scheds{&sched};
  for (const auto& o : own) all_scheds.push_back(o.get());
  std::priority_queue<Running, std::vector<Running>, std::greater<>> running;
  std::vector<core::Done> done;
  core::Batch batch;

  auto finish = [&](const core::Done& d, TimeNs now) {
    SimOutcome& o = out[d.id - 1];
    o.status = d.status;
    o.completion = now;
  };
  // Roomiest and prefix placement: the core's next choice, one at a time,
  // to the engine chooseWorker() names, while any engine has room.
  auto place = [&](EngineGroup& g, EndpointId e, TimeNs now) {
    const core::Routing routing =
        g.model.placement == Placement::kPrefix ? core::Routing::kPrefix : core::Routing::kRoomiest;
    for (;;) {
      std::uint64_t max_kv = 0;
      std::size_t with_room = 0, only = 0;
      for (std::size_t r = 0; r < g.engines.size(); ++r) {
        if (g.engines[r].freeSeqs() == 0) continue;
        ++with_room;
        only = r;
        max_kv = std::max(max_kv, g.engines[r].freeKv());
      }
      // One engine with room: the core picks for it, locality within
      // fairness; several: the fair choice, placed by prefix among them.
      const CacheProbe probe(g.engines[only]);
      const core::Scheduler::LocalityProbe* p =
          routing == core::Routing::kPrefix && with_room == 1 ? &probe : nullptr;
      if (with_room == 0 || !sched.take(e, now, 1, max_kv, batch, done, p)) return;
      const core::Dispatched d = batch.requests.front();
      const std::vector<std::uint64_t>& chain = arrivals[d.id - 1].blocks;
      const std::uint64_t need = std::uint64_t{d.input_tokens} + d.max_output_tokens;
      g.candidates.clear();
      std::uint64_t total = 0;
      for (const Engine& en : g.engines) {
        total += en.load();
        g.candidates.push_back({en.load(), en.freeSeqs(),
                                routing == core::Routing::kPrefix ? en.matched(chain) : 0,
                                en.freeKv() >= need});
      }
      // take() fitted the request to the roomiest engine's KV: someone fits.
      const std::size_t r =
          core::chooseWorker(routing, g.candidates, total, g.engines.size(), g.model.load_slack);
      g.engines[r].accept(sched, d, now);
    }
  };

  std::size_t next = 0;
  TimeNs now = arrivals.empty() ? 0 : arrivals.front().t;
  for (;;) {
    // 1. Batches and engine steps that finish now.
    while (!running.empty() && running.top().done_at <= now) {
      const Running r = running.top();
      running.pop();
      for (const auto& d : r.requests) {
        const SimArrival& a = arrivals[d.id - 1];
        sched.complete(d.handle, a.output_tokens, now);
        SimOutcome& o = out[d.id - 1];
        o.status = Status::kOk;
        o.completion = now;
      }
      sched.batchServed(r.endpoint, r.tokens, r.service);
      ++free_slots[r.endpoint];
    }
    for (auto& g : groups) {
      if (!g) continue;
      for (std::size_t r = 0; r < g->engines.size(); ++r) {
        if (g->engines[r].stepEnd() <= now) g->engines[r].finishStep(*g->sched[r], now);
      }
    }
    // 2. Arrivals due now.
    while (next < arrivals.size() && arrivals[next].t <= now) {
      const SimArrival& a = arrivals[next];
      SimOutcome& o = out[next];
      o.arrival_index = next;
      o.arrival = a.t;
      core::Scheduler* target = &sched;
      if (a.endpoint < groups.size() && groups[a.endpoint] &&
          groups[a.endpoint]->model.placement == Placement::kRouter) {
        EngineGroup& g = *groups[a.endpoint];
        target = g.sched[routeOnArrival(g, a.endpoint, a)];
      }
      const TenantId t = target->tenants().acquire(a.tenant, a.tier_hint);
      core::Request r;
      r.id = next + 1;
      r.tenant = t;
      r.endpoint = a.endpoint;
      r.input_tokens = a.input_tokens;
      r.max_output_tokens = a.max_output_tokens != 0 ? a.max_output_tokens : a.output_tokens;
      r.priority = a.priority;
      r.deadline = a.deadline;
      const core::Admission adm =
          t == kNoTenant ? core::Admission{Status::kInvalid, 0, 0} : target->submit(r, now);
      if (t != kNoTenant) target->tenants().release(t);
      if (adm.status == Status::kOk && !a.blocks.empty() && a.endpoint < groups.size() &&
          groups[a.endpoint] && groups[a.endpoint]->model.placement == Placement::kPrefix) {
        target->setPrefix(adm.handle, a.blocks);
      }
      if (adm.status != Status::kOk) {
        o.status = adm.status;
        o.completion = now;
        o.retry_after = adm.retry_after;
      }
      ++next;
    }
    // 3. Deadlines.
    for (core::Scheduler* s : all_scheds) s->expireDeadlines(now, done);
    for (const auto& d : done) finish(d, now);
    done.clear();
    // 4. Fill free slots and idle engines (late binding).
    for (std::size_t e = 0; e < spec.endpoints.size(); ++e) {
      const auto eid = static_cast<EndpointId>(e);
      if (groups[e]) {
        EngineGroup& g = *groups[e];
        const bool pull =
            g.model.placement == Placement::kPull || g.model.placement == Placement::kRouter;
        if (!pull) place(g, eid, now);
        for (std::size_t r = 0; r < g.engines.size(); ++r) {
          if (!g.engines[r].busy()) {
            g.engines[r].start(*g.sched[r], now, done, pull, [&] { place(g, eid, now); });
          }
        }
      } else {
        while (free_slots[e] > 0 && sched.nextBatch(eid, now, batch, done)) {
          const ExecutorModel m = e < executors.size() ? executors[e] : ExecutorModel{};
          double work = 0;
          for (const auto& d : batch.requests) {
            out[d.id - 1].dispatch = now;
            work += d.input_tokens + arrivals[d.id - 1].output_tokens;
          }
          const TimeNs service = micros(m.per_batch_us + m.per_token_us * work);
          running.push({now + service, service, eid, batch.tokens, batch.requests});
          --free_slots[e];
        }
      }
      for (const auto& d : done) finish(d, now);
      done.clear();
    }
    // 5. The next moment anything can happen.
    TimeNs wake = kNever;
    if (next < arrivals.size()) wake = std::min(wake, arrivals[next].t);
    if (!running.empty()) wake = std::min(wake, running.top().done_at);
    for (std::size_t e = 0; e < spec.endpoints.size(); ++e) {
      if (groups[e]) {
        for (const Engine& en : groups[e]->engines) wake = std::min(wake, en.stepEnd());
      } else if (free_slots[e] > 0) {
        const TimeNs due = sched.batchDueAt(static_cast<EndpointId>(e));
        if (due != kNever) wake = std::min(wake, std::max(due, now + 1));
      }
    }
    for (core::Scheduler* s : all_scheds) {
      const TimeNs deadline = s->nextDeadline();
      if (deadline != kNever) wake = std::min(wake, std::max(deadline, now + 1));
    }
    if (wake == kNever) break;
    now = std::max(now, wake);
  }
  return out;
}

std::vector<SimOutcome> simulateFloor(const std::vector<ExecutorModel>& executors,
                                      const std::vector<SimArrival>& arrivals) {
  std::vector<SimOutcome> out(arrivals.size());
  for (std::size_t i = 0; i < arrivals.size(); ++i) {
    const SimArrival& a = arrivals[i];
    SimOutcome& o = out[i];
    o.arrival_index = i;
    o.arrival = a.t;
    o.dispatch = a.t;
    o.status = Status::kOk;
    const ExecutorModel m = a.endpoint < executors.size() ? executors[a.endpoint] : ExecutorModel{};
    if (!m.engine) {
      o.completion =
          a.t + micros(m.per_batch_us +
                       m.per_token_us * (static_cast<double>(a.input_tokens) + a.output_tokens));
      continue;
    }
    const config::EngineConfig& g = *m.engine;
    if (a.output_tokens == 0) {
      o.completion = a.t;
      continue;
    }
    // Prefill in chunks; the step that completes it decodes the first token.
    TimeNs t = a.t;
    std::uint32_t left = a.input_tokens;
    do {
      const std::uint32_t n = std::min(left, g.chunked_prefill_tokens);
      left -= n;
      t += micros(g.step_us + g.prefill_token_us * n + (left == 0 ? g.decode_token_us : 0.0));
    } while (left > 0);
    o.first_token = t;
    o.completion = t + (a.output_tokens - 1) * micros(g.step_us + g.decode_token_us);
  }
  return out;
}

}  // namespace fairsched::bench
