// libFuzzer target: the daemon's state file reader (daemon/server/
// state_store.hpp) on arbitrary bytes. The harness makes the header's size
// and checksum right, so what is fuzzed is the record parser and the
// restore behind it: a file that decodes is applied to a scheduler, which
// must hold no more than the file named, and one that does not must be
// refused without touching it.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "daemon/config/config.hpp"
#include "daemon/config/scheduler_setup.hpp"
#include "daemon/server/state_store.hpp"
#include "fuzz_input.hpp"

namespace {

using fairsched::fuzz::require;
using namespace fairsched;

const core::SchedulerSpec& spec() {
  static const core::SchedulerSpec s = [] {
    auto cfg = config::parseConfig(
        "[[tiers]]\nname = \"paid\"\n[[tiers]]\nname = \"trial\"\n"
        "[endpoints.chat]\ncost = \"adaptive\"\nfairness = \"recent\"\n"
        "limits = [\"1000 requests/day\", \"1M tokens/hour\"]\n"
        "[endpoints.embed]\nlimits = [\"10 requests/second\"]\n",
        "fuzz.toml");
    require(cfg.ok());
    return config::buildSchedulerSpec(cfg.value());
  }();
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string file(reinterpret_cast<const char*>(data), size);
  if (file.size() >= daemon::kStateHeaderBytes) {
    const std::uint64_t payload = file.size() - daemon::kStateHeaderBytes;
    const std::uint64_t sum = daemon::stateChecksum(
        std::span<const char>(file.data() + daemon::kStateHeaderBytes, payload));
    std::memcpy(file.data() + 16, &payload, 8);
    std::memcpy(file.data() + 24, &sum, 8);
  }
  core::Scheduler sched(spec());
  const TimeNs now = 1'000'000'000;
  daemon::StateClock at{2'000'000'000'000'000'000, now, "fuzz"};
  auto restored = daemon::restoreState(file, sched, at, now);
  if (!restored.ok()) {
    require(!restored.error().empty());
    require(sched.activeTenantStates() == 0);
    return 0;
  }
  require(sched.activeTenantStates() <= restored.value().states);
  // What came back is usable: limit usage is readable and within a u64.
  for (EndpointId e = 0; e < 2; ++e) {
    for (TenantId t = 0; t < sched.tenants().capacity(); ++t) {
      if (!sched.tenants().valid(t)) continue;
      for (const core::LimitUsage& u : sched.limitUsage(t, e, now)) require(u.spec.amount > 0);
    }
  }
  return 0;
}
