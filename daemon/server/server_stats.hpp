// Counters of the serving side, kept by the Server on its loop thread and
// read by the metrics and `fairschedctl status`. Plain values: a header of
// its own so metrics need not see the Server.
#pragma once

#include <cstdint>
#include <vector>

namespace fairsched::daemon {

struct ServerStats {
  std::uint64_t connections_accepted = 0;
  std::uint64_t connections_refused = 0;
  std::uint64_t submissions = 0;
  std::uint64_t completions_delivered = 0;
  std::uint64_t tokens_streamed = 0;      // output tokens workers reported
  std::uint64_t completions_dropped = 0;  // their client was gone
  std::uint64_t bad_slots = 0;
  // Cells naming a tenant handle the connection does not hold open (ended
  // CANCELLED when the handle was just closed, else INVALID).
  std::uint64_t bad_tenant_handles = 0;
  std::uint64_t tenant_handles_open = 0;  // over every connection, now
  std::uint64_t batches = 0;
  // Passes that left a connection's cells in its lanes because it had spent
  // its rejection budget ([daemon] max_rejections_per_s).
  std::uint64_t reject_throttled = 0;
  // Hellos that waited for their uid's set-up budget ([daemon] max_connects_per_s).
  std::uint64_t connects_deferred = 0;
  // Per endpoint (index = EndpointId), worker endpoints only nonzero.
  std::vector<std::uint64_t> workers;             // attached workers
  std::vector<std::uint64_t> running_on_workers;  // requests assigned, not finished
  std::vector<std::uint64_t> preemptions;         // sequences given back on PREEMPT
  std::uint64_t preempts_ignored = 0;             // PREEMPTs no worker answered in time
};

}  // namespace fairsched::daemon
