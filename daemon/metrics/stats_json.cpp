#include "daemon/metrics/stats_json.hpp"

#include <nlohmann/json.hpp>

#include "daemon/fleet/redis_topology.hpp"

namespace fairsched::daemon {

using nlohmann::json;

json serverStatsJson(const ServerStats& s, std::span<const std::string> endpoint_names,
                     const std::vector<bool>& worker_endpoint) {
  json preempted = json::object();
  for (std::size_t e = 0; e < endpoint_names.size() && e < worker_endpoint.size(); ++e) {
    if (worker_endpoint[e]) preempted[endpoint_names[e]] = s.preemptions[e];
  }
  return {{"counters",
           {{"connections_accepted", s.connections_accepted},
            {"connections_refused", s.connections_refused},
            {"submissions", s.submissions},
            {"completions_delivered", s.completions_delivered},
            {"completions_dropped", s.completions_dropped},
            {"bad_slots", s.bad_slots},
            {"bad_tenant_handles", s.bad_tenant_handles},
            {"tenant_handles_open", s.tenant_handles_open},
            {"tokens_streamed", s.tokens_streamed},
            {"batches", s.batches},
            {"reject_throttled", s.reject_throttled},
            {"connects_deferred", s.connects_deferred}}},
          {"preemptions", std::move(preempted)},
          {"preempts_ignored", s.preempts_ignored}};
}

json fleetStatsJson(const fleet::FleetStats& f, std::string_view backend) {
  const fleet::BackendTopology& t = f.topology;
  json nodes = json::array();
  for (const fleet::BackendNode& n : t.nodes) {
    json node = {{"address", n.address}, {"connected", n.connected}};
    if (!n.slots.empty()) node["slots"] = fleet::formatSlots(n.slots);
    nodes.push_back(std::move(node));
  }
  return {{"backend", std::string(backend)},
          {"topology", t.mode},
          {"master", t.master},
          {"nodes", std::move(nodes)},
          {"redirects_moved", t.moved},
          {"redirects_ask", t.ask},
          {"retried", t.retried},
          {"topology_refreshes", t.refreshes},
          {"failovers", t.failovers},
          {"last_error", f.last_error},
          {"breaker", fleet::toString(f.breaker)},
          {"degraded", f.degraded},
          {"limits", f.limits},
          {"leases_held", f.leases_held},
          {"backend_calls", f.backend_calls},
          {"round_trips", f.round_trips},
          {"backend_failures", f.backend_failures},
          {"breaker_opened", f.breaker_counters.opened},
          {"degraded_admitted", f.degraded_admitted},
          {"degraded_rejected", f.degraded_rejected}};
}

}  // namespace fairsched::daemon
