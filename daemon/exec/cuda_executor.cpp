#include "daemon/exec/cuda_executor.hpp"

#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "daemon/exec/spsc_queue.hpp"
#include "kernels/cuda_kernels.hpp"

namespace fairsched::daemon {
namespace {

std::string callError(const char* call, cudaError_t e) {
  return std::string("cuda executor: ") + call + ": " + cudaGetErrorString(e) + " (" +
         cudaGetErrorName(e) + ")";
}

// On failure returns, from the enclosing function (which returns a
// Result<>), kDevice with the call's text and the CUDA error string.
#define FAIRSCHED_CUDA_TRY(expr)                                   \
  do {                                                             \
    const cudaError_t fairsched_e_ = (expr);                       \
    if (fairsched_e_ != cudaSuccess) {                             \
      return Error{Errc::kDevice, callError(#expr, fairsched_e_)}; \
    }                                                              \
  } while (0)

void signalFd(int fd) {
  const std::uint64_t one = 1;
  // EAGAIN only when the counter is saturated: a signal is pending anyway.
  [[maybe_unused]] const ssize_t n = ::write(fd, &one, sizeof one);
}

constexpr std::uint64_t kAlign = 256;
std::uint64_t alignUp(std::uint64_t x) {
  return (x + kAlign - 1) / kAlign * kAlign;
}

}  // namespace

struct CudaExecutor::Lane {
  Lane() : done(kDepth) {}
  cudaStream_t copy = nullptr;     // H2D of staged batches
  cudaStream_t compute = nullptr;  // kernels, D2H
  // The host functions, each waiting on its batch's end event: on the
  // compute stream one would hold back the lane's next kernels until the
  // runtime's callback thread has run it.
  cudaStream_t notify = nullptr;
  SpscQueue<std::uint32_t> done;  // slot indices; producer: this lane's host functions
};

struct CudaExecutor::Slot {
  CudaExecutor* owner = nullptr;
  std::uint32_t index = 0;
  std::uint32_t lane = 0;
  bool busy = false;  // loop's view
  // Pinned host staging: lengths[max_req] tokens[cap] | checksums[max_req].
  void* host = nullptr;
  std::uint32_t* h_in = nullptr;
  std::uint64_t* h_checksums = nullptr;
  // One device allocation carved into the buffers below.
  void* device = nullptr;
  std::uint32_t* d_in = nullptr;  // lengths then tokens, mirrors h_in
  std::uint32_t* d_cu_seqlens = nullptr;
  std::uint32_t* d_positions = nullptr;
  std::uint32_t* d_seq_ids = nullptr;
  std::uint32_t* d_out = nullptr;
  std::uint64_t* d_checksums = nullptr;
  cudaEvent_t start = nullptr;     // on the compute stream, once the H2D is in
  cudaEvent_t h2d_done = nullptr;  // the compute stream waits on it
  cudaEvent_t end = nullptr;       // after D2H; its query reports async errors
  ExecBatch batch;                 // keys and output token counts for the results
};

CudaExecutor::CudaExecutor(const Options& options) : options_(options) {}

Result<> CudaExecutor::checkDevice(int device) {
  // Asked in a child process: the first CUDA call initialises the driver in
  // the calling process, and a process that forks afterwards (a test that
  // checks, then forks a daemon; a daemon that forks a helper) leaves its
  // child with a CUDA state that is undefined there.
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) return systemError("cuda executor: pipe");
  const pid_t pid = fork();
  if (pid < 0) {
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    return systemError("cuda executor: fork");
  }
  if (pid == 0) {
    close(pipe_fds[0]);
    int answer[2] = {0, 0};  // cudaError_t, device count
    answer[0] = static_cast<int>(cudaGetDeviceCount(&answer[1]));
    [[maybe_unused]] const ssize_t w = ::write(pipe_fds[1], answer, sizeof answer);
    _exit(0);
  }
  close(pipe_fds[1]);
  int answer[2] = {0, 0};
  ssize_t got = 0;
  do {
    got = ::read(pipe_fds[0], answer, sizeof answer);
  } while (got < 0 && errno == EINTR);
  close(pipe_fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (got != static_cast<ssize_t>(sizeof answer)) {
    return Error{Errc::kUnavailable, "cudaGetDeviceCount: the probe process died (status " +
                                         std::to_string(status) + ")"};
  }
  const auto e = static_cast<cudaError_t>(answer[0]);
  const int count = answer[1];
  if (e != cudaSuccess) {
    return Error{Errc::kUnavailable, "cudaGetDeviceCount: " + std::string(cudaGetErrorString(e))};
  }
  if (count == 0) return Error{Errc::kUnavailable, "cudaGetDeviceCount: 0 devices"};
  if (device < 0 || device >= count) {
    return Error{Errc::kUnavailable, "device " + std::to_string(device) + " not present (" +
                                         std::to_string(count) + " devices)"};
  }
  return {};
}

Result<std::unique_ptr<CudaExecutor>> CudaExecutor::create(const Options& options) {
  if (options.streams == 0) return Error{Errc::kConfig, "cuda executor: streams must be >= 1"};
  if (options.max_batch_requests == 0) {
    return Error{Errc::kConfig, "cuda executor: max_batch_requests must be >= 1"};
  }
  if (options.shape.vocab == 0 || options.shape.dim == 0 || options.shape.dim > kernels::kMaxDim) {
    return Error{Errc::kConfig, "cuda executor: workload shape needs vocab >= 1 and 1 <= dim <= " +
                                    std::to_string(kernels::kMaxDim)};
  }
  const std::uint64_t slot_bytes = options.staging_bytes / kDepth;
  const std::uint64_t fixed = 12ull * options.max_batch_requests;  // lengths + checksums
  if (slot_bytes < fixed + 4) {
    return Error{Errc::kConfig, "cuda executor: staging_bytes " +
                                    std::to_string(options.staging_bytes) + " too small for " +
                                    std::to_string(options.max_batch_requests) +
                                    " requests per batch (double-buffered)"};
  }
  if (Result<> device = checkDevice(options.device); !device) {
    return withContext("cuda executor: no CUDA device", std::move(device).error());
  }
  std::unique_ptr<CudaExecutor> ex(new CudaExecutor(options));
  ex->token_capacity_ = std::min<std::uint64_t>((slot_bytes - fixed) / 4, UINT32_MAX);
  if (Result<> r = ex->init(); !r) return std::move(r).error();
  return ex;
}

Result<> CudaExecutor::init() {
  done_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (done_fd_ < 0) return systemError("cuda executor: eventfd");
  FAIRSCHED_CUDA_TRY(cudaSetDevice(options_.device));
  const std::uint64_t max_req = options_.max_batch_requests;
  const std::uint64_t cap = token_capacity_;
  const kernels::WorkloadShape shape = options_.shape;

  for (std::uint32_t l = 0; l < options_.streams; ++l) {
    auto lane = std::make_unique<Lane>();
    FAIRSCHED_CUDA_TRY(cudaStreamCreateWithFlags(&lane->copy, cudaStreamNonBlocking));
    FAIRSCHED_CUDA_TRY(cudaStreamCreateWithFlags(&lane->compute, cudaStreamNonBlocking));
    FAIRSCHED_CUDA_TRY(cudaStreamCreateWithFlags(&lane->notify, cudaStreamNonBlocking));
    lanes_.push_back(std::move(lane));
    for (std::uint32_t k = 0; k < kDepth; ++k) {
      auto s = std::make_unique<Slot>();
      s->owner = this;
      s->index = static_cast<std::uint32_t>(slots_.size());
      s->lane = l;
      const std::uint64_t in_bytes = alignUp(4 * (max_req + cap));
      FAIRSCHED_CUDA_TRY(cudaHostAlloc(&s->host, in_bytes + 8 * max_req, cudaHostAllocDefault));
      s->h_in = static_cast<std::uint32_t*>(s->host);
      s->h_checksums = reinterpret_cast<std::uint64_t*>(static_cast<char*>(s->host) + in_bytes);
      const std::uint64_t cu_bytes = alignUp(4 * (max_req + 1));
      const std::uint64_t tok_bytes = alignUp(4 * cap);
      const std::uint64_t out_bytes = alignUp(4 * max_req * shape.dim);
      FAIRSCHED_CUDA_TRY(
          cudaMalloc(&s->device, in_bytes + cu_bytes + 2 * tok_bytes + out_bytes + 8 * max_req));
      char* p = static_cast<char*>(s->device);
      s->d_in = reinterpret_cast<std::uint32_t*>(p);
      p += in_bytes;
      s->d_cu_seqlens = reinterpret_cast<std::uint32_t*>(p);
      p += cu_bytes;
      s->d_positions = reinterpret_cast<std::uint32_t*>(p);
      p += tok_bytes;
      s->d_seq_ids = reinterpret_cast<std::uint32_t*>(p);
      p += tok_bytes;
      s->d_out = reinterpret_cast<std::uint32_t*>(p);
      p += out_bytes;
      s->d_checksums = reinterpret_cast<std::uint64_t*>(p);
      FAIRSCHED_CUDA_TRY(cudaEventCreate(&s->start));
      FAIRSCHED_CUDA_TRY(cudaEventCreateWithFlags(&s->h2d_done, cudaEventDisableTiming));
      FAIRSCHED_CUDA_TRY(cudaEventCreate(&s->end));
      slots_.push_back(std::move(s));
    }
  }
  FAIRSCHED_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&table_), 4ull * shape.vocab * shape.dim));
  FAIRSCHED_CUDA_TRY(kernels::launchFillTable(table_, shape, lanes_[0]->compute));
  FAIRSCHED_CUDA_TRY(cudaStreamSynchronize(lanes_[0]->compute));
  return {};
}

