// A prompt's prefix identity: the chain of its block hashes.
//
// Every engine fairsched fronts keeps the KV of a prompt prefix it has
// computed and skips its prefill when a later prompt starts the same way —
// vLLM's automatic prefix caching keys each KV block of `block_tokens`
// tokens (16 by default) by a hash of the whole prefix up to the end of that
// block. This is the same shape: hash i covers tokens [0, (i + 1) ×
// block_tokens), so two prompts share their first k hashes exactly when
// they share their first k whole blocks, and a router compares prefixes by
// comparing hashes. Only whole blocks count (a partial last block is not
// cached by the engines either).
//
// 64-bit, not cryptographic: FNV-1a over the 32-bit token ids, chained
// across blocks, each block's value passed through a finaliser so that
// nearby chains spread. A hash names the prefix up to a token boundary
// whatever the block size (the 32-token chain is every other hash of the
// 16-token one). A collision makes a router think a prefix is cached
// where it is not — a slower request, never a wrong one: the engine checks
// its own cache. Header-only; no allocation in the span form.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace fairsched {

inline constexpr std::uint32_t kDefaultPrefixBlockTokens = 16;

namespace prefix_detail {
inline constexpr std::uint64_t kOffsetBasis = 0xcbf29ce484222325ULL;
inline constexpr std::uint64_t kPrime = 0x100000001b3ULL;
constexpr std::uint64_t finalise(std::uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}
}  // namespace prefix_detail

// Writes the hashes of the first min(out.size(), tokens.size() /
// block_tokens) whole blocks of `tokens` to `out`; returns how many.
// REQUIRES: block_tokens > 0.
inline std::size_t prefixBlockHashes(std::span<const std::uint32_t> tokens,
                                     std::uint32_t block_tokens, std::span<std::uint64_t> out) {
  const std::size_t blocks = tokens.size() / block_tokens;
  const std::size_t n = blocks < out.size() ? blocks : out.size();
  std::uint64_t h = prefix_detail::kOffsetBasis;
  for (std::size_t b = 0; b < n; ++b) {
    for (std::uint32_t k = 0; k < block_tokens; ++k) {
      h = (h ^ tokens[b * block_tokens + k]) * prefix_detail::kPrime;
    }
    out[b] = prefix_detail::finalise(h);
  }
  return n;
}

// The chain of `tokens`, at most `max_blocks` long.
inline std::vector<std::uint64_t> prefixBlockHashes(
    std::span<const std::uint32_t> tokens, std::uint32_t block_tokens = kDefaultPrefixBlockTokens,
    std::size_t max_blocks = SIZE_MAX) {
  const std::size_t blocks = tokens.size() / block_tokens;
  std::vector<std::uint64_t> out(blocks < max_blocks ? blocks : max_blocks);
  prefixBlockHashes(tokens, block_tokens, out);
  return out;
}

// The same chain over a prompt's text, for a proxy that sees no token ids
// (the gateway): blocks of `block_bytes` bytes of a canonical form of the
// prompt, fed in pieces (the messages in order), FNV-1a over the bytes,
// chained and finalised as above. Approximate — a block of text is not a
// block of the engine's tokens — and comparable only with chains made the
// same way, as llm-d's approximate prefix scorer is; only whole blocks
// count. REQUIRES: block_bytes > 0.
class TextPrefixHasher {
 public:
  TextPrefixHasher(std::uint32_t block_bytes, std::size_t max_blocks)
      : block_bytes_(block_bytes), max_blocks_(max_blocks) {}

  void feed(std::string_view bytes) {
    std::size_t i = 0;
    while (i < bytes.size() && hashes_.size() < max_blocks_) {
      const std::size_t left = bytes.size() - i;
      const std::size_t n = block_bytes_ - in_block_ < left ? block_bytes_ - in_block_ : left;
      for (std::size_t k = 0; k < n; ++k) {
        h_ = (h_ ^ static_cast<unsigned char>(bytes[i + k])) * prefix_detail::kPrime;
      }
      i += n;
      in_block_ += static_cast<std::uint32_t>(n);
      if (in_block_ == block_bytes_) {
        hashes_.push_back(prefix_detail::finalise(h_));
        in_block_ = 0;
      }
    }
  }
  // The hashes of the whole blocks fed so far.
  std::vector<std::uint64_t>& hashes() { return hashes_; }

 private:
  std::uint32_t block_bytes_;
  std::size_t max_blocks_;
  std::uint32_t in_block_ = 0;
  std::uint64_t h_ = prefix_detail::kOffsetBasis;
  std::vector<std::uint64_t> hashes_;
};

}  // namespace fairsched
