// The scheduling core: admission (queue bound, backlog throttle, rate limits),
// per-tenant queues, and batch formation — tier selector → across-tenant
// selector (DRR, recent or vtc) → priority, repeated until the batch is full —
// or the `fifo` baseline. Pure logic: no I/O, no threads, no clock; `now`
// comes in with every call. One Scheduler serves every endpoint; each endpoint
// has its own queues, selectors and batch limits. Single-threaded: the
// daemon's event loop owns it.
//
// Every request handed to submit() ends in exactly one way: rejected at once
// (the Admission says why), or later through nextBatch() (dispatched, or
// expired into `done`), cancel()/cancelOwner()/cancelAll() (into `done`).
// A dispatched request stays in flight until complete() is called for it.
//
// Batch formation (nextBatch). A batch is formed only when the executor has
// room for it (the caller asks then: late binding), and only when it is worth
// it: the queue holds a full batch, or the oldest queued request has waited
// max_wait. Requests are then taken in fair order until max_batch_requests or
// max_batch_tokens (input + max output tokens) is reached. When the next fair
// choice does not fit the batch's remaining token budget, the batch closes
// there: the request is not skipped and not charged, and its tenant keeps its
// turn and deficit, so it is the first choice of the next batch. (Filling the
// gap with smaller requests of other tenants would let a tenant of small
// requests overtake one of large requests again and again.) A request can
// never exceed a batch on its own: submit() rejects it as INVALID.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "daemon/core/backlog_throttle.hpp"
#include "daemon/core/drr_scheduler.hpp"
#include "daemon/core/fifo_queue.hpp"
#include "daemon/core/fleet_gate.hpp"
#include "daemon/core/preemption.hpp"
#include "daemon/core/rate_limiter.hpp"
#include "daemon/core/recent_counter.hpp"
#include "daemon/core/saved_state.hpp"
#include "daemon/core/scheduler_spec.hpp"
#include "daemon/core/tenant_queue.hpp"
#include "daemon/core/tenant_selector.hpp"
#include "daemon/core/tenant_table.hpp"
#include "daemon/core/tier_selector.hpp"
#include "daemon/core/types.hpp"

namespace fairsched::core {

// Identifies an admitted request until it completes; 0 is never a handle.
using Handle = std::uint64_t;

struct Request {
  std::uint64_t id = 0;  // the caller's id, echoed in completions
  TenantId tenant = kNoTenant;
  EndpointId endpoint = 0;
  std::uint32_t input_tokens = 0;
  std::uint32_t max_output_tokens = 0;
  std::int32_t priority = 0;  // higher first, within the tenant
  TimeNs deadline = kNever;   // absolute; past it the request is not run
  std::uint64_t owner = 0;    // e.g. the client connection, for cancelOwner()
};

struct Admission {
  Status status = Status::kOk;  // kOk: queued
  TimeNs retry_after = 0;       // RATE_LIMITED: how long until the same request would be admitted
  Handle handle = 0;            // kOk only
};

struct Dispatched {
  Handle handle = 0;
  std::uint64_t id = 0;
  TenantId tenant = kNoTenant;
  std::uint32_t input_tokens = 0;
  std::uint32_t max_output_tokens = 0;
  TimeNs arrival = 0;
  // Output tokens it generated before it was preempted (0 on a first
  // dispatch): the engine resumes it from prompt + those tokens.
  std::uint32_t resumed_tokens = 0;
};

struct Batch {
  EndpointId endpoint = 0;
  std::vector<Dispatched> requests;
  std::uint64_t tokens = 0;  // input + max output over the batch
  void clear() {
    requests.clear();
    tokens = 0;
  }
};

// A request the core finished without running it.
struct Done {
  std::uint64_t id = 0;
  TenantId tenant = kNoTenant;
  EndpointId endpoint = 0;
  Status status = Status::kOk;
};

// Counters of one tenant on one endpoint.
struct TenantStats {
  std::uint64_t submitted = 0;
  std::uint64_t admitted = 0;
  std::uint64_t rejected_rate_limited = 0;
  std::uint64_t rejected_overloaded = 0;
  std::uint64_t rejected_queue_full = 0;
  std::uint64_t rejected_invalid = 0;
  std::uint64_t dispatched = 0;
  std::uint64_t completed = 0;
  std::uint64_t expired = 0;
  std::uint64_t cancelled = 0;
  std::uint64_t tokens_served = 0;  // input + actual output of completed requests
  std::uint64_t preempted = 0;      // times one of its running requests was given back
};

struct TenantView {
  TenantId tenant = kNoTenant;
  std::uint32_t queued = 0;
  std::uint32_t in_flight = 0;
  std::uint64_t queued_tokens = 0;
  std::int64_t deficit = 0;
  double expected_output = 0;  // adaptive cost model's estimate
  std::uint64_t recent_tokens =
      0;  // served over the last RecentCounter::kSeconds (view() with now)
  TenantStats stats;
};

class Scheduler {
 public:
  explicit Scheduler(SchedulerSpec spec);
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // The spec the scheduler was built from. Its `tenants` list is empty: the
  // listed tenants live in tenants() from construction on.
  const SchedulerSpec& spec() const { return spec_; }
  TenantTable& tenants() { return tenants_; }
  const TenantTable& tenants() const { return tenants_; }

