// fairsched::Worker — the worker role (docs/worker.md): an
// engine process (vLLM, SGLang, TensorRT-LLM, llama.cpp style, or the
// reference fairsched-worker) attaches to an endpoint with executor =
// "worker" and runs the requests fairschedd chooses for it.
//
// The loop an engine runs at every iteration:
//
//   worker.setCapacity(free_sequences, free_kv_tokens);  // what it can take now
//   worker.poll(items);               // ASSIGN: add the sequence; ABORT: drop it
//   ... one engine step ...
//   worker.emit(id, new_tokens);      // per running sequence, as generated
//   worker.finish(id, Status::kOk, output_tokens);   // per finished sequence
//   (and wait() or eventFd() when idle)
//
// The daemon never assigns more than the last setCapacity() left room for:
// one sequence and prompt + max_output_tokens of KV tokens per request,
// counted from the assignments the worker had taken when it stated it. So a
// worker states its free capacity whenever it changes (after finishing
// sequences, after taking assignments) and nothing queues in front of it.
//
// Every assignment must end with exactly one finish(): kOk when done,
// kCancelled to acknowledge an ABORT, kExecutorFailed (with a message) when
// the engine failed it, kInvalid when it can never serve it (bad parameters).
// Tokens are charged to the request's tenant as they are emitted; emit()
// more than max_output_tokens in all and the daemon drops the worker.
//
// Thread-safety: emit(), finish() and setCapacity() may be called from any
// number of threads at once (the event ring is multi-producer); poll(),
// wait() and prepareToBlock() from one thread at a time; shutdown() from any
// thread at any time. Moving or destroying a Worker requires that no other
// call is in progress.
//
// fork(): in a child that inherited a Worker every call fails with
// kNotConnected and destroying it releases only the child's copies; the
// parent's attachment is not touched.
//
// If the worker dies, its running requests end EXECUTOR_FAILED at their
// clients — or go back to their queue when nothing was streamed yet and the
// endpoint's worker.requeue_on_loss says so. If the daemon goes, every call
// returns kDaemonLost; connect again.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "fairsched/client.hpp"
#include "fairsched/error.hpp"
#include "fairsched/export.hpp"
#include "fairsched/status.hpp"

namespace fairsched {

namespace worker_detail {
class WorkerCore;  // the implementation; not exported
}

struct WorkerOptions {
  std::string socket_path = "/run/fairsched/fairsched.sock";
  std::string endpoint;     // an endpoint with executor = "worker"
  std::string worker_name;  // informational (logs, fairschedctl); at most 63 bytes
  std::chrono::nanoseconds connect_timeout = std::chrono::seconds(5);
  // How long emit()/finish()/setCapacity() wait for room in a full event
  // ring (the daemon drains it continuously) before kRingFull.
  std::chrono::nanoseconds event_timeout = std::chrono::seconds(1);
};

// A request the daemon assigned to this worker.
struct Assignment {
  std::uint64_t id = 0;      // the daemon's; emit() and finish() name it
  std::uint32_t tenant = 0;  // the daemon's tenant id (stable while the tenant is active)
  std::int32_t priority = 0;
  std::optional<std::chrono::steady_clock::time_point> deadline;
  std::uint32_t prompt_tokens = 0;
  std::uint32_t max_output_tokens = 0;
  std::vector<std::uint32_t> prompt;  // the token ids; empty when counts_only
  std::vector<std::byte> params;      // the submitter's opaque parameters
  bool counts_only = false;           // prompt_tokens is a count; params name the body
  // A resumed sequence (it was preempted): the ids it generated before, in
  // order. The engine recomputes prompt + these and emits from token
  // resumed.size() on; its stream to the client simply continues.
  std::vector<std::uint32_t> resumed;
};

// One entry of an engine step (Worker::emitStep).
struct StepToken {
  std::uint64_t id = 0;  // the assignment
  std::uint32_t token = 0;
};

struct WorkItem {
  enum class Kind : std::uint8_t {
    kAssign,  // run `assignment`
    kAbort,   // stop `id` and finish it with Status::kCancelled
    // Give `id` back (the endpoint preempts): stop it, free its KV and call
    // preempted() with the tokens it generated, all emitted first. A worker
    // that ignores it keeps running the sequence; the daemon stops asking it.
    kPreempt,
  };
  Kind kind = Kind::kAssign;
  std::uint64_t id = 0;
  Assignment assignment;  // kAssign
};

struct WorkerStats {
  std::uint64_t assigned = 0;
  std::uint64_t aborted = 0;
  std::uint64_t tokens_emitted = 0;
  std::uint64_t finished = 0;
  std::uint64_t ring_full_waits = 0;  // event pushes that found the ring full at first
};

class FAIRSCHED_API Worker {
 public:
  // Connects and attaches to options.endpoint. Errors: those of
  // Client::connect, and kInvalidArgument (no endpoint or a bad name),
  // kRefused (no such endpoint, or not executor = "worker"), kUnauthorized
  // (no [[clients]] rule lists the endpoint in its `workers`), kShuttingDown
  // (the daemon is stopping, or draining: no new workers until it resumes).
  static Result<Worker> connect(WorkerOptions options);
  Worker(Worker&&) noexcept;
  Worker& operator=(Worker&&) noexcept;
  // Closes the connection: what it still runs ends or is requeued (above).
  ~Worker();

