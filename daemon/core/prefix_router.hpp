// Which worker of an endpoint takes a request: the roomiest, or the one
// holding most of its prefix within a bounded load.
//
// Prefix routing (`routing = "prefix"`) sends a request where its leading
// blocks are cached (daemon/core/prefix_cache.hpp), so the engine skips
// their prefill — but affinity alone would pile a popular prefix onto one
// replica while another idles. So a worker takes a request for affinity
// only while its load after taking it stays within the bound
//
//     ceil((1 + slack) × (total load + 1) / workers)
//
// (consistent hashing with bounded loads, Mirrokni et al.; SGLang's router
// and Dynamo's KV router balance the same way): no worker ever runs more
// than (1 + slack) times the endpoint's mean for the sake of a cache hit,
// rounded up. Among the workers within the bound, the one holding the most
// leading blocks wins, ties to the roomiest; when none within the bound
// holds any, the roomiest takes it, exactly as `routing = "roomiest"`.
// Pure and allocation-free.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>

namespace fairsched::core {

enum class Routing : std::uint8_t { kRoomiest, kPrefix };

struct RouteCandidate {
  std::uint32_t load = 0;   // sequences running or assigned on the worker now
  std::uint32_t free = 0;   // more sequences it has room for
  std::size_t matched = 0;  // leading blocks of the request's chain it holds
  bool fits = true;         // its room holds this request (tokens, KV)
};

inline constexpr std::size_t kNoRoute = SIZE_MAX;

// The affinity bound above: the most load a worker may reach by taking a
// request for its cache. `workers` and `total_load` count every worker of
// the endpoint, with room or not.
inline std::uint64_t affinityBound(std::uint64_t total_load, std::size_t workers, double slack) {
  if (workers == 0) return 0;
  const double mean = static_cast<double>(total_load + 1) / static_cast<double>(workers);
  return static_cast<std::uint64_t>(std::ceil((1.0 + slack) * mean - 1e-9));
}

// The index into `c` of the worker to take the request, or kNoRoute when no
// candidate has a free sequence and fits it.
inline std::size_t chooseWorker(Routing routing, std::span<const RouteCandidate> c,
                                std::uint64_t total_load, std::size_t workers, double slack) {
  auto roomier = [&](std::size_t a, std::size_t b) {  // a strictly before b
    return c[a].free != c[b].free ? c[a].free > c[b].free : c[a].load < c[b].load;
  };
  std::size_t roomiest = kNoRoute, best = kNoRoute;
  const std::uint64_t bound = affinityBound(total_load, workers, slack);
  for (std::size_t i = 0; i < c.size(); ++i) {
    if (c[i].free == 0 || !c[i].fits) continue;
    if (roomiest == kNoRoute || roomier(i, roomiest)) roomiest = i;
    if (routing != Routing::kPrefix || c[i].matched == 0 || c[i].load + 1 > bound) continue;
    if (best == kNoRoute || c[i].matched > c[best].matched ||
        (c[i].matched == c[best].matched && roomier(i, best))) {
      best = i;
    }
  }
  return best != kNoRoute ? best : roomiest;
}

}  // namespace fairsched::core
