#include "worker/reference_engine.hpp"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <string_view>

#include "fairsched/prefix_hash.hpp"

namespace fairsched::reference {

std::uint32_t outputTokensParam(std::span<const std::byte> params) {
  const std::string_view text(reinterpret_cast<const char*>(params.data()), params.size());
  constexpr std::string_view kKey = "output_tokens=";
  std::size_t at = text.find(kKey);
  while (at != std::string_view::npos && at != 0 && text[at - 1] != ';' && text[at - 1] != ' ') {
    at = text.find(kKey, at + 1);
  }
  if (at == std::string_view::npos) return 0;
  std::uint64_t n = 0;
  std::size_t i = at + kKey.size();
  if (i >= text.size() || text[i] < '0' || text[i] > '9') return 0;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    n = n * 10 + static_cast<std::uint64_t>(text[i] - '0');
    if (n > UINT32_MAX) return 0;
  }
  return static_cast<std::uint32_t>(n);
}

ReferenceEngine::ReferenceEngine(Worker& worker, EngineModel model)
    : worker_(worker), model_(model), cache_(model.cache_blocks) {}

void ReferenceEngine::lookUpPrefix(Sequence& s) {
  if (model_.cache_blocks == 0 || s.prompt.empty() || model_.block_tokens == 0) return;
  stats_.prompt_tokens += s.prompt.size();
  s.chain = prefixBlockHashes(s.prompt, model_.block_tokens);
  s.cached_blocks = cache_.touch(s.chain);
  // The last prompt token is computed whatever is cached: it makes the first output.
  const std::uint64_t skip = std::min<std::uint64_t>(
      std::uint64_t{s.cached_blocks} * model_.block_tokens, s.prompt.size() - 1);
  s.prefilled = static_cast<std::uint32_t>(skip);
  stats_.cached_tokens += skip;
}

Result<void> ReferenceEngine::keepPrefix(Sequence& s) {
  if (s.chain.empty()) return {};
  evicted_.clear();
  cache_.insert(s.chain, &evicted_);
  if (model_.kv_events) {
    // What it holds of the chain: its leading blocks, as many as fit.
    const std::size_t kept = std::min<std::size_t>(s.chain.size(), model_.cache_blocks);
    if (s.cached_blocks < kept) {
      const auto stored =
          std::span<const std::uint64_t>(s.chain).first(kept).subspan(s.cached_blocks);
      if (Result<void> r = worker_.blocksStored(stored); !r) return r;
    }
    if (!evicted_.empty()) {
      if (Result<void> r = worker_.blocksRemoved(evicted_); !r) return r;
    }
  }
  s.chain.clear();
  return {};
}

Result<void> ReferenceEngine::stateCapacity() {
  const auto free_seqs = static_cast<std::uint32_t>(
      model_.max_sequences - std::min<std::size_t>(seqs_.size(), model_.max_sequences));
  const std::uint64_t free_kv = model_.kv_tokens - std::min(kv_used_, model_.kv_tokens);
  if (free_seqs == stated_seqs_ && free_kv == stated_kv_) return {};
  Result<void> r = worker_.setCapacity(free_seqs, free_kv);
  if (r) {
    stated_seqs_ = free_seqs;
    stated_kv_ = free_kv;
  }
  return r;
}

void ReferenceEngine::spend(double micros) {
  if (micros <= 0) return;
  using Clock = std::chrono::steady_clock;
  const auto until =
      Clock::now() + std::chrono::nanoseconds(static_cast<std::int64_t>(micros * 1e3));
  if (micros >= 50) {
    const auto ns = static_cast<long>(micros * 1e3);
    timespec ts{ns / 1000000000L, ns % 1000000000L};
    ::nanosleep(&ts, nullptr);
    return;
  }
  while (Clock::now() < until) {
  }
}

