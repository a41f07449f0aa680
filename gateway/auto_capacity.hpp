// Capacity that follows the engine (`capacity = "auto"`): how many requests
// the gateway lets run on one upstream at once, set from the engine's own
// Prometheus metrics so that the engine stays busy while its waiting queue
// stays near empty. fairsched can order only what has not yet reached the
// engine: every request sent beyond what the engine runs waits in the
// engine's FIFO, where no fairness applies.
//
// The engine's figures, summed over label sets (a server with several
// models) — vLLM: vllm:num_requests_running, vllm:num_requests_waiting,
// vllm:kv_cache_usage_perc (vllm:gpu_cache_usage_perc before v0.10);
// SGLang: sglang:num_running_reqs, sglang:num_queue_reqs, sglang:token_usage.
//
// The limit, at each scrape (as TCP's congestion window, with the engine's
// waiting queue as the loss signal):
//   waiting > 0                 → the engine's running count, if lower
//                                 (not below min): send no more than the
//                                 engine takes at once;
//   waiting = 0, limit in use, the engine running at least every call of
//   ours (none on its way), KV cache below kv_high
//                               → grow: doubled until the first time the
//                                 engine queues (slow start), then + 1;
//   otherwise                   → unchanged (the limit is not what holds
//                                 the engine back, or its KV cache is full).
// Pure: one thread, no clock.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace fairsched::gateway {

struct EngineLoad {
  double running = 0;                // requests the engine runs now
  double waiting = 0;                // requests queued inside the engine
  std::optional<double> kv_usage;    // 0..1: its KV cache in use, where it says
  std::string_view engine = "vllm";  // "vllm" or "sglang"
};

// The engine's figures from a Prometheus text exposition, or nullopt with
// `why` when it names neither vLLM's nor SGLang's request counts.
std::optional<EngineLoad> parseEngineMetrics(std::string_view text, std::string& why);

class AutoCapacity {
 public:
  struct Policy {
    std::uint32_t min = 1;   // never below (an engine that queues everything still gets work)
    std::uint32_t max = 64;  // never above: the upstream's max_sequences
    double kv_high = 0.9;    // no growth while the KV cache is this full
  };

  explicit AutoCapacity(Policy p);

  // A new bound (a reload): the limit is clamped into it.
  void setPolicy(Policy p);
  // One scrape: the engine's figures, and how many of the gateway's own
  // calls ran on it then.
  void observe(const EngineLoad& load, std::uint32_t ours_running);

  std::uint32_t limit() const { return limit_; }
  bool slowStart() const { return slow_start_; }
  const std::optional<EngineLoad>& last() const { return last_; }

 private:
  Policy p_;
  std::uint32_t limit_;
  bool slow_start_ = true;
  std::optional<EngineLoad> last_;
};

}  // namespace fairsched::gateway
