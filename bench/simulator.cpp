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

}  // namespace

std::vector<SimOutcome> simulate(const core::SchedulerSpec& spec,
                                 const std::vector<ExecutorModel>& executors,
                                 const std::vector<SimArrival>& arrivals) {
  // Request ids are arrival index + 1.
  core::Scheduler sched(spec);
  std::vector<SimOutcome> out(arrivals.size());
  std::vector<std::uint32_t> free_slots(spec.endpoints.size(), 0);
  for (std::size_t e = 0; e < spec.endpoints.size(); ++e) {
    free_slots[e] = e < executors.size() ? std::max<std::uint32_t>(1, executors[e].slots) : 1;
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
    // 1. Batches that finish now.
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
    // 4. Fill free slots (late binding).
    for (std::size_t e = 0; e < spec.endpoints.size(); ++e) {
      while (free_slots[e] > 0 && sched.nextBatch(static_cast<EndpointId>(e), now, batch, done)) {
        const ExecutorModel m = e < executors.size() ? executors[e] : ExecutorModel{};
        double work = 0;
        for (const auto& d : batch.requests) {
          out[d.id - 1].dispatch = now;
          work += d.input_tokens + arrivals[d.id - 1].output_tokens;
        }
        const double us = m.per_batch_us + m.per_token_us * work;
        const TimeNs service =
            std::max<TimeNs>(1, static_cast<TimeNs>(std::llround(us * kNsPerUs)));
        running.push(
            {now + service, service, static_cast<EndpointId>(e), batch.tokens, batch.requests});
        --free_slots[e];
      }
      for (const auto& d : done) finish(d, now);
      done.clear();
    }
    // 5. The next moment anything can happen.
    TimeNs wake = kNever;
    if (next < arrivals.size()) wake = std::min(wake, arrivals[next].t);
    if (!running.empty()) wake = std::min(wake, running.top().done_at);
    for (std::size_t e = 0; e < spec.endpoints.size(); ++e) {
      if (free_slots[e] > 0) {
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

}  // namespace fairsched::bench