  // A configuration reload, applied between two decisions without losing a
  // queued or in-flight request. `spec` must keep the policy and the
  // endpoints (same names, same order, same executor parallelism), and no
  // endpoint's max_batch_tokens may shrink (a queued request must still fit
  // a batch); otherwise nothing changes and the error says why. Everything else may change: tiers
  // (matched by name; a tenant whose tier is gone moves to the default tier), listed tenants,
  // weights, queue bounds, quanta, batch limits and rate limits. Limit
  // windows carry over where a limit keeps its unit and window, so a reload
  // never resets a tenant's usage. Each tier's DRR round restarts (deficits
  // return to zero), which the fairness bound allows for: it holds over
  // every interval that does not span a reload. Requests already queued stay
  // queued; ones over a new, smaller queue bound are not dropped (the bound
  // applies to new submissions).
  std::optional<std::string> reconfigure(SchedulerSpec spec);
  // Count fleet-scoped limits through `gate` (not owned; must outlive the
  // scheduler). Tenant states created before the call keep counting them
  // locally, so call it before the first submit(). Without a gate,
  // fleet-scoped limits are counted like host limits.
  void setFleetGate(FleetGate* gate) { fleet_gate_ = gate; }

  // Admit or reject. REQUIRES: r.tenant was acquired from tenants().
  Admission submit(const Request& r, TimeNs now);

  // When endpoint `e` wants nextBatch() called: `now` or earlier when a batch
  // is due, kNever when nothing is queued.
  TimeNs batchDueAt(EndpointId e) const;
  // The latest time endpoint `e`'s pending batch can have become due (its
  // queue went non-empty max_wait before; a full batch is due sooner);
  // kNever when nothing is queued.
  TimeNs dueBy(EndpointId e) const {
    const auto& ep = endpoints_[e];
    return ep.queued == 0 ? kNever : ep.pending_since + ep.spec.max_wait;
  }

  // Form a batch of endpoint `e` into `out` (cleared first) for a consumer
  // with room for at most `max_requests` requests and `max_tokens` tokens
  // (input + max output) right now — e.g. a worker's free sequences and KV
  // tokens: taken at once, in fair order, closing before the first choice
  // that does not fit (it keeps its turn). Requests found past their deadline
  // are appended to `done` as DEADLINE_EXCEEDED. Returns false when nothing
  // could be taken.
  //
  // With a `probe` (prefix routing: the one worker with room), the batch's
  // first request may be another than the fair choice, for locality: the
  // one whose prefix the worker holds most (strictly more than the fair
  // choice's; ties keep it) among
  //  - the chosen tenant's next kLocalityScan queued requests of its head's
  //    priority and without a deadline — no fairness cost; a head passed
  //    over kMaxPassedOver times is taken regardless, so none waits for ever;
  //  - the heads (and their next requests, as above) of the tier's other
  //    backlogged tenants within spec.locality_slack of the least served
  //    (recent and vtc fairness), at most kLocalityFlows of them.
  // Only requests whose prefix was given (setPrefix) can match.
  class LocalityProbe {
   public:
    virtual ~LocalityProbe() = default;
    // Leading blocks of `chain` the worker holds.
    virtual std::size_t matched(std::span<const std::uint64_t> chain) const = 0;
  };
  static constexpr std::size_t kLocalityScan = 8;
  static constexpr std::size_t kLocalityFlows = 8;
  static constexpr std::uint8_t kMaxPassedOver = 4;
  bool take(EndpointId e, TimeNs now, std::uint32_t max_requests, std::uint64_t max_tokens,
            Batch& out, std::vector<Done>& done, const LocalityProbe* probe = nullptr);
  // The prefix chain of queued request `h` (include/fairsched/prefix_hash.hpp),
  // kept until it leaves the queue, for take() with a probe. Ignored for an
  // unknown handle or one not queued.
  void setPrefix(Handle h, std::vector<std::uint64_t> chain);
  // Its chain while queued or in flight; empty when none was given.
  std::span<const std::uint64_t> prefixOf(Handle h) const;
  // take() for the sequences a worker endpoint keeps as headroom
  // ([endpoints.X.worker] headroom): only from tenants with nothing in flight
  // on `e` — one request each, the tenant that became such first first —
  // whatever the fair order (the request is charged as any dispatch: a DRR
  // flow goes into debt, a service counter grows). A light tenant's first
  // request thus starts while a heavy one holds every other sequence. Fair
  // policy only (false under fifo).
  bool takeHeadroom(EndpointId e, TimeNs now, std::uint32_t max_requests, std::uint64_t max_tokens,
                    Batch& out, std::vector<Done>& done);
  // take() with the endpoint's batch limits, when a batch is due (see
  // batchDueAt; false, with `out` empty, when not). `force` forms a batch from
  // whatever is queued, due or not.
  bool nextBatch(EndpointId e, TimeNs now, Batch& out, std::vector<Done>& done, bool force = false);

