// The C ABI over fairsched::Worker: the engine side of a worker endpoint.
// Nothing here throws: allocation failure aside, every path returns a
// fairsched_error.
#include "fairsched/fairsched.h"

#include <chrono>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "fairsched/prefix_hash.hpp"
#include "fairsched/worker.hpp"
#include "fairsched_c_errors.hpp"

struct fairsched_worker {
  explicit fairsched_worker(fairsched::Worker w)
      : worker(std::move(w)), endpoint_name(worker.endpoint().name) {}
  fairsched::Worker worker;
  const std::string endpoint_name;  // as the daemon described it; fairsched_worker_endpoint_name
  // The last fairsched_worker_poll's items: the fairsched_work_item pointers
  // point into them until the next poll. Used by the one polling thread.
  std::vector<fairsched::WorkItem> items;
};

namespace {

using std::chrono::nanoseconds;

using fairsched::c_abi::fail;
using fairsched::c_abi::invalid;

fairsched_work_item toC(const fairsched::WorkItem& item) {
  fairsched_work_item out{};
  out.id = item.id;
  if (item.kind != fairsched::WorkItem::Kind::kAssign) {
    out.kind = item.kind == fairsched::WorkItem::Kind::kAbort ? FAIRSCHED_WORK_ABORT
                                                              : FAIRSCHED_WORK_PREEMPT;
    return out;
  }
  const fairsched::Assignment& a = item.assignment;
  out.kind = FAIRSCHED_WORK_ASSIGN;
  out.tenant = a.tenant;
  out.priority = a.priority;
  out.counts_only = a.counts_only ? 1 : 0;
  if (a.deadline) {
    out.deadline_ns =
        std::chrono::duration_cast<nanoseconds>(a.deadline->time_since_epoch()).count();
  }
  out.prompt_tokens = a.prompt_tokens;
  out.max_output_tokens = a.max_output_tokens;
  if (!a.prompt.empty()) {
    out.prompt = a.prompt.data();
    out.prompt_len = static_cast<uint32_t>(a.prompt.size());
  }
  if (!a.params.empty()) {
    out.params = a.params.data();
    out.params_bytes = static_cast<uint32_t>(a.params.size());
  }
  if (!a.resumed.empty()) {
    out.resumed = a.resumed.data();
    out.resumed_len = static_cast<uint32_t>(a.resumed.size());
  }
  return out;
}

}  // namespace

