// The part of one fleet-wide limit (one tenant, endpoint, unit and window)
// that one daemon holds: leases of the fleet budget granted by the backend,
// spent locally on the hot path. Pure and single-threaded: time is passed in;
// FleetLimiter serialises the event loop (take/refund) and its background
// thread (fetch/grant/returns) with a mutex around each pool.
//
// A lease is `amount` cost units the backend counted, at grant time, in the
// sub-bucket `bucket` of the limit's sliding window. The pool holds at most
// two: the current lease, spent first, and the next one (prefetched when the
// current runs low — or, once a take had to wait, as soon as the current
// one is in use — so admissions rarely wait). A lease is usable until
// `expires_at`; whatever is left of a lease when it is retired (spent past,
// expired, released) goes back to the backend against its own bucket.
//
// Guarantee this gives FleetLimiter (docs/operations.md, "Fleet limits"):
// what this daemon admits from a lease never exceeds the lease, net of
// refunds, and happens between its grant and its retirement. Refunds:
// - of a take from the current lease: credited back to the current lease;
// - of a take from a retired lease: returned to the backend for its bucket;
// - when the take cannot be told apart (a lease switch at the same instant,
//   or the lease is older than the kept history, or it was made while the
//   pool was bypassed): dropped, which only under-admits.
//
// Borrowing. A take that finds no lease at all (a tenant's first request on
// this daemon, or one after its leases expired) would otherwise wait for a
// round trip to the backend and be rejected meanwhile. Instead the pool may
// admit it on credit: the cost becomes a debt, paid first out of the next
// grant. At most one debt is outstanding, none is taken while the backend
// has said the budget is spent (denied_until), and the limiter does not
// borrow while its backend is down. So each pool has admitted at most one
// request (its cost) that the backend has not counted yet, which adds
// D × (largest request cost) to the fleet bound. A borrowed take is a
// bypass for refunds: its refund is dropped.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "daemon/core/fleet_gate.hpp"
#include "daemon/core/types.hpp"

namespace fairsched::fleet {

// Cost given back to the backend for the sub-bucket it was granted in.
struct LeaseReturn {
  std::int64_t bucket = 0;
  std::uint64_t amount = 0;
};

// What the background thread asks the backend for.
struct FetchOrder {
  std::uint64_t want = 0;  // lease size asked for; 0 = returns only
  std::uint64_t min = 0;   // smallest grant worth having
  std::vector<LeaseReturn> returns;
};

struct LeasePoolCounters {
  std::uint64_t admitted = 0;  // takes served from a lease
  std::uint64_t waited = 0;    // takes rejected: no lease held, fetch pending or denied
  std::uint64_t borrowed = 0;  // takes admitted on credit (see "Borrowing")
  std::uint64_t grants = 0;
  std::uint64_t denials = 0;  // the backend had no budget left
  std::uint64_t refunds_local = 0;
  std::uint64_t refunds_returned = 0;
  std::uint64_t refunds_dropped = 0;
};

class LeasePool {
 public:
  // How long a rejected take is told to wait while a fetch is pending.
  static constexpr TimeNs kFetchWait = 1 * kNsPerMs;

  // `lease`: the size to ask for (>= 1); `ttl`: how long a lease stays usable
  // after the fetch that got it was sent.
  LeasePool(std::uint64_t lease, TimeNs ttl);

  // Hot path. Spends `cost` from the current lease (moving to the next one
  // when the current cannot cover it); with no lease at all and
  // `may_borrow`, admits it on credit (see "Borrowing").
  core::FleetDecision take(std::uint64_t cost, TimeNs now, bool may_borrow = false);
  void refund(std::uint64_t cost, TimeNs taken_at, TimeNs now);

  // Whether a fetch should be started: none is pending, no next lease is
  // held, the current one is missing or below half of the lease size (or a
  // take found too little, or one waited before: eager), and the backend
  // did not ask to wait.
  bool wantsFetch(TimeNs now) const;
  // Whether returns are waiting to be sent.
  bool hasReturns() const { return !returns_.empty(); }

  // Background side. beginFetch marks a fetch pending and hands out the order
  // (with the returns collected so far); exactly one of onGrant, onDenied,
  // onFetchFailed must follow. `sent_at` is when the request goes out.
  FetchOrder beginFetch(TimeNs sent_at, bool want_lease = true);
  void onGrant(std::uint64_t amount, std::int64_t bucket, TimeNs sent_at);
  void onDenied(TimeNs retry_at);
  // The backend could not be reached: the returns of the order are lost
  // (they only under-admit), the fetch may be tried again.
  void onFetchFailed();

  // Retire every lease (shutdown, tenant state dropped): their remainders
  // become returns.
  void releaseAll(TimeNs now);

  // A take at `now` did not come from a lease (the limiter bypassed the pool
  // while its backend was down). Refunds of takes in the last bypassed
  // stretch (bypasses less than kBypassMerge apart form one) are dropped.
  static constexpr TimeNs kBypassMerge = 1 * kNsPerSec;
  void markBypassed(TimeNs now);
  bool bypassed(TimeNs taken_at) const {
    return taken_at >= bypass_from_ && taken_at <= bypass_until_;
  }

  std::uint64_t held() const;
  std::uint64_t debt() const { return debt_; }
  // A pool replacing `old` for the same backend key (a reload changed the
  // limit's amount) takes over its debt and its "budget spent until".
  void adoptDebt(LeasePool& old) {
    debt_ += old.debt_;
    old.debt_ = 0;
    denied_until_ = std::max(denied_until_, old.denied_until_);
  }
  TimeNs deniedUntil() const { return denied_until_; }
  std::uint64_t wantSize() const;
  const LeasePoolCounters& counters() const { return counters_; }

 private:
  struct Lease {
    std::uint64_t remaining = 0;
    std::int64_t bucket = 0;
    TimeNs expires_at = 0;
    std::uint32_t record = 0;  // index into records_
  };
  // Which lease was current when: for refunds.
  struct Record {
    TimeNs activated_at = 0;
    TimeNs retired_at = kNever;  // kNever while current
    std::int64_t bucket = 0;
    bool used = false;
  };
  static constexpr std::size_t kRecords = 8;

  void expire(TimeNs now);
  void retireCurrent(TimeNs now);
  void promoteNext(TimeNs now);
  void addReturn(std::int64_t bucket, std::uint64_t amount);

  std::uint64_t lease_;
  TimeNs ttl_;
  std::optional<Lease> current_;
  std::optional<Lease> next_;
  std::array<Record, kRecords> records_{};
  std::uint32_t next_record_ = 0;
  bool fetching_ = false;
  bool short_ = false;  // a take found too little: fetch even if the current lease is not low
  // A take waited for a lease (demand outran a round trip): fetch the next
  // lease as soon as the current one is in use, not at half. Still at most
  // two leases held, so the fleet bound is unchanged.
  bool eager_ = false;
  std::uint64_t largest_cost_ = 1;
  std::uint64_t pending_cost_ = 0;  // cost of the last take that found too little
  std::uint64_t debt_ = 0;          // borrowed cost the next grant pays first
  TimeNs denied_until_ = 0;
  TimeNs bypass_from_ = kNever;
  TimeNs bypass_until_ = kNever;
  std::vector<LeaseReturn> returns_;
  LeasePoolCounters counters_;
};

}  // namespace fairsched::fleet