CudaExecutor::~CudaExecutor() {
  // Errors are ignored here: there is no one left to report them to. Streams
  // are synchronized first, since pending host functions point at slots.
  if (!lanes_.empty() || table_ != nullptr) cudaSetDevice(options_.device);
  for (auto& lane : lanes_) {
    if (lane->copy) cudaStreamSynchronize(lane->copy);
    if (lane->compute) cudaStreamSynchronize(lane->compute);
    if (lane->notify) cudaStreamSynchronize(lane->notify);
  }
  for (auto& s : slots_) {
    if (s->start) cudaEventDestroy(s->start);
    if (s->h2d_done) cudaEventDestroy(s->h2d_done);
    if (s->end) cudaEventDestroy(s->end);
    if (s->device) cudaFree(s->device);
    if (s->host) cudaFreeHost(s->host);
  }
  for (auto& lane : lanes_) {
    if (lane->copy) cudaStreamDestroy(lane->copy);
    if (lane->compute) cudaStreamDestroy(lane->compute);
    if (lane->notify) cudaStreamDestroy(lane->notify);
  }
  if (table_) cudaFree(table_);
  if (done_fd_ >= 0) close(done_fd_);
}

void CudaExecutor::onBatchDone(void* p) {
  // No CUDA calls allowed here (a host function); just hand the slot back.
  Slot* s = static_cast<Slot*>(p);
  CudaExecutor* ex = s->owner;
  // At most kDepth slots of a lane are in flight: never full.
  ex->lanes_[s->lane]->done.push(std::uint32_t{s->index});
  signalFd(ex->done_fd_);
}

