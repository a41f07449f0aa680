// Everything the gateway reads from or writes into OpenAI-style JSON bodies,
// in one translation unit (nlohmann/json is heavy to compile): the caller's
// request (validated, its prompt tokens estimated, max_tokens and the
// usage option set for the upstream), the upstream's stream chunks and
// non-streamed responses (their text and usage).
//
// The prompt estimate, used when nothing better is known: ceil(UTF-8 bytes
// of the prompt text / 4), plus 4 per chat message for the template, at
// least 1. It is charged at admission (token limits, token-cost DRR); the
// output is charged per streamed chunk (emitted at once, then at most
// every 5 ms) and settled by the upstream's usage.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "gateway/gateway_config.hpp"

namespace fairsched::gateway {

struct GenerateRequest {
  bool stream = false;
  // The caller asked for stream_options.include_usage; the gateway always
  // asks the upstream for it and drops the usage chunk otherwise.
  bool caller_wants_usage = false;
  std::uint32_t max_tokens = 0;                 // as the caller gave it, or the default
  std::uint32_t prompt_tokens = 0;              // the estimate above
  std::string model;                            // "" when the body names none
  std::optional<std::int64_t> caller_priority;  // the body's "priority", not in upstream_body
  std::string upstream_body;                    // the body for the upstream
  // The prompt's prefix identity for the daemon's routing = "prefix"
  // (SubmitRequest::prefix): block hashes of its token ids when the body
  // gives ids, else of its canonical text (PrefixOptions); empty when off
  // or shorter than a block.
  std::vector<std::uint64_t> prefix;
};

// How parseGenerateRequest hashes a prompt's prefix: blocks of
// `block_tokens` ids (a prompt given as token ids) or of `block_bytes`
// bytes of the canonical text — each message's role, a 0x1f, its text
// content (text parts in order), a 0x1e; a completion's prompt string as
// is — at most `max_blocks` of them. block_bytes 0: no hashes.
struct PrefixOptions {
  std::uint32_t block_bytes = 64;
  std::uint32_t block_tokens = 16;
  std::uint32_t max_blocks = 1024;
};

// upstream_body as the upstream gets it: with "priority" set by the
// upstream's engine_priority from `tenant_calls` (the tenant's calls already
// open on it: 0 for a tenant with none; lower_first sends it as is,
// higher_first negated), or the caller's own when engine_priority is off.
std::string bodyForEngine(std::string body, UpstreamConfig::EnginePriority mode,
                          std::uint32_t tenant_calls, std::optional<std::int64_t> caller_priority);

struct BodyError {
  std::string message;
  std::string param;  // the offending field, "" when none
};

// `route` is kCompletions or kChatCompletions. max_output_tokens: the
// endpoint's cap (0 = none); a larger max_tokens is an error.
std::variant<GenerateRequest, BodyError> parseGenerateRequest(Route route, std::string_view body,
                                                              std::uint32_t default_max_tokens,
                                                              std::uint32_t max_output_tokens,
                                                              const PrefixOptions& prefix = {});

struct Usage {
  std::uint32_t prompt_tokens = 0;
  std::uint32_t completion_tokens = 0;
};

// One `data:` payload of the upstream's stream (not "[DONE]").
struct StreamChunk {
  bool valid = false;       // parsed as a JSON object
  bool has_text = false;    // a choice carries text (completions) or delta content
  bool usage_only = false;  // no choices, only usage (the include_usage chunk)
  bool is_error = false;    // an {"error": ...} object
  std::optional<Usage> usage;
};
StreamChunk parseStreamChunk(std::string_view payload);

// The usage of a non-streamed response body, when it has one.
std::optional<Usage> parseResponseUsage(std::string_view body);

// An OpenAI-style error body: {"error":{"message":..,"type":..,"param":..,"code":..}}.
// `param` and `code` are null when empty.
std::string errorJson(std::string_view message, std::string_view type, std::string_view param,
                      std::string_view code);

}  // namespace fairsched::gateway
