// Builds the executor of every endpoint from its config: cuda where asked and
// available (else its fallback), cpu otherwise.
#include "daemon/exec/executor_factory.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <stdexcept>

#include <spdlog/spdlog.h>

#include "daemon/exec/cpu_executor.hpp"
#if FAIRSCHED_HAVE_CUDA
#include "daemon/exec/cuda_executor.hpp"
#endif

namespace fairsched::daemon {
namespace {

class WorkerEndpointExecutor final : public Executor {
 public:
  explicit WorkerEndpointExecutor(int fd) : fd_(fd) {}
  ~WorkerEndpointExecutor() override { ::close(fd_); }
  std::string_view name() const override { return "worker"; }
  std::uint32_t slots() const override { return 0; }
  std::uint32_t freeSlots() const override { return 0; }
  void submit(ExecBatch&&) override {
    throw std::logic_error("a worker endpoint runs no batches in the daemon");
  }
  void drain(std::vector<BatchDone>&) override {}
  int completionFd() const override { return fd_; }  // never signalled

 private:
  int fd_;
};

}  // namespace

Result<std::unique_ptr<Executor>> makeWorkerEndpointExecutor() {
  const int fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (fd < 0) return systemError("eventfd for a worker endpoint");
  return std::unique_ptr<Executor>(std::make_unique<WorkerEndpointExecutor>(fd));
}

Result<Executors> makeExecutors(const config::Config& cfg) {
  Executors out;
  for (const config::EndpointConfig& ec : cfg.endpoints) {
    if (ec.executor == config::ExecutorKind::kWorker) {
      auto ex = makeWorkerEndpointExecutor();
      if (!ex) return withContext("endpoints." + ec.name, std::move(ex).error());
      spdlog::info("endpoints.{}: served by workers", ec.name);
      out.push_back(std::move(ex).value());
      continue;
    }
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
    auto ex = CpuExecutor::create(
        {ec.cpu.per_batch_us, ec.cpu.per_token_us, ec.cpu.threads, ec.cpu.workload});
    if (!ex) return withContext("endpoints." + ec.name, std::move(ex).error());
    out.push_back(std::move(ex).value());
  }
  return out;
}

}  // namespace fairsched::daemon
