// Deterministic prompts for tests: promptFor(salt, shape) has
// 1 + salt % shape.lengths tokens, token i = salt * shape.salt_mul +
// i * shape.step (mod 2^32). Each suite keeps its own shape, named below,
// because its expectations (lengths, checksums) were written for it.
#pragma once

#include <cstdint>
#include <vector>

namespace fairsched::testing {

struct PromptShape {
  std::uint64_t lengths;   // 1 .. lengths tokens
  std::uint64_t salt_mul;  // what the salt is multiplied by
  std::uint64_t step = 1;  // what each position adds
};

inline std::vector<std::uint32_t> promptFor(std::uint64_t salt, const PromptShape& shape) {
  std::vector<std::uint32_t> p(1 + salt % shape.lengths);
  for (std::size_t i = 0; i < p.size(); ++i)
    p[i] = static_cast<std::uint32_t>(salt * shape.salt_mul + i * shape.step);
  return p;
}

// The shapes in use.
inline constexpr PromptShape kShortPrompts{13, 7919};               // 1..13 tokens
inline constexpr PromptShape kMixedPrompts{23, 2654435761u, 7919};  // 1..23 tokens, spread
inline constexpr PromptShape kReloadPrompts{30, 40503};             // 1..30 tokens
inline constexpr PromptShape kLongPrompts{40, 2654435761u};         // 1..40 tokens
inline constexpr PromptShape kRawClientPrompts{50, 131};            // 1..50 tokens

}  // namespace fairsched::testing