Result<> CudaExecutor::enqueue(Slot& s, std::uint32_t n, std::uint32_t total) {
  Lane& lane = *lanes_[s.lane];
  FAIRSCHED_CUDA_TRY(cudaSetDevice(options_.device));
  // The kernel launchers report cudaGetLastError(): clear what an earlier,
  // unrelated call left there so it cannot fail this batch. An error that
  // does not clear is sticky: the context is lost for good.
  if (cudaGetLastError() != cudaSuccess) {
    if (const cudaError_t sticky = cudaPeekAtLastError(); sticky != cudaSuccess) {
      return Error{Errc::kDevice, callError("device lost (sticky error)", sticky)};
    }
  }
  FAIRSCHED_CUDA_TRY(
      cudaMemcpyAsync(s.d_in, s.h_in, 4ull * (n + total), cudaMemcpyHostToDevice, lane.copy));
  FAIRSCHED_CUDA_TRY(cudaEventRecord(s.h2d_done, lane.copy));
  FAIRSCHED_CUDA_TRY(cudaStreamWaitEvent(lane.compute, s.h2d_done, 0));
  // Timed from here: the batch's own service on the device, not its wait for
  // the lane's previous batch or its copy (the backlog throttle learns the
  // device's service rate from it).
  FAIRSCHED_CUDA_TRY(cudaEventRecord(s.start, lane.compute));
  const std::uint32_t* lengths = s.d_in;
  const std::uint32_t* tokens = s.d_in + n;
  FAIRSCHED_CUDA_TRY(kernels::launchPack(lengths, n, total, s.d_cu_seqlens, s.d_positions,
                                         s.d_seq_ids, lane.compute));
  FAIRSCHED_CUDA_TRY(kernels::launchWorkload(table_, options_.shape, tokens, s.d_cu_seqlens,
                                             s.d_positions, n, s.d_out, s.d_checksums,
                                             lane.compute));
  FAIRSCHED_CUDA_TRY(cudaMemcpyAsync(s.h_checksums, s.d_checksums, 8ull * n, cudaMemcpyDeviceToHost,
                                     lane.compute));
  FAIRSCHED_CUDA_TRY(cudaEventRecord(s.end, lane.compute));
  FAIRSCHED_CUDA_TRY(cudaStreamWaitEvent(lane.notify, s.end, 0));
  FAIRSCHED_CUDA_TRY(cudaLaunchHostFunc(lane.notify, &CudaExecutor::onBatchDone, &s));
  return {};
}

void CudaExecutor::lose(Error why) {
  if (fatal_) return;
  fatal_ = std::move(why);
  for (auto& slot : slots_) {
    if (!slot->busy) continue;
    const bool reported = std::any_of(failed_.begin(), failed_.end(),
                                      [&](const auto& f) { return f.first == slot->index; });
    if (!reported) fail(*slot, fatal_->message);
  }
}

