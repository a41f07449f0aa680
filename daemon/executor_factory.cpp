// Builds the executor of every endpoint from its config: cuda where asked and
// available (else its fallback), cpu otherwise.
#include "daemon/executor_factory.hpp"

#include <spdlog/spdlog.h>

#include "daemon/cpu_executor.hpp"
#if FAIRSCHED_HAVE_CUDA
#include "daemon/cuda_executor.hpp"
#endif

namespace fairsched::daemon {

Result<Executors> makeExecutors(const config::Config& cfg) {
  Executors out;
  for (const config::EndpointConfig& ec : cfg.endpoints) {
    if (ec.executor == config::ExecutorKind::kCuda) {
#if FAIRSCHED_HAVE_CUDA
      auto ex = CudaExecutor::create(
          {ec.cuda.device, ec.cuda.streams, ec.cuda.staging_bytes, ec.max_batch_requests, {}});
      if (ex.ok()) {
        if (ex.value()->maxBatchTokens() < ec.max_batch_tokens) {
          return Error{Errc::kConfig, "endpoints." + ec.name + ": cuda.staging_bytes = " +
                                          std::to_string(ec.cuda.staging_bytes) + " holds " +
                                          std::to_string(ex.value()->maxBatchTokens()) +
                                          " tokens per batch, fewer than max_batch_tokens = " +
                                          std::to_string(ec.max_batch_tokens)};
        }
        spdlog::info("endpoints.{}: cuda executor on device {} ({} streams)", ec.name,
                     ec.cuda.device, ec.cuda.streams);
        out.push_back(std::move(ex).value());
        continue;
      }
      Error why = std::move(ex).error();
#else
      Error why{Errc::kUnavailable, "executor \"cuda\" is not available in this build"};
#endif
      if (ec.cuda.fallback != config::ExecutorKind::kCpu) {
        why.message =
            "endpoints." + ec.name + ": " + why.message + " and no fallback = \"cpu\" is set";
        return why;
      }
      spdlog::warn("endpoints.{}: {}; falling back to the cpu executor", ec.name, why.message);
    }
    auto ex = CpuExecutor::create({ec.cpu.per_batch_us, ec.cpu.per_token_us, ec.cpu.threads});
    if (!ex) return withContext("endpoints." + ec.name, std::move(ex).error());
    out.push_back(std::move(ex).value());
  }
  return out;
}

}  // namespace fairsched::daemon