Result<void> ReferenceEngine::step(std::chrono::nanoseconds idle_wait) {
  if (Result<void> r = stateCapacity(); !r) return r;
  if (seqs_.empty()) {
    Result<void> w = worker_.wait(idle_wait);
    if (!w && w.error().code != ErrorCode::kTimedOut) return w;
  }
  items_.clear();
  worker_.poll(items_);
  bool took = false;
  for (WorkItem& item : items_) {
    if (item.kind == WorkItem::Kind::kPreempt) {
      auto it = std::find_if(seqs_.begin(), seqs_.end(),
                             [&](const Sequence& s) { return s.id == item.id; });
      if (it == seqs_.end()) continue;  // finished before the preempt arrived
      // Every token it generated was emitted at the end of its step.
      if (Result<void> r = worker_.preempted(it->id, it->generated); !r) return r;
      kv_used_ -= it->reserved;
      seqs_.erase(it);
      ++stats_.preempted;
      continue;
    }
    if (item.kind == WorkItem::Kind::kAbort) {
      auto it = std::find_if(seqs_.begin(), seqs_.end(),
                             [&](const Sequence& s) { return s.id == item.id; });
      if (it == seqs_.end()) continue;  // finished before the abort arrived
      kv_used_ -= it->reserved;
      if (Result<void> r = worker_.finish(it->id, Status::kCancelled, it->generated); !r) return r;
      seqs_.erase(it);
      ++stats_.aborted;
      continue;
    }
    Assignment& a = item.assignment;
    Sequence s;
    s.id = a.id;
    s.prompt = std::move(a.prompt);
    s.prompt_tokens = a.prompt_tokens;
    const std::uint32_t asked = outputTokensParam(a.params);
    s.target = asked == 0 ? a.max_output_tokens : std::min(asked, a.max_output_tokens);
    s.reserved = std::uint64_t{a.prompt_tokens} + a.max_output_tokens;
    // A resumed sequence recomputes prompt + what it generated, then goes on.
    s.generated = static_cast<std::uint32_t>(a.resumed.size());
    s.prompt_tokens += s.generated;
    lookUpPrefix(s);
    kv_used_ += s.reserved;
    if (s.generated >= s.target) {  // nothing (more) to generate
      kv_used_ -= s.reserved;
      if (Result<void> r = worker_.finish(s.id, Status::kOk, s.generated); !r) return r;
      ++stats_.finished;
      continue;
    }
    seqs_.push_back(std::move(s));
    took = true;
  }
  if (took) {
    if (Result<void> r = stateCapacity(); !r) return r;
  }
  if (seqs_.empty()) return {};

  // Prefill within the chunk budget, oldest first; then one token per
  // prefilled sequence.
  std::uint64_t budget = model_.chunked_prefill_tokens;
  std::uint64_t prefilled = 0;
  std::uint32_t decoding = 0;
  step_lengths_.clear();
  step_tokens_.clear();
  for (Sequence& s : seqs_) {
    if (s.prefilled < s.prompt_tokens) {
      const auto n = static_cast<std::uint32_t>(
          std::min<std::uint64_t>(budget, s.prompt_tokens - s.prefilled));
      if (step_work_ && n > 0) {  // the chunk's ids (positions when only counted)
        step_lengths_.push_back(n);
        for (std::uint32_t i = s.prefilled; i < s.prefilled + n; ++i)
          step_tokens_.push_back(i < s.prompt.size() ? s.prompt[i] : i);
      }
      s.prefilled += n;
      budget -= n;
      prefilled += n;
      if (s.prefilled < s.prompt_tokens) continue;
      if (Result<void> r = keepPrefix(s); !r) return r;
    }
    if (step_work_) {  // decodes from its newest token
      step_lengths_.push_back(1);
      step_tokens_.push_back(s.generated > 0 ? referenceToken(s.prompt, s.generated - 1)
                                             : (s.prompt.empty() ? 0 : s.prompt.back()));
    }
    ++decoding;
  }
  if (step_work_) {
    if (Result<void> r = step_work_(step_lengths_, step_tokens_); !r) return r;
  } else {
    spend(model_.step_us + model_.prefill_token_us * static_cast<double>(prefilled) +
          model_.decode_token_us * decoding);
  }
  ++stats_.steps;
  // The step's tokens, one of each decoding sequence: one STEP record (or
  // a TOKENS record each, as engines that emit per sequence do).
  step_out_.clear();
  for (Sequence& s : seqs_) {
    if (s.prefilled < s.prompt_tokens) continue;
    step_out_.push_back(StepToken{s.id, referenceToken(s.prompt, s.generated)});
    ++s.generated;
    ++stats_.tokens;
  }
  if (model_.step_records) {
    // A step that only prefilled (every sequence still in its prompt) emits nothing.
    if (Result<void> r = step_out_.empty() ? Result<void>{} : worker_.emitStep(step_out_); !r)
      return r;
  } else {
    for (const StepToken& t : step_out_) {
      if (Result<void> r = worker_.emit(t.id, std::span<const std::uint32_t>(&t.token, 1)); !r)
        return r;
    }
  }
  for (std::size_t i = 0; i < seqs_.size();) {
    Sequence& s = seqs_[i];
    if (s.prefilled < s.prompt_tokens) {
      ++i;
      continue;
    }
    if (s.generated >= s.target) {
      if (Result<void> r = worker_.finish(s.id, Status::kOk, s.generated); !r) return r;
      kv_used_ -= s.reserved;
      ++stats_.finished;
      seqs_.erase(seqs_.begin() + static_cast<std::ptrdiff_t>(i));  // keeps arrival order
      continue;
    }
    ++i;
  }
  return stateCapacity();
}

Result<void> ReferenceEngine::run(const std::atomic<bool>& stop) {
  while (!stop.load(std::memory_order_relaxed)) {
    if (Result<void> r = step(std::chrono::milliseconds(50)); !r) return r;
  }
  return {};
}

}  // namespace fairsched::reference
