#include "worker/cuda_step.hpp"

#include <algorithm>
#include <numeric>
#include <vector>

#if FAIRSCHED_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cuda_kernels.hpp"
#include "kernels/workload_reference.hpp"
#endif

namespace fairsched::reference {

#if FAIRSCHED_HAVE_CUDA

namespace {

Error cudaFailure(const char* call, cudaError_t e) {
  return Error{ErrorCode::kSystem, 0,
               std::string(call) + ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e)};
}

#define FAIRSCHED_STEP_TRY(expr)                                              \
  do {                                                                        \
    const cudaError_t fairsched_e_ = (expr);                                  \
    if (fairsched_e_ != cudaSuccess) return cudaFailure(#expr, fairsched_e_); \
  } while (0)

}  // namespace

struct CudaStepRunner::Impl {
  struct Lane {
    cudaStream_t stream = nullptr;
    std::uint32_t* host = nullptr;  // pinned: lengths, then tokens; checksums after
    std::uint32_t* d_lengths = nullptr;
    std::uint32_t* d_tokens = nullptr;
    std::uint32_t* d_cu_seqlens = nullptr;
    std::uint32_t* d_positions = nullptr;
    std::uint32_t* d_seq_ids = nullptr;
    std::uint32_t* d_out = nullptr;
    std::uint64_t* d_checksums = nullptr;
    std::uint64_t* h_checksums = nullptr;
  };
  Options options;
  kernels::WorkloadShape shape;
  std::uint32_t* table = nullptr;
  std::vector<Lane> lanes;
  std::size_t next = 0;

  ~Impl() {
    for (Lane& l : lanes) {
      if (l.stream) cudaStreamSynchronize(l.stream);
      cudaFreeHost(l.host);
      cudaFreeHost(l.h_checksums);
      cudaFree(l.d_lengths);
      if (l.stream) cudaStreamDestroy(l.stream);
    }
    cudaFree(table);
  }

  Result<void> init() {
    FAIRSCHED_STEP_TRY(cudaSetDevice(options.device));
    const std::size_t n = options.max_sequences, t = options.max_tokens_per_step;
    FAIRSCHED_STEP_TRY(
        cudaMalloc(reinterpret_cast<void**>(&table), 4ull * shape.vocab * shape.dim));
    lanes.resize(std::max<std::uint32_t>(1, options.streams));
    for (Lane& l : lanes) {
      FAIRSCHED_STEP_TRY(cudaStreamCreateWithFlags(&l.stream, cudaStreamNonBlocking));
      FAIRSCHED_STEP_TRY(
          cudaHostAlloc(reinterpret_cast<void**>(&l.host), 4 * (n + t), cudaHostAllocDefault));
      FAIRSCHED_STEP_TRY(
          cudaHostAlloc(reinterpret_cast<void**>(&l.h_checksums), 8 * n, cudaHostAllocDefault));
      // One device allocation per lane, carved up.
      const std::size_t words = n + t + (n + 1) + 2 * t + n * shape.dim;
      std::byte* d = nullptr;
      FAIRSCHED_STEP_TRY(cudaMalloc(reinterpret_cast<void**>(&d), 4 * words + 8 * n + 8));
      l.d_lengths = reinterpret_cast<std::uint32_t*>(d);
      l.d_tokens = l.d_lengths + n;
      l.d_cu_seqlens = l.d_tokens + t;
      l.d_positions = l.d_cu_seqlens + n + 1;
      l.d_seq_ids = l.d_positions + t;
      l.d_out = l.d_seq_ids + t;
      const auto checksums_at =
          (reinterpret_cast<std::uintptr_t>(l.d_out + n * shape.dim) + 7) & ~std::uintptr_t{7};
      l.d_checksums = reinterpret_cast<std::uint64_t*>(checksums_at);
    }
    FAIRSCHED_STEP_TRY(kernels::launchFillTable(table, shape, lanes[0].stream));
    FAIRSCHED_STEP_TRY(cudaStreamSynchronize(lanes[0].stream));
    return {};
  }

