// What a replay produced per request, and the fairness metric computed from
// it: the maximum service difference between two tenants that are both
// backlogged.
//
// Definition (all times in the replay's virtual time):
//  - cost(r) = per_request + per_input × input_tokens + per_output × output_tokens
//    (default input + output). A request is credited to its tenant at its
//    dispatch, with cost / weight (the tenant's scheduling weight); requests
//    never dispatched are credited nothing.
//  - A request waits from its arrival until it leaves the queue: its dispatch,
//    or its completion when it was never dispatched (rejected at admission,
//    deadline passed). A tenant is backlogged at t when it has a waiting
//    request; changes at the same instant are applied together, so a request
//    dispatched the instant it arrives does not make its tenant backlogged.
//    Its backlogged intervals are the maximal closed intervals [start, end]
//    of positive length during which it is.
//  - For tenants i and j and each maximal interval W = [s, e] in which both
//    are backlogged, let D(t) = S_i(s, t) − S_j(s, t), S_x(s, t) the
//    weight-normalised cost credited to x at times in [s, t] (every credit at
//    one instant applied together). The difference in W is max D − min D over
//    t in W, D(s⁻) = 0 included: the largest |S_i(t1,t2) − S_j(t1,t2)| over
//    t1 ≤ t2 in W.
//  - max_service_difference is the largest such value over every pair of
//    tenants and every such window (0 when no two tenants are ever backlogged
//    together).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "daemon/core/types.hpp"

namespace fairsched::bench {

struct RequestEvent {
  std::string tenant;
  TimeNs arrival = 0;
  TimeNs dispatch = -1;  // -1: never dispatched
  TimeNs completion = 0;
  std::uint32_t input_tokens = 0;
  std::uint32_t output_tokens = 0;
  Status status = Status::kOk;
  TimeNs first_token = -1;  // worker endpoints: when its first output token was emitted
  std::uint32_t preemptions = 0;
};

struct CostWeights {
  double per_request = 0;
  double per_input = 1;
  double per_output = 1;
  double of(std::uint32_t input_tokens, std::uint32_t output_tokens) const {
    return per_request + per_input * input_tokens + per_output * output_tokens;
  }
  std::string toString() const;  // e.g. "input+2*output"
};

// Parses a sum of terms, each `input`, `output`, `C*input`, `C*output` or a
// constant `C` (per request): "input+output", "input+2*output", "1". Returns
// the weights or why the expression is wrong.
std::variant<CostWeights, std::string> parseCostWeights(std::string_view expr);

struct ServiceDifference {
  double value = 0;  // in cost units per unit of weight
  std::string tenant_a, tenant_b;
  TimeNs window_start = 0, window_end = 0;  // the window where it was reached
};

// `weights`: each tenant's scheduling weight (missing: 1).
ServiceDifference maxServiceDifference(const std::vector<RequestEvent>& events,
                                       const std::map<std::string, double>& weights,
                                       const CostWeights& cost);

// The windowed service difference of the VTC paper (Sheng et al., OSDI
// 2024), as fairness studies of continuous batching report it:
//  - service(r) = input + 2 × output tokens (per_input, per_output of
//    `cost`), spread evenly over the request's run, from its dispatch to its
//    completion (a request that never ran: nothing);
//  - time is cut into windows of `window` from the first arrival; a tenant is
//    active in a window when one of its requests is in the system (between
//    its arrival and its completion) at some time in it;
//  - in each window with two or more active tenants, the difference is the
//    largest minus the smallest weight-normalised service among them.
// `mean` is the average over those windows, `max` the largest.
//
// `Activity::kWaiting` counts a tenant only in windows where one of its
// requests waited (between its arrival and its first dispatch; never
// dispatched: until its completion) — the backlogged tenants, as fair
// queueing defines them. Where nothing ever waits (the floor) no window
// counts and the difference is 0.
struct WindowedDifference {
  double mean = 0;
  double max = 0;
  std::size_t windows = 0;  // windows with two or more active tenants
};
enum class Activity { kInSystem, kWaiting };
WindowedDifference windowedServiceDifference(const std::vector<RequestEvent>& events,
                                             const std::map<std::string, double>& weights,
                                             TimeNs window, const CostWeights& cost = {0, 1, 2},
                                             Activity activity = Activity::kInSystem);

}  // namespace fairsched::bench
