// What runs batches: the daemon hands a packed batch to an Executor when it
// has a free slot (late binding: no queue of ready batches builds up in front
// of the device, so every fairness decision is made as late as possible) and
// learns of finished batches through an eventfd its event loop reads.
//
// Threading: submit() and drain() are called from the event loop thread only;
// an executor does its work on threads of its own. No lock is taken on the
// loop's side: work goes out and results come back through single-producer
// single-consumer queues.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/core/types.hpp"
#include "daemon/error.hpp"

namespace fairsched::daemon {

struct ExecRequest {
  std::uint64_t key = 0;  // the daemon's reference to the request, echoed in the result
  std::uint32_t input_tokens = 0;
  std::uint32_t max_output_tokens = 0;
};

// One batch: requests in order, their prompt token ids packed back to back
// (request i's tokens start at the sum of the earlier input_tokens).
struct ExecBatch {
  std::uint64_t id = 0;
  EndpointId endpoint = 0;
  std::vector<ExecRequest> requests;
  std::vector<std::uint32_t> tokens;
};

struct ExecResult {
  std::uint64_t key = 0;
  std::uint32_t output_tokens = 0;
  std::uint64_t checksum = 0;  // over the request's own prompt: a mixed-up batch is caught
};

struct BatchDone {
  std::uint64_t id = 0;
  EndpointId endpoint = 0;
  bool ok = true;
  std::string error;                // when !ok: what failed (the requests end EXECUTOR_FAILED)
  TimeNs service_ns = 0;            // time the batch occupied its slot
  std::vector<ExecResult> results;  // one per request, in batch order, when ok
};

class Executor {
 public:
  virtual ~Executor() = default;
  virtual std::string_view name() const = 0;
  // Batches it can hold at once (streams or threads × a small depth).
  virtual std::uint32_t slots() const = 0;
  virtual std::uint32_t freeSlots() const = 0;
  // Takes the batch. REQUIRES: freeSlots() > 0.
  virtual void submit(ExecBatch&& batch) = 0;
  // Appends the batches finished since the last call; never blocks.
  virtual void drain(std::vector<BatchDone>& out) = 0;
  // Hands a drained batch back once the daemon is done with it, so that its
  // buffers can serve a later one. Optional.
  virtual void recycle(BatchDone&& done) { (void)done; }
  // An eventfd that becomes readable when drain() has something; the loop
  // keeps a read queued on it.
  virtual int completionFd() const = 0;
  // Non-null once the executor has met a fault it cannot recover from (a
  // lost device): from then on it reports every batch it held as failed,
  // takes no more (freeSlots() is 0), and the daemon stops with a non-zero
  // status so its supervisor restarts it.
  virtual const Error* fatal() const { return nullptr; }
};

}  // namespace fairsched::daemon
