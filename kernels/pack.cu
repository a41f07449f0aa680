#include <cuda_runtime.h>

#include "kernels/cuda_kernels.hpp"

namespace fairsched::kernels {
namespace {

constexpr unsigned kScanThreads = 1024;  // one block; a multiple of 32
constexpr unsigned kFull = 0xffffffffu;

// One block scans all n lengths, kScanThreads at a time, carrying the running
// total between chunks. Batches hold at most a few thousand requests, so one
// block is enough and keeps the scan to a single launch.
__global__ void packScanKernel(const std::uint32_t* __restrict__ lengths, std::uint32_t n,
                               std::uint32_t* __restrict__ cu_seqlens) {
  __shared__ std::uint32_t warp_sums[32];
  __shared__ std::uint32_t carry;
  const unsigned lane = threadIdx.x & 31u;
  const unsigned warp = threadIdx.x >> 5;
  if (threadIdx.x == 0) {
    carry = 0;
    cu_seqlens[0] = 0;
  }
  __syncthreads();
  for (std::uint32_t base = 0; base < n; base += blockDim.x) {
    const std::uint32_t i = base + threadIdx.x;
    std::uint32_t x = i < n ? lengths[i] : 0;
    for (unsigned o = 1; o < 32; o <<= 1) {
      const std::uint32_t y = __shfl_up_sync(kFull, x, o);
      if (lane >= o) x += y;
    }
    if (lane == 31) warp_sums[warp] = x;
    __syncthreads();
    if (warp == 0) {
      std::uint32_t w = lane < (blockDim.x >> 5) ? warp_sums[lane] : 0;
      for (unsigned o = 1; o < 32; o <<= 1) {
        const std::uint32_t y = __shfl_up_sync(kFull, w, o);
        if (lane >= o) w += y;
      }
      warp_sums[lane] = w;  // inclusive over warps
    }
    __syncthreads();
    const std::uint32_t inclusive = x + (warp > 0 ? warp_sums[warp - 1] : 0) + carry;
    if (i < n) cu_seqlens[i + 1] = inclusive;
    __syncthreads();  // everyone has read carry and warp_sums
    if (threadIdx.x == blockDim.x - 1) carry = inclusive;
    __syncthreads();
  }
}

// One thread per token (grid-stride): its request is the last r with
// cu_seqlens[r] <= t (zero-length requests repeat an entry), found by binary
// search over n+1 entries that stay in cache.
__global__ void packPositionsKernel(const std::uint32_t* __restrict__ cu_seqlens, std::uint32_t n,
                                    std::uint32_t total, std::uint32_t* __restrict__ positions,
                                    std::uint32_t* __restrict__ seq_ids) {
  for (std::uint32_t t = blockIdx.x * blockDim.x + threadIdx.x; t < total;
       t += gridDim.x * blockDim.x) {
    std::uint32_t lo = 0, hi = n;
    while (lo < hi) {
      const std::uint32_t mid = lo + (hi - lo + 1) / 2;
      if (cu_seqlens[mid] <= t) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    positions[t] = t - cu_seqlens[lo];
    seq_ids[t] = lo;
  }
}

}  // namespace

cudaError_t launchPack(const std::uint32_t* lengths, std::uint32_t n, std::uint32_t total_tokens,
                       std::uint32_t* cu_seqlens, std::uint32_t* positions, std::uint32_t* seq_ids,
                       cudaStream_t stream) {
  packScanKernel<<<1, kScanThreads, 0, stream>>>(lengths, n, cu_seqlens);
  if (total_tokens > 0) {
    constexpr unsigned kThreads = 256;
    const unsigned needed = (total_tokens + kThreads - 1) / kThreads;
    const unsigned blocks = needed < 65535u ? needed : 65535u;  // grid-stride beyond
    packPositionsKernel<<<blocks, kThreads, 0, stream>>>(cu_seqlens, n, total_tokens, positions,
                                                         seq_ids);
  }
  return cudaGetLastError();
}

}  // namespace fairsched::kernels
