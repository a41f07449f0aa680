// The CUDA executor: runs each batch's pack and workload kernels
// (kernels/cuda_kernels.hpp) on a CUDA device and reports per request the same
// checksum as the CPU reference (kernels/workload_reference.hpp).
//
// Layout: `streams` lanes, each with a copy stream, a compute stream and a
// notify stream, and kDepth = 2 slots. A slot owns one pinned staging buffer (lengths + tokens in,
// checksums out) and its device buffers, all allocated in create(): the hot
// path never allocates. Per batch: the loop thread copies the batch into the
// slot's pinned buffer, enqueues the H2D copy on the lane's copy stream, and
// the compute stream waits for it (an event), records the batch's start,
// runs pack + workload, copies the checksums D2H and records its end; the
// notify stream waits on the end and launches a host function that pushes
// the slot into the lane's SPSC queue and signals the eventfd (on the compute
// stream the host function would hold back the lane's next kernels). A
// batch's service time is start to end: its own time on the device. With two slots per lane, the
// next batch's H2D runs on the copy stream while the current batch's kernels
// run on the compute stream.
//
// Why depth 2: one batch computing and one being copied in is all the overlap
// a lane can use; a deeper queue would only hold batches whose contents were
// fixed early, against the late-binding rule (executor.hpp).
//
// Errors: every CUDA call is checked; the message names the call and carries
// cudaGetErrorString. A batch whose enqueue fails, or whose completion event
// reports an error, finishes with ok = false. After a sticky error (an
// illegal address: the context is lost) the runtime may never run the
// pending host functions: the executor then reports every batch it holds
// failed at once and becomes fatal() (the daemon restarts).
//
// Threading: submit() and drain() on the event loop thread only (the same
// thread that called create(), or any single thread: submit() re-selects the
// device). Host functions run on a CUDA runtime thread; per lane they run in
// stream order, one after the other, so each lane's queue has one producer
// at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "daemon/error.hpp"
#include "daemon/exec/executor.hpp"
#include "kernels/workload_hash.hpp"

namespace fairsched::daemon {

class CudaExecutor final : public Executor {
 public:
  static constexpr std::uint32_t kDepth = 2;  // slots per stream

  struct Options {
    int device = 0;
    std::uint32_t streams = 2;
    std::uint64_t staging_bytes = 8u << 20;  // pinned, per stream, split between its kDepth slots
    std::uint32_t max_batch_requests = 32;   // requests a slot holds
    kernels::WorkloadShape shape;
  };

  // Fails with kConfig when the options are invalid, kUnavailable when no
  // CUDA device is present (naming cudaGetDeviceCount's answer) or the device
  // id is out of range, kDevice when a CUDA call (an allocation) fails,
  // kSystem when the eventfd cannot be made.
  static Result<std::unique_ptr<CudaExecutor>> create(const Options& options);
  // Ok when `device` exists; else kUnavailable with why no CUDA device is
  // usable (device count, driver). Tests skip on it. Asked in a child
  // process, so the caller's process never initialises CUDA and may fork
  // (a daemon, a test's forked daemon) afterwards.
  static Result<> checkDevice(int device = 0);
  ~CudaExecutor() override;

  std::string_view name() const override { return "cuda"; }
  std::uint32_t slots() const override { return static_cast<std::uint32_t>(slots_.size()); }
  std::uint32_t freeSlots() const override { return fatal_ ? 0 : slots() - busy_; }
  void submit(ExecBatch&& batch) override;
  void drain(std::vector<BatchDone>& out) override;
  int completionFd() const override { return done_fd_; }
  // Set by a sticky CUDA error (the context is lost): every batch held is
  // reported failed at once, and no more are taken.
  const Error* fatal() const override { return fatal_ ? &*fatal_ : nullptr; }

  // The most prompt tokens one batch may carry (what a slot's staging holds).
  std::uint64_t maxBatchTokens() const { return token_capacity_; }

 private:
  struct Slot;
  struct Lane;
  // The host function launched after each batch (CUDA runtime thread).
  static void onBatchDone(void* slot);
  explicit CudaExecutor(const Options& options);
  Result<> init();
  // Enqueues the batch already staged in `slot`; kDevice naming the first
  // failing call.
  Result<> enqueue(Slot& slot, std::uint32_t n, std::uint32_t total);
  void fail(Slot& slot, std::string error);

  Options options_;
  std::uint64_t token_capacity_ = 0;
  std::vector<std::unique_ptr<Lane>> lanes_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::uint32_t* table_ = nullptr;  // device: vocab × dim
  std::uint32_t busy_ = 0;
  // Batches finished at submit with ok = false, with their slot; loop thread only.
  std::vector<std::pair<std::uint32_t, BatchDone>> failed_;
  std::optional<Error> fatal_;
  // The context is lost: record why, and report every busy slot not yet
  // reported as failed (their host functions may never run).
  void lose(Error why);
  int done_fd_ = -1;
};

}  // namespace fairsched::daemon
