#include "kernels/workload_reference.hpp"

namespace fairsched::kernels {
namespace {

bool isDefault(const WorkloadShape& shape) {
  const WorkloadShape d;
  return shape.vocab == d.vocab && shape.dim == d.dim;
}

// The default shape's table, built once (2 MiB): a gather then reads one
// cache line per token instead of hashing every element. Same values as
// tableValue(), so results are unchanged.
const std::vector<std::uint32_t>& defaultTable() {
  static const std::vector<std::uint32_t> table = [] {
    const WorkloadShape s;
    std::vector<std::uint32_t> t(std::size_t{s.vocab} * s.dim);
    for (std::uint32_t v = 0; v < s.vocab; ++v) {
      for (std::uint32_t d = 0; d < s.dim; ++d) t[std::size_t{v} * s.dim + d] = tableValue(v, d);
    }
    return t;
  }();
  return table;
}

// Calls f(i, d, table[tok_i % V][d]) for every element of the gather.
template <class F>
void gather(std::span<const std::uint32_t> prompt, const WorkloadShape& shape, F&& f) {
  if (isDefault(shape)) {
    const std::uint32_t* table = defaultTable().data();
    for (std::size_t i = 0; i < prompt.size(); ++i) {
      const std::uint32_t* row = table + std::size_t{prompt[i] % shape.vocab} * shape.dim;
      for (std::uint32_t d = 0; d < shape.dim; ++d) f(i, d, row[d]);
    }
    return;
  }
  for (std::size_t i = 0; i < prompt.size(); ++i) {
    const std::uint32_t v = prompt[i] % shape.vocab;
    for (std::uint32_t d = 0; d < shape.dim; ++d) f(i, d, tableValue(v, d));
  }
}

}  // namespace

WorkloadResult runWorkload(std::span<const std::uint32_t> prompt, const WorkloadShape& shape) {
  WorkloadResult r;
  r.output.assign(shape.dim, 0);
  r.checksum = checksumSeed(prompt.size());
  gather(prompt, shape, [&](std::size_t i, std::uint32_t d, std::uint32_t x) {
    r.output[d] += x;
    r.checksum += checksumTerm(x, static_cast<std::uint64_t>(i) * shape.dim + d);
  });
  return r;
}

std::uint64_t workloadChecksum(std::span<const std::uint32_t> prompt, const WorkloadShape& shape) {
  std::uint64_t h = checksumSeed(prompt.size());
  gather(prompt, shape, [&](std::size_t i, std::uint32_t d, std::uint32_t x) {
    h += checksumTerm(x, static_cast<std::uint64_t>(i) * shape.dim + d);
  });
  return h;
}

}  // namespace fairsched::kernels