extern "C" {

void fairsched_worker_options_init(fairsched_worker_options* options) {
  if (options == nullptr) return;
  const fairsched::WorkerOptions d;
  *options = fairsched_worker_options{};
  options->struct_size = sizeof(fairsched_worker_options);
  options->connect_timeout_ns = d.connect_timeout.count();
  options->event_timeout_ns = d.event_timeout.count();
}

fairsched_error fairsched_worker_connect(const fairsched_worker_options* options,
                                         fairsched_worker** out) {
  if (out == nullptr) return invalid("out is NULL");
  *out = nullptr;
  if (options == nullptr || options->struct_size < sizeof(fairsched_worker_options)) {
    return invalid("options not initialised with fairsched_worker_options_init");
  }
  fairsched::WorkerOptions o;
  if (options->socket_path != nullptr) o.socket_path = options->socket_path;
  if (options->endpoint != nullptr) o.endpoint = options->endpoint;
  if (options->worker_name != nullptr) o.worker_name = options->worker_name;
  o.connect_timeout = nanoseconds(options->connect_timeout_ns);
  o.event_timeout = nanoseconds(options->event_timeout_ns);
  fairsched::Result<fairsched::Worker> w = fairsched::Worker::connect(std::move(o));
  if (!w) return fail(w.error());
  *out = new fairsched_worker(std::move(w).value());
  return FAIRSCHED_OK;
}

fairsched_error fairsched_worker_set_capacity(fairsched_worker* worker, uint32_t free_sequences,
                                              uint64_t free_kv_tokens) {
  if (worker == nullptr) return invalid("worker is NULL");
  fairsched::Result<void> r = worker->worker.setCapacity(free_sequences, free_kv_tokens);
  if (!r) return fail(r.error());
  return FAIRSCHED_OK;
}

size_t fairsched_worker_poll(fairsched_worker* worker, fairsched_work_item* out, size_t max) {
  if (worker == nullptr || out == nullptr || max == 0) return 0;
  worker->items.clear();
  const std::size_t n = worker->worker.poll(worker->items, max);
  for (std::size_t i = 0; i < n; ++i) out[i] = toC(worker->items[i]);
  return n;
}

fairsched_error fairsched_worker_wait(fairsched_worker* worker, int64_t timeout_ns) {
  if (worker == nullptr) return invalid("worker is NULL");
  fairsched::Result<void> r = worker->worker.wait(nanoseconds(timeout_ns));
  if (!r) return fail(r.error());
  return FAIRSCHED_OK;
}

int fairsched_worker_event_fd(const fairsched_worker* worker) {
  return worker != nullptr ? worker->worker.eventFd() : -1;
}

fairsched_error fairsched_worker_prepare_to_block(fairsched_worker* worker, int* block) {
  if (worker == nullptr || block == nullptr) return invalid("worker and block must not be NULL");
  fairsched::Result<bool> r = worker->worker.prepareToBlock();
  if (!r) return fail(r.error());
  *block = *r ? 1 : 0;
  return FAIRSCHED_OK;
}

fairsched_error fairsched_worker_emit(fairsched_worker* worker, uint64_t id, const uint32_t* tokens,
                                      size_t n) {
  if (worker == nullptr || (tokens == nullptr && n != 0)) {
    return invalid("worker is NULL, or tokens is NULL with n > 0");
  }
  fairsched::Result<void> r =
      worker->worker.emit(id, std::span<const std::uint32_t>(tokens, tokens != nullptr ? n : 0));
  if (!r) return fail(r.error());
  return FAIRSCHED_OK;
}

fairsched_error fairsched_worker_emit_step(fairsched_worker* worker, const uint64_t* ids,
                                           const uint32_t* tokens, size_t n) {
  if (worker == nullptr || ((ids == nullptr || tokens == nullptr) && n != 0)) {
    return invalid("worker is NULL, or ids or tokens is NULL with n > 0");
  }
  std::vector<fairsched::StepToken> step(n);
  for (size_t i = 0; i < n; ++i) step[i] = fairsched::StepToken{ids[i], tokens[i]};
  fairsched::Result<void> r = worker->worker.emitStep(step);
  if (!r) return fail(r.error());
  return FAIRSCHED_OK;
}

fairsched_error fairsched_worker_finish(fairsched_worker* worker, uint64_t id,
                                        fairsched_status status, uint32_t output_tokens,
                                        const char* message) {
  return fairsched_worker_finish_counted(worker, id, status, output_tokens, 0, message);
}

fairsched_error fairsched_worker_finish_counted(fairsched_worker* worker, uint64_t id,
                                                fairsched_status status, uint32_t output_tokens,
                                                uint32_t input_tokens, const char* message) {
  if (worker == nullptr) return invalid("worker is NULL");
  const std::optional<fairsched::Status> s =
      fairsched::decodeStatus(static_cast<std::uint32_t>(status));
  if (!s) return invalid("status is not a fairsched_status");
  fairsched::Result<void> r = worker->worker.finish(
      id, *s, output_tokens, message != nullptr ? std::string_view(message) : std::string_view(),
      input_tokens);
  if (!r) return fail(r.error());
  return FAIRSCHED_OK;
}

fairsched_error fairsched_worker_preempted(fairsched_worker* worker, uint64_t id,
                                           uint32_t output_tokens) {
  if (worker == nullptr) return invalid("worker is NULL");
  fairsched::Result<void> r = worker->worker.preempted(id, output_tokens);
  if (!r) return fail(r.error());
  return FAIRSCHED_OK;
}

fairsched_error fairsched_worker_cache_event(fairsched_worker* worker, int32_t op,
                                             const uint64_t* hashes, size_t n) {
  if (worker == nullptr) return invalid("worker is NULL");
  if (n > 0 && hashes == nullptr) return invalid("hashes is NULL");
  const std::span<const std::uint64_t> h(hashes, n);
  fairsched::Result<void> r;
  switch (op) {
    case FAIRSCHED_CACHE_STORED:
      r = worker->worker.blocksStored(h);
      break;
    case FAIRSCHED_CACHE_REMOVED:
      r = worker->worker.blocksRemoved(h);
      break;
    case FAIRSCHED_CACHE_CLEARED:
      r = worker->worker.cacheCleared();
      break;
    default:
      return invalid("op is not a fairsched_cache_op");
  }
  if (!r) return fail(r.error());
  return FAIRSCHED_OK;
}

size_t fairsched_prefix_block_hashes(const uint32_t* tokens, size_t n_tokens, uint32_t block_tokens,
                                     uint64_t* out, size_t max_out) {
  if (tokens == nullptr || out == nullptr || block_tokens == 0) return 0;
  return fairsched::prefixBlockHashes(std::span<const std::uint32_t>(tokens, n_tokens),
                                      block_tokens, std::span<std::uint64_t>(out, max_out));
}

int fairsched_worker_connected(const fairsched_worker* worker) {
  return worker != nullptr && worker->worker.connected() ? 1 : 0;
}

const char* fairsched_worker_endpoint_name(const fairsched_worker* worker) {
  return worker != nullptr ? worker->endpoint_name.c_str() : "";
}

uint64_t fairsched_worker_id(const fairsched_worker* worker) {
  return worker != nullptr ? worker->worker.workerId() : 0;
}

void fairsched_worker_get_stats(const fairsched_worker* worker, fairsched_worker_stats* out) {
  if (out == nullptr) return;
  *out = fairsched_worker_stats{};
  if (worker == nullptr) return;
  const fairsched::WorkerStats s = worker->worker.stats();
  out->assigned = s.assigned;
  out->aborted = s.aborted;
  out->tokens_emitted = s.tokens_emitted;
  out->finished = s.finished;
  out->ring_full_waits = s.ring_full_waits;
}

void fairsched_worker_shutdown(fairsched_worker* worker) {
  if (worker != nullptr) worker->worker.shutdown();
}

void fairsched_worker_close(fairsched_worker* worker) {
  delete worker;
}

}  // extern "C"
