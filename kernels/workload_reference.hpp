// CPU reference of the per-request workload: what every executor computes for
// a request, so tests can compare any executor's result with this one. The
// checksum is integer arithmetic over the request's own prompt token ids, so
// a request mixed up with another during batching gets the wrong checksum.
#pragma once

#include <cstdint>
#include <span>

namespace fairsched::kernels {

// Order-sensitive 64-bit checksum of a prompt (a multiply-xorshift mix of each
// token id and its position).
std::uint64_t promptChecksum(std::span<const std::uint32_t> tokens);

}  // namespace fairsched::kernels
