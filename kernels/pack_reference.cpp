#include "kernels/pack_reference.hpp"

namespace fairsched::kernels {

PackedLayout packReference(std::span<const std::uint32_t> lengths) {
  PackedLayout p;
  p.cu_seqlens.reserve(lengths.size() + 1);
  p.cu_seqlens.push_back(0);
  for (std::size_t r = 0; r < lengths.size(); ++r) {
    p.cu_seqlens.push_back(p.cu_seqlens.back() + lengths[r]);
    for (std::uint32_t i = 0; i < lengths[r]; ++i) {
      p.positions.push_back(i);
      p.seq_ids.push_back(static_cast<std::uint32_t>(r));
    }
  }
  return p;
}

}  // namespace fairsched::kernels
