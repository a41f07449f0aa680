// CPU reference of the per-request workload that stands in for the model:
// embedding gather from table[v][d] = tableValue(v, d) (token ids modulo the
// vocab), a reduction over the request's tokens into an output vector of
// `dim` values, and a checksum
//     checksumSeed(n) + Σ_{i<n, d<dim} checksumTerm(table[tok_i % V][d], i*dim + d)
// in wrap-around uint64. Every executor computes it per request (the CUDA
// kernels in workload.cu bit for bit), so a test compares any executor's
// result with this one, and a request mixed up with another during batching
// or gathering gets the wrong checksum.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/workload_hash.hpp"

namespace fairsched::kernels {

struct WorkloadResult {
  std::vector<std::uint32_t> output;  // dim values: Σ_i table[tok_i % V][d], wrap-around
  std::uint64_t checksum = 0;
};

// The workload of one request over its own prompt.
WorkloadResult runWorkload(std::span<const std::uint32_t> prompt, const WorkloadShape& shape = {});

// Just the checksum of runWorkload (what executors report per request).
std::uint64_t workloadChecksum(std::span<const std::uint32_t> prompt,
                               const WorkloadShape& shape = {});

}  // namespace fairsched::kernels
