// The reference engine behind fairsched-worker: a continuous-batching model
// of an inference engine (vLLM/SGLang style) that serves a worker endpoint
// through fairsched::Worker and emits the documented deterministic tokens
// (docs/worker.md), so that anyone can check that no token reached the wrong
// request.
//
// Per iteration (step): take assignments (each reserves prompt + max output
// tokens of KV; a resumed one recomputes prompt + what it generated before),
// aborts and preempts (answered at once: every token is emitted at the end
// of the step that made it); prefill waiting prompts within the chunked
// prefill budget, oldest first; every fully prefilled sequence decodes one
// token; the step takes
//     step_us + prefill_token_us × prompt tokens prefilled
//             + decode_token_us × sequences decoding
// of modelled time (spent sleeping, or spinning when under 50 µs); then the
// step's new tokens are emitted (one STEP record, or a TOKENS record per
// sequence: EngineModel::step_records), finished sequences reported and
// the free capacity stated again.
//
// A request's true output length: `output_tokens=N` in its parameters
// (ASCII, e.g. "output_tokens=17;temperature=0"), capped at
// max_output_tokens; without it, max_output_tokens. So a benchmark can make
// requests stop before what they reserved, as real ones do.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "daemon/core/prefix_cache.hpp"
#include "fairsched/worker.hpp"
#include "shm/worker_protocol.hpp"

namespace fairsched::reference {

struct EngineModel {
  std::uint32_t max_sequences = 64;
  std::uint64_t kv_tokens = 262144;
  double step_us = 200.0;
  double prefill_token_us = 0.02;
  double decode_token_us = 2.0;
  std::uint32_t chunked_prefill_tokens = 2048;
  // A step's tokens go out as one STEP record (Worker::emitStep); false: a
  // TOKENS record per sequence (Worker::emit), as per-sequence engines do.
  bool step_records = true;
  // A prefix cache (vLLM's automatic prefix caching): the KV of whole
  // prompt blocks of `block_tokens` tokens, keyed by their hash chain
  // (fairsched/prefix_hash.hpp), kept after a prefill, least recently
  // used evicted first; a prompt's cached leading blocks skip their prefill
  // (all but its last token). 0 = no cache. With kv_events, every block
  // stored and evicted is reported (Worker::blocksStored/blocksRemoved).
  std::uint64_t cache_blocks = 0;
  std::uint32_t block_tokens = 16;
  bool kv_events = true;
};

using shm::referenceToken;

// `output_tokens=N` from a parameters blob; 0 when absent or malformed.
std::uint32_t outputTokensParam(std::span<const std::byte> params);

struct EngineStats {
  std::uint64_t steps = 0;
  std::uint64_t tokens = 0;
  std::uint64_t finished = 0;
  std::uint64_t aborted = 0;
  std::uint64_t preempted = 0;      // sequences given back on PREEMPT
  std::uint64_t prompt_tokens = 0;  // of the prompts it took (ids given)
  std::uint64_t cached_tokens = 0;  // of those, found in its prefix cache: not prefilled
};

class ReferenceEngine {
 public:
  ReferenceEngine(Worker& worker, EngineModel model);

  // One iteration. `idle_wait`: how long to wait for work when nothing is
  // running. Errors: the worker's (kDaemonLost when the daemon went away).
  Result<void> step(std::chrono::nanoseconds idle_wait);

  // Steps until `stop` is set or the worker fails; returns that failure (or OK).
  Result<void> run(const std::atomic<bool>& stop);

  // The work of one step, run instead of sleeping for the modelled cost
  // (fairsched-worker --cuda: CudaStepRunner::run): `lengths[i]` tokens of
  // the i-th sequence the step processes — its prefill chunk, or the token
  // it decodes from — back to back in `tokens`.
  using StepWork = std::function<Result<void>(std::span<const std::uint32_t> lengths,
                                              std::span<const std::uint32_t> tokens)>;
  void setStepWork(StepWork work) { step_work_ = std::move(work); }

  const EngineStats& stats() const { return stats_; }
  std::size_t running() const { return seqs_.size(); }

 private:
  struct Sequence {
    std::uint64_t id = 0;
    std::vector<std::uint32_t> prompt;
    std::uint32_t prompt_tokens = 0;
    std::uint32_t prefilled = 0;
    std::uint32_t target = 0;  // true output length
    std::uint32_t generated = 0;
    std::uint64_t reserved = 0;        // KV tokens
    std::vector<std::uint64_t> chain;  // its prompt's block hashes (with a prefix cache)
    std::size_t cached_blocks = 0;     // leading blocks of it found cached
  };

  Result<void> stateCapacity();
  // Looks `s`'s prompt up in the prefix cache: its cached blocks skip prefill.
  void lookUpPrefix(Sequence& s);
  // `s` has prefilled: its blocks are cached (and reported).
  Result<void> keepPrefix(Sequence& s);
  void spend(double micros);

  Worker& worker_;
  EngineModel model_;
  std::vector<Sequence> seqs_;
  std::uint64_t kv_used_ = 0;
  std::uint32_t stated_seqs_ = UINT32_MAX;
  std::uint64_t stated_kv_ = UINT64_MAX;
  std::vector<WorkItem> items_;
  StepWork step_work_;
  std::vector<std::uint32_t> step_lengths_, step_tokens_;
  std::vector<StepToken> step_out_;  // the step's output, one token per decoding sequence
  EngineStats stats_;
  core::BlockLru cache_;
  std::vector<std::uint64_t> evicted_;
};

}  // namespace fairsched::reference
