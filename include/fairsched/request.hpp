// What a serving process sends and gets back: SubmitRequest, Completion, the
// Tenant handle. Plain values; no behaviour.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "fairsched/status.hpp"

namespace fairsched {

// Chosen by the library, unique within one Client for its whole life
// (reconnects included), echoed by the daemon in the completion. Never 0.
using RequestId = std::uint64_t;

// A tenant opened with Client::openTenant(): the handle the library chose
// for it (a slot and a generation, docs/shm-layout.md), which every request
// carries. It stays valid across reconnects (the library opens the tenant
// again under it) until Client::closeTenant(); a handle kept after that never
// names another tenant.
struct Tenant {
  static constexpr std::uint32_t kInvalid = std::numeric_limits<std::uint32_t>::max();
  std::uint32_t index = kInvalid;

  bool valid() const { return index != kInvalid; }
  friend bool operator==(const Tenant&, const Tenant&) = default;
};

struct SubmitRequest {
  Tenant tenant;
  std::string_view endpoint;              // a name from the daemon's endpoint list ("chat")
  std::span<const std::uint32_t> prompt;  // token ids; copied into shared memory by submit()
  std::uint32_t max_output_tokens = 0;
  std::int32_t priority = 0;  // higher first, within the tenant
  // Absolute, on steady_clock (CLOCK_MONOTONIC on Linux, the daemon's clock).
  std::optional<std::chrono::steady_clock::time_point> deadline;
  // Relative to the call to submit(); when both are set the earlier one wins.
  std::optional<std::chrono::nanoseconds> timeout;
  std::uint64_t tag = 0;  // the caller's, echoed in the completion

  // Worker endpoints (executor = "worker", docs/worker.md) only; the daemon
  // answers INVALID when an in-daemon endpoint is given any of these.
  //
  // Stream the output: the request's tokens arrive as partial completions
  // (Completion::partial, in order, no gaps) before its final completion.
  bool stream = false;
  // Opaque to the daemon, handed to the worker with the request (sampling
  // settings, model name, a proxy's reference to the body it keeps): at most
  // kMaxParamsBytes bytes, copied by submit().
  std::span<const std::byte> params;
  // Counts only: the prompt's length in tokens when its ids are not sent
  // (`prompt` must then be empty) — a proxy that keeps the body itself and
  // names it in `params`. Limits and fair shares are charged by this count.
  std::optional<std::uint32_t> prompt_token_count;
  // The prompt's prefix identity, precomputed (prefixBlockHashes() of
  // fairsched/prefix_hash.hpp with the endpoint's prefix_block_tokens; at
  // most kMaxPrefixBlocks): what an endpoint with routing = "prefix" places
  // the request by. Needed for a counts-only request (the daemon hashes
  // the ids it is sent otherwise); copied by submit(). Ignored elsewhere.
  std::span<const std::uint64_t> prefix;
};

// The most block hashes SubmitRequest::prefix may hold.
inline constexpr std::size_t kMaxPrefixBlocks = 1024;

// The most bytes SubmitRequest::params may hold.
inline constexpr std::size_t kMaxParamsBytes = 4096;

struct Completion {
  RequestId request_id = 0;
  std::uint64_t tag = 0;
  // A stream chunk of a request submitted with `stream`, not its end:
  // `tokens` holds its output tokens [first_token, first_token + size), and
  // `emitted` when the worker produced them; `status` is kOk and the other
  // fields are unset. Exactly one final completion (partial == false)
  // follows the last chunk of a request.
  bool partial = false;
  std::vector<std::uint32_t> tokens;
  std::uint32_t first_token = 0;
  std::chrono::steady_clock::time_point emitted{};
  Status status = Status::kOk;
  // RATE_LIMITED (and sometimes OVERLOADED/QUEUE_FULL): do not retry before
  // this much time has passed since the completion arrived. 0 when unknown.
  std::chrono::nanoseconds retry_after{0};
  std::chrono::nanoseconds queue_wait{0};  // admission to dispatch
  std::chrono::nanoseconds service{0};     // dispatch to completion
  std::uint32_t output_tokens = 0;
  std::uint32_t input_tokens = 0;  // worker endpoints: the prompt tokens served
  // Worker endpoints: dispatch to the first output token (0 when none came).
  std::chrono::microseconds time_to_first_token{0};
  std::uint64_t checksum = 0;  // the executor's per-request result checksum
  // True when the library made this completion up itself: the daemon went
  // away with the request outstanding (status SHUTTING_DOWN).
  bool local = false;
};

}  // namespace fairsched
