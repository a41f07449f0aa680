// fairsched-worker --cuda: each engine step's work on CUDA streams. The
// tokens a step processes (the prefill chunk of each prefilling sequence,
// the newest token of each decoding one) are copied to the device through
// pinned staging, packed (cu_seqlens, positions) and run through the
// workload kernel (kernels/cuda_kernels.hpp), one sequence per segment; the
// per-sequence checksums come back and are compared with the CPU reference
// (kernels/workload_reference.hpp), so a sequence mixed up on the device is
// caught. Steps alternate between `streams` streams with their own buffers:
// a step's copies overlap the previous step's tail. Built where nvcc is.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "fairsched/error.hpp"

namespace fairsched::reference {

class CudaStepRunner {
 public:
  struct Options {
    int device = 0;
    std::uint32_t streams = 2;
    std::uint32_t max_sequences = 64;          // per step
    std::uint32_t max_tokens_per_step = 4096;  // prefill chunk + one per decoding sequence
    bool verify = true;                        // compare checksums with the CPU reference
  };

  // kInvalidArgument: no CUDA device, no such device, or a build without
  // CUDA; kSystem: a CUDA call failed (the message names it).
  static Result<std::unique_ptr<CudaStepRunner>> create(const Options& options);
  ~CudaStepRunner();
  CudaStepRunner(const CudaStepRunner&) = delete;
  CudaStepRunner& operator=(const CudaStepRunner&) = delete;

  // Runs one step: `lengths[i]` tokens of sequence i, back to back in
  // `tokens`, and waits for it. Errors: kInvalidArgument (over the limits),
  // kSystem (a CUDA error, or a checksum that differs from the reference).
  Result<void> run(std::span<const std::uint32_t> lengths, std::span<const std::uint32_t> tokens);

  std::uint64_t steps() const { return steps_; }

 private:
  struct Impl;
  explicit CudaStepRunner(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  std::uint64_t steps_ = 0;
};

}  // namespace fairsched::reference
