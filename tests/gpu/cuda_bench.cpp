// GPU micro-benchmark (run by tests/gpu/run.sh; prints numbers, asserts none):
//   1. per-batch overhead, dispatch (submit) -> completion signal drained, for
//      small batches, on the CUDA executor and — as the baseline in the same
//      run — on the threaded CPU executor with ~zero modelled service time;
//   2. pack-kernel throughput against cudaMemcpyAsync device-to-device in the
//      same run: bytes the pack kernel reads + writes per second vs bytes
//      the copy reads + writes per second.
// Without a CUDA device it measures the CPU baseline only and says why.
#include <cuda_runtime_api.h>
#include <poll.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <variant>
#include <vector>

#include "daemon/exec/cpu_executor.hpp"
#include "daemon/exec/cuda_executor.hpp"
#include "daemon/loop/event_loop.hpp"
#include "kernels/cuda_kernels.hpp"

namespace fd = fairsched::daemon;
namespace fk = fairsched::kernels;

namespace {

struct Shape {
  std::uint32_t requests;
  std::uint32_t tokens_each;
};

fd::ExecBatch makeBatch(std::uint64_t id, Shape s, std::mt19937& rng) {
  fd::ExecBatch b;
  b.id = id;
  for (std::uint32_t i = 0; i < s.requests; ++i) {
    b.requests.push_back({id * 1000 + i, s.tokens_each, 1});
    for (std::uint32_t t = 0; t < s.tokens_each; ++t) b.tokens.push_back(rng());
  }
  return b;
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size())))];
}

// One batch at a time: submit, wait for the eventfd, drain. Returns false on
// a failed batch.
bool overhead(const char* name, fd::Executor& ex, Shape s, int iterations) {
  std::mt19937 rng(1);
  std::vector<fd::ExecBatch> batches;
  for (int i = 0; i < 64; ++i) batches.push_back(makeBatch(i + 1, s, rng));
  std::vector<double> us;
  std::vector<fd::BatchDone> done;
  for (int i = -50; i < iterations; ++i) {  // 50 warm-up rounds
    fd::ExecBatch b = batches[static_cast<std::size_t>(i + 50) % batches.size()];
    const fairsched::TimeNs start = fd::monotonicNow();
    ex.submit(std::move(b));
    done.clear();
    for (;;) {
      ex.drain(done);  // an inline executor has it ready already
      if (!done.empty()) break;
      pollfd p{ex.completionFd(), POLLIN, 0};
      if (poll(&p, 1, 5000) != 1) {
        std::printf("%s: no completion within 5 s\n", name);
        return false;
      }
    }
    const fairsched::TimeNs end = fd::monotonicNow();
    if (!done[0].ok) {
      std::printf("%s: batch failed: %s\n", name, done[0].error.c_str());
      return false;
    }
    if (i >= 0) us.push_back(static_cast<double>(end - start) / 1000.0);
  }
  double sum = 0;
  for (double x : us) sum += x;
  std::printf("overhead %-6s batch=%ux%u iterations=%d p50_us=%.1f p99_us=%.1f mean_us=%.1f\n",
              name, s.requests, s.tokens_each, iterations, percentile(us, 0.5),
              percentile(us, 0.99), sum / static_cast<double>(us.size()));
  return true;
}

