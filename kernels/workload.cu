#include <cuda_runtime.h>

#include "kernels/cuda_kernels.hpp"

namespace fairsched::kernels {
namespace {

constexpr unsigned kWorkloadThreads = 256;
constexpr unsigned kFull = 0xffffffffu;

__global__ void fillTableKernel(std::uint32_t* __restrict__ table, std::uint32_t vocab,
                                std::uint32_t dim) {
  const std::uint64_t total = static_cast<std::uint64_t>(vocab) * dim;
  for (std::uint64_t i = blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x;
       i < total; i += static_cast<std::uint64_t>(gridDim.x) * blockDim.x) {
    table[i] = tableValue(static_cast<std::uint32_t>(i / dim), static_cast<std::uint32_t>(i % dim));
  }
}

// One block per request. Threads stride over the request's tokens × dim
// elements: gather, add into the shared output vector (uint32 atomics wrap
// and commute, so the result is the reference's whatever the order) and into
// a per-thread uint64 checksum, then reduce the checksum over the block.
__global__ void workloadKernel(const std::uint32_t* __restrict__ table, std::uint32_t vocab,
                               std::uint32_t dim, const std::uint32_t* __restrict__ tokens,
                               const std::uint32_t* __restrict__ cu_seqlens,
                               const std::uint32_t* __restrict__ positions,
                               std::uint32_t* __restrict__ out,
                               std::uint64_t* __restrict__ checksums) {
  extern __shared__ std::uint32_t s_out[];  // dim entries
  __shared__ std::uint64_t s_warp[kWorkloadThreads / 32];
  const std::uint32_t r = blockIdx.x;
  const std::uint32_t begin = cu_seqlens[r];
  const std::uint32_t end = cu_seqlens[r + 1];
  for (std::uint32_t d = threadIdx.x; d < dim; d += blockDim.x) s_out[d] = 0;
  __syncthreads();

  std::uint64_t h = 0;
  const std::uint64_t elements = static_cast<std::uint64_t>(end - begin) * dim;
  for (std::uint64_t e = threadIdx.x; e < elements; e += blockDim.x) {
    const std::uint32_t t = begin + static_cast<std::uint32_t>(e / dim);
    const std::uint32_t d = static_cast<std::uint32_t>(e % dim);
    const std::uint32_t x = table[static_cast<std::uint64_t>(tokens[t] % vocab) * dim + d];
    atomicAdd(&s_out[d], x);
    h += checksumTerm(x, static_cast<std::uint64_t>(positions[t]) * dim + d);
  }
  for (unsigned o = 16; o > 0; o >>= 1) h += __shfl_down_sync(kFull, h, o);
  if ((threadIdx.x & 31u) == 0) s_warp[threadIdx.x >> 5] = h;
  __syncthreads();
  if (threadIdx.x == 0) {
    std::uint64_t sum = checksumSeed(end - begin);
    for (unsigned w = 0; w < blockDim.x / 32; ++w) sum += s_warp[w];
    checksums[r] = sum;
  }
  for (std::uint32_t d = threadIdx.x; d < dim; d += blockDim.x) {
    out[static_cast<std::uint64_t>(r) * dim + d] = s_out[d];
  }
}

}  // namespace

cudaError_t launchFillTable(std::uint32_t* table, WorkloadShape shape, cudaStream_t stream) {
  if (shape.vocab == 0 || shape.dim == 0 || shape.dim > kMaxDim) return cudaErrorInvalidValue;
  constexpr unsigned kThreads = 256;
  const std::uint64_t total = static_cast<std::uint64_t>(shape.vocab) * shape.dim;
  const std::uint64_t needed = (total + kThreads - 1) / kThreads;
  const unsigned blocks = needed < 65535u ? static_cast<unsigned>(needed) : 65535u;
  fillTableKernel<<<blocks, kThreads, 0, stream>>>(table, shape.vocab, shape.dim);
  return cudaGetLastError();
}

cudaError_t launchWorkload(const std::uint32_t* table, WorkloadShape shape,
                           const std::uint32_t* tokens, const std::uint32_t* cu_seqlens,
                           const std::uint32_t* positions, std::uint32_t n, std::uint32_t* out,
                           std::uint64_t* checksums, cudaStream_t stream) {
  if (shape.vocab == 0 || shape.dim == 0 || shape.dim > kMaxDim) return cudaErrorInvalidValue;
  if (n == 0) return cudaGetLastError();
  workloadKernel<<<n, kWorkloadThreads, shape.dim * sizeof(std::uint32_t), stream>>>(
      table, shape.vocab, shape.dim, tokens, cu_seqlens, positions, out, checksums);
  return cudaGetLastError();
}

}  // namespace fairsched::kernels
