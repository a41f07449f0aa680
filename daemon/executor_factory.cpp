// Builds the executor of every endpoint from its config: cuda where asked and
// available (else its fallback), cpu otherwise.
#include "daemon/executor_factory.hpp"

#include <spdlog/spdlog.h>

#include "daemon/cpu_executor.hpp"
#if FAIRSCHED_HAVE_CUDA
#include "daemon/cuda_executor.hpp"
#endif

namespace fairsched::daemon {

std::variant<Executors, std::string> makeExecutors(const config::Config& cfg) {
  Executors out;
  for (const config::EndpointConfig& ec : cfg.endpoints) {
    if (ec.executor == config::ExecutorKind::kCuda) {
#if FAIRSCHED_HAVE_CUDA
      auto ex = CudaExecutor::create(
          {ec.cuda.device, ec.cuda.streams, ec.cuda.staging_bytes, ec.max_batch_requests, {}});
      if (auto* ok = std::get_if<std::unique_ptr<CudaExecutor>>(&ex)) {
        if ((*ok)->maxBatchTokens() < ec.max_batch_tokens) {
          return "endpoints." + ec.name +
                 ": cuda.staging_bytes = " + std::to_string(ec.cuda.staging_bytes) + " holds " +
                 std::to_string((*ok)->maxBatchTokens()) +
                 " tokens per batch, fewer than max_batch_tokens = " +
                 std::to_string(ec.max_batch_tokens);
        }
        spdlog::info("endpoints.{}: cuda executor on device {} ({} streams)", ec.name,
                     ec.cuda.device, ec.cuda.streams);
        out.push_back(std::move(*ok));
        continue;
      }
      const std::string why = std::get<std::string>(ex);
#else
      const std::string why = "executor \"cuda\" is not available in this build";
#endif
      if (ec.cuda.fallback != config::ExecutorKind::kCpu) {
        return "endpoints." + ec.name + ": " + why + " and no fallback = \"cpu\" is set";
      }
      spdlog::warn("endpoints.{}: {}; falling back to the cpu executor", ec.name, why);
    }
    auto ex = CpuExecutor::create({ec.cpu.per_batch_us, ec.cpu.per_token_us, ec.cpu.threads});
    if (auto* err = std::get_if<std::string>(&ex)) return "endpoints." + ec.name + ": " + *err;
    out.push_back(std::move(std::get<std::unique_ptr<CpuExecutor>>(ex)));
  }
  return out;
}

}  // namespace fairsched::daemon