  // A dispatched request generated `tokens` more output tokens. On a
  // per_token endpoint they are charged to its tenant at once (DRR deficit,
  // service counters); elsewhere nothing changes (complete() counts the
  // output then). False for an unknown handle or one not in flight.
  bool charge(Handle h, std::uint32_t tokens, TimeNs now);

  // A dispatched request goes back to its tenant's queue at its old place
  // (its worker was lost before it produced anything): what its dispatch
  // charged is given back, its token reservation is kept. False for an
  // unknown handle or one not in flight.
  bool requeue(Handle h, TimeNs now);

  // Preemption (worker endpoints). A dispatched request goes back to its
  // tenant's queue at its old place after generating `emitted` output tokens
  // (what charge() was told, or more): it keeps what it was charged — its
  // client received that service — and its next dispatch charges nothing for
  // the prompt the engine recomputes; Dispatched::resumed_tokens says where
  // it resumes. Counts against the endpoint's preemption rate. False for an
  // unknown handle or one not in flight.
  bool preempt(Handle h, TimeNs now);

  struct Running {
    Handle handle = 0;
    std::uint32_t progress = 0;  // output tokens since it was last dispatched
    // Of its prompt, the tokens its worker's prefix cache holds: resuming
    // it does not compute them again (0 when unknown).
    std::uint32_t cached_tokens = 0;
  };
  // The running request to preempt so that the endpoint's next choice can
  // run, or 0: when preemption is on and its rate allows, a running request
  // of a lower tier than the next choice's (the lowest tier first), else one
  // of the running tenant served most, if the waiting tenant runs fewer
  // sequences than its weighted share of those `running` in its tier, the
  // other runs more than its share (and at least two more than the waiting
  // one), and it was served more per weight (by at least a quantum,
  // min_progress_tokens at the least); among its requests the newest.
  // Requests that made less progress than min_progress_tokens since they last
  // started are never chosen. The choice itself: VictimChooser, preemption.hpp.
  Handle preemptionVictim(EndpointId e, TimeNs now, std::span<const Running> running);

  // The prompt of a dispatched request turned out to be `input_tokens` long
  // (a worker that counts tokens better than the submitter estimated: the
  // gateway's usage). Its tenant is charged the difference at once (DRR
  // deficit or service counter) and its token-limit reservation is settled
  // by it at completion (a longer prompt uses up that much of the unused
  // output reservation). False for an unknown handle or one not in flight.
  bool settleInput(Handle h, std::uint32_t input_tokens, TimeNs now);

  // A dispatched request finished after producing `output_tokens`: refunds
  // the unused token reservation and, under the adaptive cost model, corrects
  // the tenant's deficit by the actual cost. Returns false for an unknown handle.
  // `ended` is the status it ended with: one ended while running by its
  // client (kCancelled: a cancel, or the client gone) counts in the tenant's
  // stats as cancelled, by its deadline (kDeadlineExceeded) as expired, any
  // other as completed.
  bool complete(Handle h, std::uint32_t output_tokens, TimeNs now, Status ended = Status::kOk);

  // A batch of `tokens` (input + max output) took `service_ns` on one executor slot.
  void batchServed(EndpointId e, std::uint64_t tokens, TimeNs service_ns);

