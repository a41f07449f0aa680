// The CPU executor: runs the CPU reference of the workload for every request
// and models GPU occupancy — a batch holds its slot for
//     per_batch_us + per_token_us × (input + output tokens)
// — so fairness results on a machine without a GPU mean the same as on one.
// Each request produces its max_output_tokens.
//
// One worker thread per slot (`threads`); the loop hands batches to idle
// workers through SPSC queues and reads finished ones back the same way,
// with an eventfd to say there is something to drain. When the modelled time
// is zero (both costs 0) there is no occupancy to model and no thread: a
// batch runs inline in submit() and is ready at the next drain() — the
// transport benchmarks measure the daemon's own overhead that way.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "daemon/env.hpp"
#include "daemon/error.hpp"
#include "daemon/exec/executor.hpp"
#include "daemon/exec/spsc_queue.hpp"

namespace fairsched::daemon {

class CpuExecutor final : public Executor {
 public:
  struct Options {
    double per_batch_us = 200.0;
    double per_token_us = 0.5;
    std::uint32_t threads = 1;
    // false: no reference workload; every result's checksum is 0. What is
    // left is the daemon's own path (the roundtrip benchmark measures it so).
    bool workload = true;
    // The clock service times are measured with (its threads call it).
    const Env* env = &Env::real();
  };

  // kConfig for invalid options, kSystem when an eventfd cannot be made.
  static Result<std::unique_ptr<CpuExecutor>> create(const Options& options);
  ~CpuExecutor() override;

  std::string_view name() const override { return "cpu"; }
  std::uint32_t slots() const override {
    return inline_ ? 1 : static_cast<std::uint32_t>(workers_.size());
  }
  std::uint32_t freeSlots() const override {
    return inline_ ? (inline_done_.empty() ? 1 : 0) : slots() - busy_;
  }
  void submit(ExecBatch&& batch) override;
  void drain(std::vector<BatchDone>& out) override;
  void recycle(BatchDone&& done) override;
  int completionFd() const override { return done_fd_; }

  // The modelled service time of a batch with `tokens` input + output tokens.
  TimeNs serviceTime(std::uint64_t tokens) const;

 private:
  struct Worker {
    explicit Worker() : in(2), out(2) {}
    SpscQueue<ExecBatch> in;   // loop -> worker
    SpscQueue<BatchDone> out;  // worker -> loop
    int wake_fd = -1;          // the worker sleeps on it while it has nothing to do
    bool busy = false;         // loop's view
    std::thread thread;
  };
  explicit CpuExecutor(const Options& options) : options_(options) {}
  void work(Worker& w);
  // Runs `batch` into `done` (whose buffers it reuses).
  void run(const ExecBatch& batch, BatchDone& done) const;

  Options options_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::uint32_t busy_ = 0;
  bool inline_ = false;
  std::vector<BatchDone> inline_done_;
  std::vector<BatchDone> spare_;  // recycled, for the next inline batch
  int done_fd_ = -1;
  std::atomic<bool> stopping_{false};
};

}  // namespace fairsched::daemon
