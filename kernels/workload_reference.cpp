#include "kernels/workload_reference.hpp"

namespace fairsched::kernels {

std::uint64_t promptChecksum(std::span<const std::uint32_t> tokens) {
  std::uint64_t h = 0x9e3779b97f4a7c15ull ^ tokens.size();
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    std::uint64_t x = (static_cast<std::uint64_t>(tokens[i]) << 32) | static_cast<std::uint32_t>(i);
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    h = (h ^ x) * 0xc4ceb9fe1a85ec53ull;
  }
  return h ^ (h >> 29);
}

}  // namespace fairsched::kernels