  // Withdraw a queued request; in-flight ones cannot be withdrawn (false).
  bool cancel(Handle h, Status why, std::vector<Done>& done);
  // Withdraw every queued request of `owner` (only those of `tenant` unless
  // it is kNoTenant). Returns how many.
  std::size_t cancelOwner(std::uint64_t owner, Status why, std::vector<Done>& done,
                          TenantId tenant = kNoTenant);
  // Withdraw every queued request (shutdown).
  std::size_t cancelAll(Status why, std::vector<Done>& done);

  // Complete every queued request whose deadline is <= now.
  void expireDeadlines(TimeNs now, std::vector<Done>& done);
  // The earliest deadline among queued requests; kNever when none.
  TimeNs nextDeadline();

  // Drop per-endpoint state of up to `budget` tenants that are idle (nothing
  // queued or in flight, limit windows empty, idle for idle_timeout). Returns
  // how many were dropped. Call it now and then; it resumes where it stopped.
  std::size_t collectIdle(TimeNs now, std::size_t budget);

  std::size_t queued(EndpointId e) const { return endpoints_[e].queued; }
  std::uint64_t queuedTokens(EndpointId e) const { return endpoints_[e].queued_tokens; }
  std::size_t inFlight() const { return in_flight_; }
  std::size_t activeTenantStates() const;
  // `now` > 0 fills recent_tokens.
  std::optional<TenantView> view(TenantId t, EndpointId e, TimeNs now = 0) const;
  // Requests of tenant `t` queued on any endpoint (O(endpoints)).
  std::uint64_t queuedOf(TenantId t) const;
  // Tokens served on `e` over the last RecentCounter::kSeconds, all tenants.
  std::uint64_t recentTokens(EndpointId e, TimeNs now) const {
    return endpoints_[e].recent.sum(now);
  }
  std::vector<LimitUsage> limitUsage(TenantId t, EndpointId e, TimeNs now);
  const BacklogThrottle& throttle(EndpointId e) const { return endpoints_[e].throttle; }

  // Keeping what the scheduler learned across a restart (the daemon's state
  // file, daemon/server/state_store.hpp): limit windows, the adaptive cost
  // estimate and fairness service of each tenant on each endpoint.
  // saveStates passes the tenant states of endpoint `e` from `cursor` on to
  // `sink` (those with nothing worth keeping are skipped), looking at most
  // `budget` of them, and advances `cursor`: a snapshot of 100,000 tenants
  // is taken a slice per loop pass. True when the endpoint is done.
  bool saveStates(EndpointId e, std::size_t& cursor, std::size_t budget, TimeNs now,
                  SavedStateSink& sink);
  // Tenant `t`'s state on `e` as saved `elapsed` ago (ages in `s` are as of
  // the snapshot; `elapsed` is added to them and service decays over it).
  // Creates the tenant's state, which stays like one a submission made:
  // until it is idle and its windows are empty. Limits the config no longer
  // has are ignored; changed amounts keep the usage. Call it before the first
  // submit().
  void restoreState(EndpointId e, TenantId t, const SavedTenantState& s, TimeNs elapsed,
                    TimeNs now);
  void restoreServiceRate(EndpointId e, double tokens_per_s) {
    endpoints_[e].throttle.restoreRate(tokens_per_s);
  }

