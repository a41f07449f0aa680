#include "kernels/workload_reference.hpp"

namespace fairsched::kernels {

WorkloadResult runWorkload(std::span<const std::uint32_t> prompt, const WorkloadShape& shape) {
  WorkloadResult r;
  r.output.assign(shape.dim, 0);
  r.checksum = checksumSeed(prompt.size());
  for (std::size_t i = 0; i < prompt.size(); ++i) {
    const std::uint32_t v = prompt[i] % shape.vocab;
    for (std::uint32_t d = 0; d < shape.dim; ++d) {
      const std::uint32_t x = tableValue(v, d);
      r.output[d] += x;
      r.checksum += checksumTerm(x, static_cast<std::uint64_t>(i) * shape.dim + d);
    }
  }
  return r;
}

std::uint64_t workloadChecksum(std::span<const std::uint32_t> prompt, const WorkloadShape& shape) {
  std::uint64_t h = checksumSeed(prompt.size());
  for (std::size_t i = 0; i < prompt.size(); ++i) {
    const std::uint32_t v = prompt[i] % shape.vocab;
    for (std::uint32_t d = 0; d < shape.dim; ++d) {
      h += checksumTerm(tableValue(v, d), static_cast<std::uint64_t>(i) * shape.dim + d);
    }
  }
  return h;
}

}  // namespace fairsched::kernels
