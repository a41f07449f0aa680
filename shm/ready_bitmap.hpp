// The ready bitmap: one bit per submission ring, in client-writable memory.
// A producer sets its ring's bit after publishing into the ring; the daemon
// takes (reads and clears) whole words and looks only at the rings whose bits
// were set, instead of polling every ring of every client.
//
// A producer whose bit is already set does not write the word: after
// publishing it fences (seq_cst) and loads the word, and sets the bit only
// when it is clear. So a ring the daemon keeps polling directly (a "hot"
// lane, whose bit the daemon leaves set and its scans ignore) costs its
// producer no write to a line the daemon reads, and the daemon no exchange.
//
// No publication is missed. The daemon takes bits with a seq_cst fetch_and,
// then drains their rings; a producer publishes, fences, then loads the word.
// Of the two, at least one sees the other (Dekker): either the producer sees
// its bit clear and sets it (and the next scan takes it; its release orders
// the publication), or the daemon's drain after the take sees the
// publication. Cooling a hot lane (clear()) is a take followed by one look
// at the ring. A bit may also lead to a ring that turns out empty (its item
// was taken in an earlier drain): harmless.
//
// The daemon trusts no bit: it masks off bits of rings that do not exist, and
// a client that sets every bit only makes the daemon look at that client's
// own rings, each drained within the usual per-ring budget.
#pragma once

#include <cstdint>

#include "shm/shared_word.hpp"

namespace fairsched::shm {

class ReadyBitmap {
 public:
  ReadyBitmap() = default;
  // `words` holds ceil(ring_count / 64) words; ring_count from the daemon's Layout.
  ReadyBitmap(std::uint64_t* words, std::uint32_t ring_count);

  // Producer side (SubmissionProducer does this itself).
  void mark(std::uint32_t ring);

  // Daemon: takes and clears the bits of word `word` outside `keep`, masked
  // to existing rings; bit b of the result is ring word * 64 + b. The bits
  // in `keep` stay set. REQUIRES: word < wordCount().
  std::uint64_t take(std::uint32_t word, std::uint64_t keep = 0);

  // Daemon: clears `bits` of word `word` (a seq_cst fetch_and, like take):
  // rings the daemon stops polling directly. Look at each of them once
  // afterwards: a producer may have seen its bit still set.
  void clear(std::uint32_t word, std::uint64_t bits);

  // Daemon: takes every word and calls f(ring) for each set bit, in ring
  // order, leaving the bits of `keep` (one mask per word, or null) set and
  // unreported. A word is written only when a load shows a bit outside
  // `keep` in it: a pass over idle rings writes nothing, so it leaves the
  // lines shared with the producers.
  template <class F>
  void takeEach(F&& f, const std::uint64_t* keep = nullptr) {
    for (std::uint32_t w = 0; w < word_count_; ++w) {
      const std::uint64_t kept = keep != nullptr ? keep[w] : 0;
      if (!anySetIn(w, kept)) continue;
      std::uint64_t bits = take(w, kept);
      while (bits != 0) {
        const int b = __builtin_ctzll(bits);
        bits &= bits - 1;
        f(w * 64 + static_cast<std::uint32_t>(b));
      }
    }
  }

  // Daemon's re-check after announcing sleep (doorbell.hpp): is any bit of
  // an existing ring outside `keep` (as for takeEach) set? Relaxed loads;
  // the caller's seq_cst fence orders them.
  bool anySet(const std::uint64_t* keep = nullptr) const;

  std::uint32_t wordCount() const { return word_count_; }

 private:
  // A relaxed load of word `w`: a set bit outside `keep` here is taken by
  // take(w), whose acquire orders the ring's publication.
  bool anySetIn(std::uint32_t w, std::uint64_t keep) const {
    return (sharedLoad(words_[w], std::memory_order_relaxed) & ~keep) != 0;
  }

  std::uint64_t validMask(std::uint32_t word) const;

  std::uint64_t* words_ = nullptr;
  std::uint32_t ring_count_ = 0;
  std::uint32_t word_count_ = 0;
};

// Producer side: after publishing into a ring, sets its `bit` in `word`
// unless it is set already (see the top of this file).
void markBit(std::uint64_t& word, std::uint64_t bit);

}  // namespace fairsched::shm