  Result<void> run(std::span<const std::uint32_t> lengths, std::span<const std::uint32_t> tokens) {
    const auto n = static_cast<std::uint32_t>(lengths.size());
    const auto total = static_cast<std::uint32_t>(tokens.size());
    if (n == 0) return {};
    Lane& l = lanes[next++ % lanes.size()];
    FAIRSCHED_STEP_TRY(cudaStreamSynchronize(l.stream));  // its buffers are free again
    std::copy(lengths.begin(), lengths.end(), l.host);
    std::copy(tokens.begin(), tokens.end(), l.host + n);
    FAIRSCHED_STEP_TRY(
        cudaMemcpyAsync(l.d_lengths, l.host, 4ull * n, cudaMemcpyHostToDevice, l.stream));
    FAIRSCHED_STEP_TRY(
        cudaMemcpyAsync(l.d_tokens, l.host + n, 4ull * total, cudaMemcpyHostToDevice, l.stream));
    FAIRSCHED_STEP_TRY(kernels::launchPack(l.d_lengths, n, total, l.d_cu_seqlens, l.d_positions,
                                           l.d_seq_ids, l.stream));
    FAIRSCHED_STEP_TRY(kernels::launchWorkload(table, shape, l.d_tokens, l.d_cu_seqlens,
                                               l.d_positions, n, l.d_out, l.d_checksums, l.stream));
    FAIRSCHED_STEP_TRY(
        cudaMemcpyAsync(l.h_checksums, l.d_checksums, 8ull * n, cudaMemcpyDeviceToHost, l.stream));
    FAIRSCHED_STEP_TRY(cudaStreamSynchronize(l.stream));
    if (!options.verify) return {};
    std::size_t at = 0;
    for (std::uint32_t i = 0; i < n; ++i) {
      const std::uint64_t want = kernels::workloadChecksum(tokens.subspan(at, lengths[i]), shape);
      if (l.h_checksums[i] != want) {
        return Error{ErrorCode::kSystem, 0,
                     "sequence " + std::to_string(i) +
                         " of the step: device checksum differs "
                         "from the CPU reference"};
      }
      at += lengths[i];
    }
    return {};
  }
};

Result<std::unique_ptr<CudaStepRunner>> CudaStepRunner::create(const Options& options) {
  int count = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess || count == 0) {
    return Error{ErrorCode::kInvalidArgument, 0,
                 std::string("no CUDA device: ") +
                     (e == cudaSuccess ? "none found" : cudaGetErrorString(e))};
  }
  if (options.device < 0 || options.device >= count) {
    return Error{ErrorCode::kInvalidArgument, 0,
                 "CUDA device " + std::to_string(options.device) + " of " + std::to_string(count)};
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  if (Result<void> r = impl->init(); !r) return std::move(r).error();
  return std::unique_ptr<CudaStepRunner>(new CudaStepRunner(std::move(impl)));
}

Result<void> CudaStepRunner::run(std::span<const std::uint32_t> lengths,
                                 std::span<const std::uint32_t> tokens) {
  if (lengths.size() > impl_->options.max_sequences ||
      tokens.size() > impl_->options.max_tokens_per_step ||
      std::accumulate(lengths.begin(), lengths.end(), std::uint64_t{0}) != tokens.size()) {
    return Error{ErrorCode::kInvalidArgument, 0, "step over the runner's limits"};
  }
  Result<void> r = impl_->run(lengths, tokens);
  if (r) ++steps_;
  return r;
}

#else  // no CUDA in this build

struct CudaStepRunner::Impl {};

Result<std::unique_ptr<CudaStepRunner>> CudaStepRunner::create(const Options&) {
  return Error{ErrorCode::kInvalidArgument, 0,
               "this build has no CUDA (nvcc was not found when it was configured)"};
}

Result<void> CudaStepRunner::run(std::span<const std::uint32_t>, std::span<const std::uint32_t>) {
  return Error{ErrorCode::kInvalidArgument, 0, "no CUDA in this build"};
}

#endif

CudaStepRunner::CudaStepRunner(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaStepRunner::~CudaStepRunner() = default;

}  // namespace fairsched::reference