  // What it can take now. Errors: kDaemonLost, kRingFull (event_timeout).
  Result<void> setCapacity(std::uint32_t free_sequences, std::uint64_t free_kv_tokens);

  // Takes up to `max` assignments and aborts, in the daemon's order.
  // Returns how many were appended to `out`. Never blocks.
  std::size_t poll(std::vector<WorkItem>& out, std::size_t max = SIZE_MAX);

  // Blocks until poll() has something, `timeout` passes (kTimedOut; a
  // negative timeout waits forever) or the daemon goes (kDaemonLost).
  Result<void> wait(std::chrono::nanoseconds timeout);

  // For an event loop: readable when poll() may have something or the
  // daemon went away. Call prepareToBlock() before every blocking wait on
  // it: true means block now; false means poll() has something already.
  // Errors of prepareToBlock(): kDaemonLost.
  int eventFd() const;
  Result<bool> prepareToBlock();

  // Output tokens of assignment `id`, in order, as generated (any count;
  // sent in records of up to 256). Errors: kDaemonLost, kRingFull,
  // kInvalidArgument (empty).
  Result<void> emit(std::uint64_t id, std::span<const std::uint32_t> tokens);
  // One engine step's output: a token of each of several assignments, in
  // order (an id may appear more than once: its tokens in that order).
  // Sent as one STEP record per 85 tokens instead of a record each; the
  // daemon handles each entry as emit(id, {token}). Errors as emit().
  Result<void> emitStep(std::span<const StepToken> tokens);

  // Ends assignment `id` after `output_tokens` tokens in all (at least those
  // emitted; any not emitted are charged, not streamed). `message` (at most
  // kMaxParamsBytes) says why when status is not kOk. `input_tokens`, when
  // not 0, is the prompt's length as the engine counted it (a proxy's
  // upstream `usage`): the tenant is charged the difference from the
  // submitted count, and its completion reports it.
  Result<void> finish(std::uint64_t id, Status status, std::uint32_t output_tokens,
                      std::string_view message = {}, std::uint32_t input_tokens = 0);

  // Acknowledges a kPreempt: `id` stopped after generating `output_tokens`
  // in all, every one emitted. (When it had finished already, finish() was
  // the answer and nothing more is needed.) Errors: kDaemonLost, kRingFull.
  Result<void> preempted(std::uint64_t id, std::uint32_t output_tokens);

  // KV events: what the engine's prefix cache holds, for an endpoint with
  // routing = "prefix" (docs/worker.md "Prefix routing"), in the shape of
  // vLLM's KV events. `hashes` are block hashes as prefixBlockHashes()
  // computes them (fairsched/prefix_hash.hpp, the endpoint's
  // prefix_block_tokens); blocksStored() takes a run of one prompt's chain,
  // leading block first. From a worker's first KV event on, the daemon
  // routes by what it reports instead of by what it sent it. Sent in
  // records of up to 128 hashes. Errors: kDaemonLost, kRingFull,
  // kInvalidArgument (no hashes).
  Result<void> blocksStored(std::span<const std::uint64_t> hashes);
  Result<void> blocksRemoved(std::span<const std::uint64_t> hashes);
  Result<void> cacheCleared();

  // Detaches for good, as shutdown(2) before close(2): the daemon treats the
  // worker as gone (above), a wait() or an event push waiting for room
  // returns at once, and every later call fails with kNotConnected ("the
  // worker is closed"). May be called from any thread while other calls are
  // in progress; destroy the Worker once they have returned. Idempotent;
  // does nothing in a child of fork().
  void shutdown();

  bool connected() const;
  // The endpoint served, as the daemon described it.
  EndpointDescription endpoint() const;
  std::uint64_t workerId() const;  // the daemon's id for this connection
  WorkerStats stats() const;

 private:
  explicit Worker(std::unique_ptr<worker_detail::WorkerCore> impl);
  std::unique_ptr<worker_detail::WorkerCore> impl_;
};

}  // namespace fairsched