void CudaExecutor::fail(Slot& s, std::string error) {
  BatchDone d;
  d.id = s.batch.id;
  d.endpoint = s.batch.endpoint;
  d.ok = false;
  d.error = std::move(error);
  failed_.emplace_back(s.index, std::move(d));
  signalFd(done_fd_);
}

void CudaExecutor::submit(ExecBatch&& batch) {
  Slot* free_slot = nullptr;
  // Spread over lanes first: slot k*kDepth+j is lane k, so scan by depth.
  for (std::uint32_t j = 0; j < kDepth && free_slot == nullptr; ++j) {
    for (std::size_t l = 0; l < lanes_.size(); ++l) {
      Slot& s = *slots_[l * kDepth + j];
      if (!s.busy) {
        free_slot = &s;
        break;
      }
    }
  }
  if (free_slot == nullptr) return;  // REQUIRES violated; nothing to hold it
  Slot& s = *free_slot;
  s.busy = true;
  ++busy_;
  s.batch = std::move(batch);

  const std::uint64_t n = s.batch.requests.size();
  std::uint64_t total = 0;
  for (const ExecRequest& r : s.batch.requests) total += r.input_tokens;
  if (total > s.batch.tokens.size()) {
    return fail(s, "batch's token array is shorter than its requests' input_tokens");
  }
  if (n > options_.max_batch_requests || total > token_capacity_) {
    return fail(s, "cuda executor: batch of " + std::to_string(n) + " requests and " +
                       std::to_string(total) + " tokens exceeds a slot (" +
                       std::to_string(options_.max_batch_requests) + " requests, " +
                       std::to_string(token_capacity_) + " tokens)");
  }
  for (std::uint64_t i = 0; i < n; ++i) s.h_in[i] = s.batch.requests[i].input_tokens;
  if (total > 0) std::memcpy(s.h_in + n, s.batch.tokens.data(), 4 * total);
  if (Result<> r = enqueue(s, static_cast<std::uint32_t>(n), static_cast<std::uint32_t>(total));
      !r) {
    // What was enqueued may still read the slot's buffers: wait before the
    // slot can be handed out again (an error path, so blocking is fine).
    cudaStreamSynchronize(lanes_[s.lane]->copy);
    cudaStreamSynchronize(lanes_[s.lane]->compute);
    cudaStreamSynchronize(lanes_[s.lane]->notify);
    fail(s, r.error().message);
    if (cudaGetLastError() != cudaSuccess && cudaPeekAtLastError() != cudaSuccess) {
      lose(std::move(r).error());  // sticky: no batch will ever come back
    }
  }
}

void CudaExecutor::drain(std::vector<BatchDone>& out) {
  std::uint64_t counter = 0;
  [[maybe_unused]] const ssize_t rd = ::read(done_fd_, &counter, sizeof counter);  // reset
  auto release = [this](Slot& s) {
    s.busy = false;
    --busy_;
  };
  for (auto& [index, d] : failed_) {
    release(*slots_[index]);
    out.push_back(std::move(d));
  }
  failed_.clear();
  for (auto& lane : lanes_) {
    while (auto index = lane->done.pop()) {
      Slot& s = *slots_[*index];
      if (!s.busy) continue;  // already reported failed when the context was lost
      std::optional<Error> lost;
      BatchDone d;
      d.id = s.batch.id;
      d.endpoint = s.batch.endpoint;
      const cudaError_t e = cudaEventQuery(s.end);
      float ms = 0;
      if (e != cudaSuccess) {
        d.ok = false;
        d.error = callError("batch (cudaEventQuery)", e);
        if (cudaGetLastError() != cudaSuccess && cudaPeekAtLastError() != cudaSuccess) {
          lost = Error{Errc::kDevice, d.error};
        }
      } else if (const cudaError_t t = cudaEventElapsedTime(&ms, s.start, s.end);
                 t != cudaSuccess) {
        d.ok = false;
        d.error = callError("cudaEventElapsedTime", t);
      } else {
        d.service_ns = static_cast<TimeNs>(static_cast<double>(ms) * 1e6);
        d.results.reserve(s.batch.requests.size());
        for (std::size_t i = 0; i < s.batch.requests.size(); ++i) {
          const ExecRequest& r = s.batch.requests[i];
          d.results.push_back({r.key, r.max_output_tokens, s.h_checksums[i]});
        }
      }
      release(s);
      out.push_back(std::move(d));
      if (lost) lose(std::move(*lost));  // after this slot's release: it is reported once
    }
  }
}

}  // namespace fairsched::daemon
