#include "bench/simulator.hpp"

#include <algorithm>
#include <cmath>
#include <queue>

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

// One continuous-batching engine of a worker endpoint.
class Engine {
 public:
  Engine(EndpointId e, const config::EngineConfig& m, const std::vector<SimArrival>& arrivals,
         std::vector<SimOutcome>& out)
      : e_(e), m_(m), arrivals_(arrivals), out_(out) {}

  TimeNs stepEnd() const { return step_end_; }
  bool busy() const { return step_end_ != kNever; }

  // At a step boundary: take work (preempting where the core says so) and
  // start the next step; stays idle when there is nothing to run.
  void start(core::Scheduler& sched, TimeNs now, std::vector<core::Done>& done) {
    takeWork(sched, now, done);
    if (seqs_.empty()) return;
    const core::EndpointSpec& spec = sched.spec().endpoints[e_];
    if (spec.preemption.enabled && sched.queued(e_) > 0) {
      // Give back what the core names, one at a time, while the waiting
      // request still does not fit.
      for (std::size_t n = seqs_.size(); n > 0 && sched.queued(e_) > 0; --n) {
        running_.clear();
        for (const Seq& s : seqs_) running_.push_back({s.handle, s.progress});
        const core::Handle victim = sched.preemptionVictim(e_, now, running_);
        if (victim == 0) break;
        auto it = std::find_if(seqs_.begin(), seqs_.end(),
                               [&](const Seq& s) { return s.handle == victim; });
        kv_used_ -= it->reserved;
        out_[it->index].preemptions++;
        seqs_.erase(it);
        sched.preempt(victim, now);
        takeWork(sched, now, done);
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
      if (s.prefilled < s.prompt) {
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
  };

  void takeWork(core::Scheduler& sched, TimeNs now, std::vector<core::Done>& done) {
    const auto free_seqs = static_cast<std::uint32_t>(
        m_.max_sequences - std::min<std::size_t>(seqs_.size(), m_.max_sequences));
    const std::uint64_t free_kv = m_.kv_tokens - std::min(kv_used_, m_.kv_tokens);
    if (free_seqs == 0 || !sched.take(e_, now, free_seqs, free_kv, batch_, done)) return;
    for (const core::Dispatched& d : batch_.requests) {
      const std::size_t index = d.id - 1;
      const SimArrival& a = arrivals_[index];
      SimOutcome& o = out_[index];
      if (o.dispatch < 0) o.dispatch = now;
      Seq s;
      s.handle = d.handle;
      s.index = index;
      s.prompt = d.input_tokens + d.resumed_tokens;
      s.generated = d.resumed_tokens;
      s.target = std::min(a.output_tokens, d.max_output_tokens);
      s.reserved = std::uint64_t{d.input_tokens} + d.max_output_tokens;
      if (s.generated >= s.target) {  // nothing (more) to generate
        sched.complete(d.handle, s.generated, now);
        o.status = Status::kOk;
        o.completion = now;
        continue;
      }
      kv_used_ += s.reserved;
      seqs_.push_back(s);
    }
  }

  EndpointId e_;
  config::EngineConfig m_;
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

std::vector<SimOutcome> simulate(const core::SchedulerSpec& spec,
                                 const std::vector<ExecutorModel>& executors,
                                 const std::vector<SimArrival>& arrivals) {
  // Request ids are arrival index + 1.
  core::Scheduler sched(spec);
  std::vector<SimOutcome> out(arrivals.size());
  std::vector<std::uint32_t> free_slots(spec.endpoints.size(), 0);
  std::vector<std::optional<Engine>> engines(spec.endpoints.size());
  for (std::size_t e = 0; e < spec.endpoints.size(); ++e) {
    free_slots[e] = e < executors.size() ? std::max<std::uint32_t>(1, executors[e].slots) : 1;
    if (e < executors.size() && executors[e].engine) {
      engines[e].emplace(static_cast<EndpointId>(e), *executors[e].engine, arrivals, out);
    }
  }
  std::priority_queue<Running, std::vector<Running>, std::greater<>> running;
  std::vector<core::Done> done;
  core::Batch batch;

  auto finish = [&](const core::Done& d, TimeNs now) {
    SimOutcome& o = out[d.id - 1];
    o.status = d.status;
    o.completion = now;
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
    for (auto& engine : engines) {
      if (engine && engine->stepEnd() <= now) engine->finishStep(sched, now);
    }
    // 2. Arrivals due now.
    while (next < arrivals.size() && arrivals[next].t <= now) {
      const SimArrival& a = arrivals[next];
      SimOutcome& o = out[next];
      o.arrival_index = next;
      o.arrival = a.t;
      const TenantId t = sched.tenants().acquire(a.tenant, a.tier_hint);
      core::Request r;
      r.id = next + 1;
      r.tenant = t;
      r.endpoint = a.endpoint;
      r.input_tokens = a.input_tokens;
      r.max_output_tokens = a.max_output_tokens != 0 ? a.max_output_tokens : a.output_tokens;
      r.priority = a.priority;
      r.deadline = a.deadline;
      const core::Admission adm =
          t == kNoTenant ? core::Admission{Status::kInvalid, 0, 0} : sched.submit(r, now);
      if (t != kNoTenant) sched.tenants().release(t);
      if (adm.status != Status::kOk) {
        o.status = adm.status;
        o.completion = now;
        o.retry_after = adm.retry_after;
      }
      ++next;
    }
    // 3. Deadlines.
    sched.expireDeadlines(now, done);
    for (const auto& d : done) finish(d, now);
    done.clear();
    // 4. Fill free slots and idle engines (late binding).
    for (std::size_t e = 0; e < spec.endpoints.size(); ++e) {
      if (engines[e]) {
        if (!engines[e]->busy()) engines[e]->start(sched, now, done);
      } else {
        while (free_slots[e] > 0 && sched.nextBatch(static_cast<EndpointId>(e), now, batch, done)) {
          const ExecutorModel m = e < executors.size() ? executors[e] : ExecutorModel{};
          double work = 0;
          for (const auto& d : batch.requests) {
            out[d.id - 1].dispatch = now;
            work += d.input_tokens + arrivals[d.id - 1].output_tokens;
          }
          const TimeNs service = micros(m.per_batch_us + m.per_token_us * work);
          running.push(
              {now + service, service, static_cast<EndpointId>(e), batch.tokens, batch.requests});
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
      if (engines[e]) {
        wake = std::min(wake, engines[e]->stepEnd());
      } else if (free_slots[e] > 0) {
        const TimeNs due = sched.batchDueAt(static_cast<EndpointId>(e));
        if (due != kNever) wake = std::min(wake, std::max(due, now + 1));
      }
    }
    const TimeNs deadline = sched.nextDeadline();
    if (deadline != kNever) wake = std::min(wake, std::max(deadline, now + 1));
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
