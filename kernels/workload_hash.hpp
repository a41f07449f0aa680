// The integer functions the workload is built from, shared by the CPU
// reference (workload_reference.cpp) and the CUDA kernels (workload.cu) so
// both compute the same bits: the embedding table's values and the per-element
// checksum term. Pure integer arithmetic, wrap-around uint64: no float, no
// order dependence once the terms are summed.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define FAIRSCHED_HD __host__ __device__ __forceinline__
#else
#define FAIRSCHED_HD inline
#endif

namespace fairsched::kernels {

// The shape of the stand-in model. Token ids are taken modulo `vocab`.
struct WorkloadShape {
  std::uint32_t vocab = 32000;
  std::uint32_t dim = 16;  // REQUIRES: 1 <= dim <= kMaxDim
};
inline constexpr std::uint32_t kMaxDim = 1024;

// The splitmix64 finalizer: a bijection on uint64 with good avalanche.
FAIRSCHED_HD std::uint64_t mix64(std::uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

// table[v][d]: generated, never loaded, so every process builds the same one.
FAIRSCHED_HD std::uint32_t tableValue(std::uint32_t v, std::uint32_t d) {
  return static_cast<std::uint32_t>(mix64((static_cast<std::uint64_t>(v) << 32) | d) >> 32);
}

// The checksum term of one gathered element: its value and its place in the
// request (element = position * dim + d). A token moved, dropped or taken
// from another request changes the sum.
FAIRSCHED_HD std::uint64_t checksumTerm(std::uint32_t value, std::uint64_t element) {
  return mix64((static_cast<std::uint64_t>(value) << 32) ^ (element * 0x9e3779b97f4a7c15ull));
}

// Seeds a request's checksum with its length, so empty and trailing-zero
// prompts differ.
FAIRSCHED_HD std::uint64_t checksumSeed(std::uint64_t tokens) {
  return mix64(0x6a09e667f3bcc909ull ^ tokens);
}

}  // namespace fairsched::kernels