 private:
  enum class SlotState : std::uint8_t { kFree, kQueued, kInFlight };
  struct Slot {
    Request req;
    TimeNs arrival = 0;
    std::int64_t charged = 0;          // DRR cost charged at dispatch (and per token since)
    std::uint64_t seq = 0;             // arrival order, kept across a requeue
    std::uint32_t emitted = 0;         // output tokens charged through charge()
    bool resumed = false;              // preempted: its next dispatch charges no prompt
    std::uint32_t reserved_input = 0;  // input tokens reserved at admission
    TimeNs dispatched_at = 0;
    std::uint32_t ts = 0;  // index of the tenant's state on the endpoint
    std::uint32_t gen = 1;
    SlotState state = SlotState::kFree;
    std::uint8_t passed_over = 0;  // times a take() chose another of its tenant's for locality
  };
  // What a decision touches comes first (prefetchUpcoming fetches the first
  // kHotLines lines); counters and the limiter come after.
  struct TenantState {
    TenantQueue queue;
    std::uint64_t queued_tokens = 0;
    double weight = 1.0;
    double expected_output = -1.0;  // adaptive: EMA of actual output; < 0 = none yet
    std::uint32_t queued = 0;
    std::uint32_t in_flight = 0;
    std::uint32_t withdrawn = 0;   // dead entries still in `queue`
    bool newcomer_listed = false;  // in EndpointState::newcomers
    std::uint32_t queue_limit = 0;
    TenantId tenant = kNoTenant;
    TierId tier = 0;
    bool live = false;
    TimeNs last_active = 0;
    std::unique_ptr<KeyLimiter> limiter;  // null: no limits
    TenantStats stats;
    RecentCounter recent;  // tokens served, for operators' "share over the last 10 s"
  };
  static constexpr std::size_t kHotLines = 3;
  struct TierState {
    std::uint64_t queued_tokens = 0;
    double backlogged_weight = 0.0;
  };
  struct EndpointState {
    EndpointSpec spec;
    std::vector<TenantState> states;
    std::vector<std::uint32_t> free_states;
    // TenantId -> index into `states`, kNoState when the tenant has none here.
    // Ids are dense (TenantTable reuses them), so a vector beats a hash map.
    std::vector<std::uint32_t> state_of;
    // The across-tenant selector (DRR, recent or vtc) of each tier.
    std::vector<TenantSelector> tenant_selectors;
    std::vector<TierState> tiers;
    TierSelector tier_selector;
    FifoQueue fifo;
    BacklogThrottle throttle;
    std::unique_ptr<bool[]> backlogged;  // scratch: which tiers have requests, one per tier
    // States whose tenant has requests queued and none in flight, in the
    // order they became so (takeHeadroom); checked when taken, so an entry
    // may be stale. At most one entry per state (newcomer_listed), rebuilt
    // when reused states leave it twice the states' size.
    std::deque<std::uint32_t> newcomers;
    // When the queue last went from empty to non-empty; a partial batch is
    // due max_wait after it. kNever while the queue is empty.
    TimeNs pending_since = kNever;
    std::size_t queued = 0;
    std::uint64_t queued_tokens = 0;
    std::size_t gc_cursor = 0;
    RecentCounter recent;
    PreemptionBudget preemption_budget;  // PreemptionSpec::max_per_s
  };
  SavedTenantState saved_;  // saveStates()'s scratch
  VictimChooser victim_chooser_;
  std::vector<PreemptionCandidate> preemption_candidates_;  // scratch of preemptionVictim()
  struct DeadlineEntry {
    TimeNs deadline;
    Handle handle;
    bool operator>(const DeadlineEntry& o) const { return deadline > o.deadline; }
  };

