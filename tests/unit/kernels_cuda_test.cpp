// The CUDA kernels (kernels/cuda_kernels.hpp) against their CPU references,
// bit for bit, over many batch shapes. Needs a CUDA device: skips with the
// reason where there is none (or where the build has no CUDA).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "kernels/pack_reference.hpp"
#include "kernels/workload_reference.hpp"
#include "tests/support/seeded_rng.hpp"

#if FAIRSCHED_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "daemon/exec/cuda_executor.hpp"
#include "kernels/cuda_kernels.hpp"
#endif

namespace fairsched::kernels {
namespace {

using U32 = std::vector<std::uint32_t>;

#if FAIRSCHED_HAVE_CUDA

#define SKIP_WITHOUT_CUDA_DEVICE()                                     \
  do {                                                                 \
    if (auto device = daemon::CudaExecutor::checkDevice(0); !device) { \
      GTEST_SKIP() << "no CUDA device: " << device.error().message;    \
    }                                                                  \
  } while (0)

#define CUDA_OK(expr)                                                      \
  do {                                                                     \
    const cudaError_t e_ = (expr);                                         \
    ASSERT_EQ(e_, cudaSuccess) << #expr << ": " << cudaGetErrorString(e_); \
  } while (0)

// A device array freed on scope exit; at least one element so a zero-sized
// batch still has a valid pointer.
template <class T>
struct DeviceArray {
  explicit DeviceArray(std::size_t n) : size(n) {
    if (cudaMalloc(reinterpret_cast<void**>(&ptr), sizeof(T) * (n > 0 ? n : 1)) != cudaSuccess)
      ptr = nullptr;
  }
  ~DeviceArray() { cudaFree(ptr); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  std::vector<T> read() const {
    std::vector<T> v(size);
    if (size > 0) cudaMemcpy(v.data(), ptr, sizeof(T) * size, cudaMemcpyDeviceToHost);
    return v;
  }
  T* ptr = nullptr;
  std::size_t size;
};

struct Table {
  explicit Table(WorkloadShape s) : shape(s), values(std::size_t{s.vocab} * s.dim) {}
  WorkloadShape shape;
  DeviceArray<std::uint32_t> values;
};

// Runs pack + workload on the GPU for one batch and compares every array with
// the CPU reference.
void checkBatch(const Table& table, const U32& lengths, std::uint32_t seed) {
  SCOPED_TRACE("seed " + std::to_string(seed) + ", " + std::to_string(lengths.size()) +
               " requests, dim " + std::to_string(table.shape.dim));
  std::mt19937 rng(seed);
  const PackedLayout want = packReference(lengths);
  const std::uint32_t total = want.cu_seqlens.back();
  const std::uint32_t n = static_cast<std::uint32_t>(lengths.size());
  U32 tokens(total);
  for (auto& t : tokens) t = rng();

  DeviceArray<std::uint32_t> d_lengths(n), d_tokens(total), d_cu(n + 1), d_pos(total), d_seq(total),
      d_out(std::size_t{n} * table.shape.dim);
  DeviceArray<std::uint64_t> d_sum(n);
  ASSERT_NE(d_lengths.ptr, nullptr);
  ASSERT_NE(d_out.ptr, nullptr);
  if (n > 0) CUDA_OK(cudaMemcpy(d_lengths.ptr, lengths.data(), 4 * n, cudaMemcpyHostToDevice));
  if (total > 0)
    CUDA_OK(cudaMemcpy(d_tokens.ptr, tokens.data(), 4ull * total, cudaMemcpyHostToDevice));
  CUDA_OK(launchPack(d_lengths.ptr, n, total, d_cu.ptr, d_pos.ptr, d_seq.ptr, nullptr));
  CUDA_OK(launchWorkload(table.values.ptr, table.shape, d_tokens.ptr, d_cu.ptr, d_pos.ptr, n,
                         d_out.ptr, d_sum.ptr, nullptr));
  CUDA_OK(cudaDeviceSynchronize());

  EXPECT_EQ(d_cu.read(), want.cu_seqlens);
  EXPECT_EQ(d_pos.read(), want.positions);
  EXPECT_EQ(d_seq.read(), want.seq_ids);
  const U32 out = d_out.read();
  const std::vector<std::uint64_t> sums = d_sum.read();
  for (std::uint32_t r = 0; r < n; ++r) {
    const std::span<const std::uint32_t> prompt(tokens.data() + want.cu_seqlens[r], lengths[r]);
    const WorkloadResult ref = runWorkload(prompt, table.shape);
    ASSERT_EQ(sums[r], ref.checksum) << "request " << r;
    ASSERT_EQ(U32(out.begin() + std::size_t{r} * table.shape.dim,
                  out.begin() + std::size_t{r + 1} * table.shape.dim),
              ref.output)
        << "request " << r;
  }
}

TEST(KernelsCuda, FillTableMatchesTableValue) {
  SKIP_WITHOUT_CUDA_DEVICE();
  Table table({1000, 24});
  CUDA_OK(launchFillTable(table.values.ptr, table.shape, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  const U32 got = table.values.read();
  for (std::uint32_t v = 0; v < 1000; ++v) {
    for (std::uint32_t d = 0; d < 24; ++d) ASSERT_EQ(got[v * 24 + d], tableValue(v, d));
  }
}

TEST(KernelsCuda, PackAndWorkloadMatchTheReferenceForManyShapes) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const auto seed = static_cast<unsigned>(testing::testSeed());
  for (const WorkloadShape shape :
       {WorkloadShape{}, WorkloadShape{1, 1}, WorkloadShape{50000, 300}}) {
    Table table(shape);
    CUDA_OK(launchFillTable(table.values.ptr, shape, nullptr));
    // Empty, one token, zero-length requests, max tokens in one request,
    // more requests than one scan chunk.
    checkBatch(table, {}, seed);
    checkBatch(table, {0}, seed);
    checkBatch(table, {1}, seed);
    checkBatch(table, {0, 0, 0}, seed);
    checkBatch(table, {1, 2, 3, 0, 5}, seed);
    checkBatch(table, {16384}, seed);
    checkBatch(table, U32(1025, 1), seed);
    checkBatch(table, U32(3000, 0), seed);
    std::mt19937 rng(seed);
    for (int b = 0; b < 20; ++b) {
      U32 lengths(1 + rng() % 2500);
      for (auto& l : lengths) l = rng() % 4 == 0 ? 0 : rng() % 300;
      checkBatch(table, lengths, seed + b);
    }
  }
}

#else  // !FAIRSCHED_HAVE_CUDA

TEST(KernelsCuda, SkippedWithoutCuda) {
  GTEST_SKIP() << "no CUDA device: built without CUDA (nvcc not found at configure time)";
}

#endif

}  // namespace
}  // namespace fairsched::kernels