#define BENCH_CUDA(expr)                                      \
  do {                                                        \
    const cudaError_t e_ = (expr);                            \
    if (e_ != cudaSuccess) {                                  \
      std::printf("%s: %s\n", #expr, cudaGetErrorString(e_)); \
      return false;                                           \
    }                                                         \
  } while (0)

// Pack over n requests of `each` tokens vs a D2D copy moving the same bytes.
bool packVsCopy(std::uint32_t n, std::uint32_t each, int reps) {
  const std::uint64_t total = std::uint64_t{n} * each;
  std::vector<std::uint32_t> lengths(n, each);
  std::uint32_t *d_len = nullptr, *d_cu = nullptr, *d_pos = nullptr, *d_seq = nullptr;
  void *src = nullptr, *dst = nullptr;
  // Pack reads lengths (and cu_seqlens, cached) and writes positions + seq_ids.
  const std::uint64_t pack_bytes = 4ull * n + 4ull * (n + 1) + 8ull * total;
  // The copy reads and writes half of that each, so both move pack_bytes.
  const std::uint64_t copy_size = pack_bytes / 2;
  BENCH_CUDA(cudaMalloc(reinterpret_cast<void**>(&d_len), 4ull * n));
  BENCH_CUDA(cudaMalloc(reinterpret_cast<void**>(&d_cu), 4ull * (n + 1)));
  BENCH_CUDA(cudaMalloc(reinterpret_cast<void**>(&d_pos), 4ull * total));
  BENCH_CUDA(cudaMalloc(reinterpret_cast<void**>(&d_seq), 4ull * total));
  BENCH_CUDA(cudaMalloc(&src, copy_size));
  BENCH_CUDA(cudaMalloc(&dst, copy_size));
  BENCH_CUDA(cudaMemcpy(d_len, lengths.data(), 4ull * n, cudaMemcpyHostToDevice));
  BENCH_CUDA(cudaMemset(src, 1, copy_size));
  cudaStream_t s = nullptr;
  cudaEvent_t a = nullptr, b = nullptr;
  BENCH_CUDA(cudaStreamCreate(&s));
  BENCH_CUDA(cudaEventCreate(&a));
  BENCH_CUDA(cudaEventCreate(&b));
  float pack_ms = 0, copy_ms = 0;
  for (int round = 0; round < 2; ++round) {  // round 0 warms up
    BENCH_CUDA(cudaEventRecord(a, s));
    for (int r = 0; r < reps; ++r) {
      BENCH_CUDA(
          fk::launchPack(d_len, n, static_cast<std::uint32_t>(total), d_cu, d_pos, d_seq, s));
    }
    BENCH_CUDA(cudaEventRecord(b, s));
    BENCH_CUDA(cudaEventSynchronize(b));
    BENCH_CUDA(cudaEventElapsedTime(&pack_ms, a, b));
    BENCH_CUDA(cudaEventRecord(a, s));
    for (int r = 0; r < reps; ++r) {
      BENCH_CUDA(cudaMemcpyAsync(dst, src, copy_size, cudaMemcpyDeviceToDevice, s));
    }
    BENCH_CUDA(cudaEventRecord(b, s));
    BENCH_CUDA(cudaEventSynchronize(b));
    BENCH_CUDA(cudaEventElapsedTime(&copy_ms, a, b));
  }
  const double pack_gbs = static_cast<double>(pack_bytes) * reps / (pack_ms * 1e6);
  const double copy_gbs = static_cast<double>(pack_bytes) * reps / (copy_ms * 1e6);
  std::printf("pack   requests=%u tokens=%llu bytes_moved=%llu reps=%d ms_per_rep=%.3f GB/s=%.1f\n",
              n, static_cast<unsigned long long>(total),
              static_cast<unsigned long long>(pack_bytes), reps, pack_ms / reps, pack_gbs);
  std::printf("memcpy d2d size=%llu bytes_moved=%llu reps=%d ms_per_rep=%.3f GB/s=%.1f\n",
              static_cast<unsigned long long>(copy_size),
              static_cast<unsigned long long>(pack_bytes), reps, copy_ms / reps, copy_gbs);
  std::printf("pack_vs_copy ratio=%.2f (target >= 0.80)\n", pack_gbs / copy_gbs);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaStreamDestroy(s);
  cudaFree(d_len);
  cudaFree(d_cu);
  cudaFree(d_pos);
  cudaFree(d_seq);
  cudaFree(src);
  cudaFree(dst);
  return true;
}

}  // namespace

int main() {
  const Shape shapes[] = {{1, 16}, {8, 64}, {32, 128}};
  const int kIterations = 2000;
  bool ok = true;

  // Baseline: the threaded CPU executor with ~zero modelled time (1 ns per
  // batch keeps it on its worker thread rather than inline).
  auto cpu = fd::CpuExecutor::create({0.001, 0.0, 1});
  if (!cpu) {
    std::printf("cpu executor: %s\n", cpu.error().message.c_str());
    return 1;
  }
  for (Shape s : shapes) ok = overhead("cpu", *cpu.value(), s, kIterations) && ok;

  if (auto device = fd::CudaExecutor::checkDevice(0); !device) {
    std::printf("cuda: not measured: no CUDA device: %s\n", device.error().message.c_str());
    return ok ? 0 : 1;
  }
  auto cuda = fd::CudaExecutor::create({});
  if (!cuda) {
    std::printf("%s\n", cuda.error().message.c_str());
    return 1;
  }
  for (Shape s : shapes) ok = overhead("cuda", *cuda.value(), s, kIterations) && ok;
  std::printf("target: cuda per-batch overhead <= 20 us for small batches\n");

  ok = packVsCopy(2048, 16384, 20) && ok;  // 32 Mi tokens, 256 MiB written
  ok = packVsCopy(32, 128, 200) && ok;     // a small batch: launch-bound
  return ok ? 0 : 1;
}
