// `roundtrip`: submit -> completion latency through the whole daemon path —
// libfairsched, the shared-memory rings, ingest, the scheduling core, a
// zero-time executor (inline, max_wait 0), the completion ring — against a
// unix-socket echo between two processes in the same run. Both sides
// busy-poll; a second run lets both sides fall asleep between requests, so
// every round trip pays two eventfd wake-ups; a third measures how many
// submissions per second one client thread gets through the daemon.
#pragma once

#include "bench/scenario.hpp"

namespace fairsched::bench {

ScenarioResult runRoundtripScenario(const ScenarioOptions& options);
std::optional<std::string> plotRoundtrip(const nlohmann::json& report, const std::string& path);

}  // namespace fairsched::bench
