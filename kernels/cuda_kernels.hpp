// Host launch wrappers of the CUDA kernels (pack.cu, workload.cu), callable
// from plain C++. Each enqueues its work on `stream` and returns the launch
// error (cudaGetLastError), never an asynchronous one: those surface on the
// stream. All pointers are device pointers. The CPU references beside them
// (pack_reference.hpp, workload_reference.hpp) define what they compute.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/workload_hash.hpp"

namespace fairsched::kernels {

// Pack: lengths[n] -> cu_seqlens[n+1] (exclusive prefix sums), and for each of
// the `total_tokens` = Σ lengths tokens its position within its request and
// its request index. REQUIRES: total_tokens == Σ lengths (the host knows it;
// passing it saves a device->host round trip).
cudaError_t launchPack(const std::uint32_t* lengths, std::uint32_t n, std::uint32_t total_tokens,
                       std::uint32_t* cu_seqlens, std::uint32_t* positions, std::uint32_t* seq_ids,
                       cudaStream_t stream);

// Fills table[vocab][dim] with tableValue(v, d). Done once at start.
cudaError_t launchFillTable(std::uint32_t* table, WorkloadShape shape, cudaStream_t stream);

// The workload of n requests packed back to back: for request r, out[r*dim..]
// and checksums[r] as runWorkload() computes them over tokens
// [cu_seqlens[r], cu_seqlens[r+1]), with `positions` from launchPack.
cudaError_t launchWorkload(const std::uint32_t* table, WorkloadShape shape,
                           const std::uint32_t* tokens, const std::uint32_t* cu_seqlens,
                           const std::uint32_t* positions, std::uint32_t n, std::uint32_t* out,
                           std::uint64_t* checksums, cudaStream_t stream);

}  // namespace fairsched::kernels
