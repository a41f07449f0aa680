#include "daemon/exec/cpu_executor.hpp"

#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <span>

#include "kernels/workload_reference.hpp"

namespace fairsched::daemon {
namespace {

void signal(int fd) {
  const std::uint64_t one = 1;
  // EAGAIN only when the counter is saturated: a signal is pending anyway.
  [[maybe_unused]] const ssize_t n = ::write(fd, &one, sizeof one);
}

void sleepUntil(TimeNs deadline) {
  timespec ts{};
  ts.tv_sec = deadline / kNsPerSec;
  ts.tv_nsec = deadline % kNsPerSec;
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

}  // namespace

Result<std::unique_ptr<CpuExecutor>> CpuExecutor::create(const Options& options) {
  if (options.threads == 0) return Error{Errc::kConfig, "cpu executor: threads must be >= 1"};
  if (!(options.per_batch_us >= 0) || !(options.per_token_us >= 0)) {
    return Error{Errc::kConfig, "cpu executor: per_batch_us and per_token_us must be >= 0"};
  }
  std::unique_ptr<CpuExecutor> ex(new CpuExecutor(options));
  // Build the reference workload's table now, not inside the first batch.
  (void)kernels::workloadChecksum(std::span<const std::uint32_t>{});
  ex->done_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (ex->done_fd_ < 0) return systemError("cpu executor: eventfd");
  if (options.per_batch_us == 0 && options.per_token_us == 0) {
    ex->inline_ = true;
    return ex;
  }
  for (std::uint32_t i = 0; i < options.threads; ++i) {
    auto w = std::make_unique<Worker>();
    w->wake_fd = eventfd(0, EFD_CLOEXEC);
    if (w->wake_fd < 0) return systemError("cpu executor: eventfd");
    ex->workers_.push_back(std::move(w));
  }
  for (auto& w : ex->workers_) {
    Worker* raw = w.get();
    w->thread = std::thread([e = ex.get(), raw] { e->work(*raw); });
  }
  return ex;
}

CpuExecutor::~CpuExecutor() {
  stopping_ = true;
  for (auto& w : workers_) {
    if (w->wake_fd >= 0) signal(w->wake_fd);
  }
  for (auto& w : workers_) {
    if (w->thread.joinable()) w->thread.join();
    if (w->wake_fd >= 0) close(w->wake_fd);
  }
  if (done_fd_ >= 0) close(done_fd_);
}

TimeNs CpuExecutor::serviceTime(std::uint64_t tokens) const {
  const double us = options_.per_batch_us + options_.per_token_us * static_cast<double>(tokens);
  return static_cast<TimeNs>(std::llround(us * kNsPerUs));
}

void CpuExecutor::submit(ExecBatch&& batch) {
  if (inline_) {
    BatchDone done;
    if (!spare_.empty()) {
      done = std::move(spare_.back());
      spare_.pop_back();
    }
    if (options_.workload) {
      const TimeNs start = options_.env->now();
      run(batch, done);
      done.service_ns = options_.env->now() - start;
    } else {
      run(batch, done);  // no work, no time: nothing to measure
    }
    inline_done_.push_back(std::move(done));
    return;
  }
  for (auto& w : workers_) {
    if (w->busy) continue;
    w->busy = true;
    ++busy_;
    w->in.push(std::move(batch));  // capacity 2, at most 1 in flight per worker: never full
    signal(w->wake_fd);
    return;
  }
}

void CpuExecutor::drain(std::vector<BatchDone>& out) {
  if (inline_) {
    for (BatchDone& d : inline_done_) out.push_back(std::move(d));
    inline_done_.clear();
    return;
  }
  std::uint64_t counter = 0;
  [[maybe_unused]] const ssize_t n = ::read(done_fd_, &counter, sizeof counter);  // reset
  for (auto& w : workers_) {
    while (auto done = w->out.pop()) {
      out.push_back(std::move(*done));
      w->busy = false;
      --busy_;
    }
  }
}

void CpuExecutor::recycle(BatchDone&& done) {
  if (inline_ && spare_.size() < 4) spare_.push_back(std::move(done));
}

void CpuExecutor::run(const ExecBatch& batch, BatchDone& done) const {
  done.id = batch.id;
  done.endpoint = batch.endpoint;
  done.ok = true;
  done.error.clear();
  done.results.clear();
  std::uint64_t tokens = 0;
  std::size_t offset = 0;
  for (const ExecRequest& r : batch.requests) {
    if (offset + r.input_tokens > batch.tokens.size()) {
      done.ok = false;
      done.error = "batch's token array is shorter than its requests' input_tokens";
      done.results.clear();
      return;
    }
    const std::span<const std::uint32_t> prompt(batch.tokens.data() + offset, r.input_tokens);
    done.results.push_back(
        {r.key, r.max_output_tokens, options_.workload ? kernels::workloadChecksum(prompt) : 0});
    offset += r.input_tokens;
    tokens += static_cast<std::uint64_t>(r.input_tokens) + r.max_output_tokens;
  }
  done.service_ns = serviceTime(tokens);
}

void CpuExecutor::work(Worker& w) {
  for (;;) {
    std::uint64_t counter = 0;
    while (w.in.empty() && !stopping_.load(std::memory_order_acquire)) {
      [[maybe_unused]] const ssize_t n = ::read(w.wake_fd, &counter, sizeof counter);
    }
    if (stopping_.load(std::memory_order_acquire)) return;
    auto batch = w.in.pop();
    if (!batch) continue;
    const TimeNs start = options_.env->now();
    BatchDone done;
    run(*batch, done);
    // Hold the slot for the modelled service time, as the device would.
    sleepUntil(start + done.service_ns);
    done.service_ns = options_.env->now() - start;
    while (!w.out.push(std::move(done))) {
    }
    signal(done_fd_);
  }
}

}  // namespace fairsched::daemon
