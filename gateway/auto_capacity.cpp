#include "gateway/auto_capacity.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace fairsched::gateway {

namespace {

// One sample line: its metric name and value; false for comments, blanks
// and lines that are not samples.
bool parseSample(std::string_view line, std::string_view& name, double& value) {
  while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
  if (line.empty() || line.front() == '#') return false;
  std::size_t i = 0;
  while (i < line.size() && line[i] != '{' && line[i] != ' ' && line[i] != '\t') ++i;
  name = line.substr(0, i);
  if (i < line.size() && line[i] == '{') {  // labels: skip to the closing brace, outside quotes
    bool quoted = false;
    for (++i; i < line.size(); ++i) {
      const char c = line[i];
      if (quoted && c == '\\') {
        ++i;
      } else if (c == '"') {
        quoted = !quoted;
      } else if (!quoted && c == '}') {
        break;
      }
    }
    if (i >= line.size()) return false;
    ++i;
  }
  while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
  std::size_t end = i;
  while (end < line.size() && line[end] != ' ' && line[end] != '\t' && line[end] != '\r') ++end;
  const std::string_view v = line.substr(i, end - i);
  if (v.empty()) return false;
  if (v == "NaN" || v == "+Inf" || v == "-Inf") return false;  // no usable count
  const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), value);
  return ec == std::errc() && p == v.data() + v.size() && std::isfinite(value);
}

struct Names {
  std::string_view engine;
  std::string_view running;
  std::string_view waiting;
  std::string_view kv;
  std::string_view kv_old;
};

constexpr Names kEngines[] = {
    {"vllm", "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
     "vllm:gpu_cache_usage_perc"},
    {"sglang", "sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage", ""},
};

}  // namespace

std::optional<EngineLoad> parseEngineMetrics(std::string_view text, std::string& why) {
  struct Seen {
    bool running = false;
    bool waiting = false;
    EngineLoad load;
  };
  Seen seen[std::size(kEngines)];
  while (!text.empty()) {
    const std::size_t nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    std::string_view name;
    double value = 0;
    if (!parseSample(line, name, value)) continue;
    for (std::size_t e = 0; e < std::size(kEngines); ++e) {
      const Names& n = kEngines[e];
      Seen& s = seen[e];
      if (name == n.running) {
        s.running = true;
        s.load.running += value;
      } else if (name == n.waiting) {
        s.waiting = true;
        s.load.waiting += value;
      } else if (name == n.kv || (!n.kv_old.empty() && name == n.kv_old)) {
        // The fullest of its caches (one per model or data-parallel rank).
        s.load.kv_usage = std::max(s.load.kv_usage.value_or(0.0), value);
      }
    }
  }
  for (std::size_t e = 0; e < std::size(kEngines); ++e) {
    if (seen[e].running && seen[e].waiting) {
      seen[e].load.engine = kEngines[e].engine;
      return seen[e].load;
    }
  }
  why =
      "no vllm:num_requests_running and vllm:num_requests_waiting, nor sglang:num_running_reqs "
      "and sglang:num_queue_reqs, in the metrics";
  return std::nullopt;
}

AutoCapacity::AutoCapacity(Policy p) : p_(p), limit_(0) {
  // Start where a short burst can run at once; slow start finds the rest.
  limit_ = std::clamp<std::uint32_t>(4, p_.min, std::max(p_.min, p_.max));
}

void AutoCapacity::setPolicy(Policy p) {
  p_ = p;
  limit_ = std::clamp(limit_, p_.min, std::max(p_.min, p_.max));
}

void AutoCapacity::observe(const EngineLoad& load, std::uint32_t ours_running) {
  last_ = load;
  const std::uint32_t top = std::max(p_.min, p_.max);
  const double waiting = std::max(0.0, load.waiting);
  if (waiting >= 1.0) {
    // No more than the engine runs: the rest would wait in its FIFO. (Not
    // limit − waiting: what waits may have been sent under a higher limit,
    // and is counted again at the next scrape.)
    slow_start_ = false;
    const double runs = std::clamp(std::floor(load.running), 0.0, static_cast<double>(limit_));
    limit_ = std::max(p_.min, static_cast<std::uint32_t>(runs));
    return;
  }
  const bool kv_full = load.kv_usage && *load.kv_usage >= p_.kv_high;
  if (kv_full || ours_running < limit_ || limit_ >= top) return;
  // Some of ours are not running on the engine (on their way to it, or
  // ending): a full engine can look like one with room. Grow only when it
  // runs every one of them.
  if (load.running < static_cast<double>(ours_running)) return;
  const std::uint32_t step = slow_start_ ? limit_ : 1;
  limit_ = static_cast<std::uint32_t>(
      std::min<std::uint64_t>(top, static_cast<std::uint64_t>(limit_) + step));
}

}  // namespace fairsched::gateway