  static constexpr std::uint32_t kNoState = UINT32_MAX;
  // Slot::charged of a request in flight across a reload that changed its
  // endpoint's cost model: complete() makes no adaptive correction for it.
  static constexpr std::int64_t kChargedUnderOtherModel = INT64_MIN;
  static std::uint32_t findState(const EndpointState& ep, TenantId t) {
    return t < ep.state_of.size() ? ep.state_of[t] : kNoState;
  }
  static std::uint32_t indexOf(Handle h) { return static_cast<std::uint32_t>(h & 0xffffffffu); }
  static Handle makeHandle(std::uint32_t index, std::uint32_t gen) {
    return (static_cast<Handle>(gen) << 32) | index;
  }
  Slot* lookup(Handle h);
  // An endpoint's per-tier state afresh for spec_'s tiers (its spec set):
  // across-tenant selectors, tier counters, the tier selector.
  void resetTiers(EndpointState& ep) const;
  // The slot of a request in flight; null for an unknown handle or one not in flight.
  Slot* inFlight(Handle h);
  // The limiter of a tenant on an endpoint from its entry's limit table (with
  // fleet accounts through the gate); null when nothing limits it.
  std::unique_ptr<KeyLimiter> makeLimiter(const EndpointState& ep, const TenantTable::Entry& e);
  std::uint32_t stateFor(EndpointState& ep, TenantId t, TimeNs now);
  // A tenant's DRR quantum (and service weight): the endpoint's quantum ×
  // its weight, at least 1.
  static std::int64_t quantumOf(const EndpointSpec& spec, double weight);
  std::int64_t costOf(const EndpointState& ep, const TenantState& ts, const Slot& s) const {
    return s.resumed ? 0 : costOf(ep, ts, s.req.input_tokens, s.req.max_output_tokens);
  }
  // The cost of a queued entry: only a preempted request (so only where
  // preemption is on) costs other than its tokens say.
  std::int64_t costOf(const EndpointState& ep, const TenantState& ts, const QueueEntry& e) const {
    if (ep.spec.preemption.enabled && slots_[indexOf(e.handle)].resumed) return 0;
    return costOf(ep, ts, e.input_tokens, e.max_output_tokens);
  }
  std::int64_t costOf(const EndpointState& ep, const TenantState& ts, std::uint32_t input,
                      std::uint32_t max_output) const;
  static std::uint64_t tokensOf(const Request& r) {
    return static_cast<std::uint64_t>(r.input_tokens) + r.max_output_tokens;
  }
  std::uint64_t workAhead(const EndpointState& ep, const TenantState& ts) const;
  // Pop withdrawn entries off the head of a tenant's queue; true when any were.
  bool dropWithdrawnHead(TenantState& ts);
  // Drop dead entries from a tenant's queue head and tell the across-tenant
  // selector about the new head (or that the tenant emptied).
  void refreshHead(EndpointState& ep, std::uint32_t ts_index);
  // Unqueue a request (cancel, expiry): bookkeeping and the completion.
  void withdraw(Slot& s, Status why, std::vector<Done>& done);
  struct Limits {
    std::uint32_t requests;
    std::uint64_t tokens;
  };
  // Queues slot `index` (already filled in, state kQueued) on its tenant.
  void enqueue(EndpointState& ep, std::uint32_t index, TimeNs now);
  // Puts a queued request's deadline (none: kNever) where expireDeadlines()
  // and nextDeadline() find it. The test inline: most requests have none.
  void trackDeadline(const Request& r, Handle h) {
    if (r.deadline != kNever) pushDeadline(r.deadline, h);
  }
  void pushDeadline(TimeNs deadline, Handle h);
  // A request in flight goes back to its tenant's queue (requeue, preempt):
  // what it was charged is the caller's business, Slot::resumed included.
  void backToQueue(EndpointState& ep, Slot& s, Handle h, TimeNs now);
  // The tier of the next fair choice (TierSelector::kNoTier when nothing is
  // queued); leaves ep.backlogged filled in for it.
  TierSelector::Choice nextTier(EndpointState& ep);
  bool takeFair(EndpointState& ep, TimeNs now, Limits limits, Batch& out, std::vector<Done>& done,
                const LocalityProbe* probe);
  // scheduler_locality.cpp: the request take() dispatches instead of the
  // fair choice `fair` (flow) for `probe`'s worker, and its flow; the fair
  // choice's head when nothing else holds more.
  struct LocalityPick {
    TenantSelector::FlowId flow;
    QueueEntry entry;
    bool head = true;  // the flow's head, or an entry behind it
  };
  LocalityPick localityPick(EndpointState& ep, const TenantSelector& selector,
                            TenantSelector::FlowId fair, TimeNs now, const LocalityProbe& probe);
  std::size_t matchedOf(const QueueEntry& e, const LocalityProbe& probe) const;
  static constexpr std::size_t kPrefetchDepth = 4;
  void prefetchUpcoming(const EndpointState& ep, const TenantSelector& selector) const;
  void prefetchSlot(Handle h) const {
    const char* p = reinterpret_cast<const char*>(&slots_[indexOf(h)]);
    __builtin_prefetch(p);
    __builtin_prefetch(p + sizeof(Slot) - 1);  // a Slot may straddle two lines
  }
  bool takeFifo(EndpointState& ep, TimeNs now, Limits limits, Batch& out, std::vector<Done>& done);
  void dispatch(EndpointState& ep, Slot& s, Batch& out, TimeNs now);
  // Bookkeeping shared by dispatch and withdraw: the request leaves the queue.
  void unqueue(EndpointState& ep, TenantState& ts, std::uint64_t tokens);
  // Lists state `i` in ep.newcomers when it has queued requests and none in flight.
  void noteNewcomer(EndpointState& ep, std::uint32_t i);
  void freeSlot(std::uint32_t index);

  SchedulerSpec spec_;
  TenantTable tenants_;
  std::vector<EndpointState> endpoints_;
  std::vector<Slot> slots_;
  std::vector<std::uint32_t> free_slots_;
  // Prefix chains by slot index (setPrefix); sized only once one is given.
  std::vector<std::vector<std::uint64_t>> prefixes_;
  std::vector<DeadlineEntry> deadlines_;  // min-heap; entries of finished requests are stale
  std::uint64_t seq_ = 0;
  std::size_t in_flight_ = 0;
  FleetGate* fleet_gate_ = nullptr;
};

const char* toString(CostModel m);
TenantSelector makeTenantSelector(const EndpointSpec& spec);

}  // namespace fairsched::core
