// CPU reference of the pack step: from per-request prompt lengths build the
// layout inference engines consume for a packed (varlen) batch —
//   cu_seqlens  n+1 entries, exclusive prefix sums (cu_seqlens[0] = 0,
//               cu_seqlens[n] = total tokens), request i's tokens are
//               [cu_seqlens[i], cu_seqlens[i+1]);
//   positions   per token, its index within its own request;
//   seq_ids     per token, the index of the request it belongs to.
// The CUDA pack kernel (pack.cu) produces the same arrays.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace fairsched::kernels {

struct PackedLayout {
  std::vector<std::uint32_t> cu_seqlens;
  std::vector<std::uint32_t> positions;
  std::vector<std::uint32_t> seq_ids;
};

// REQUIRES: the sum of `lengths` fits in uint32.
PackedLayout packReference(std::span<const std::uint32_t> lengths);

}  // namespace fairsched::kernels
