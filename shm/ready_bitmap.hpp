// The ready bitmap: one bit per submission ring, in client-writable memory.
// A producer sets its ring's bit after publishing into the ring; the daemon
// takes (reads and clears) whole words and looks only at the rings whose bits
// were set, instead of polling every ring of every client.
//
// No publication is missed: a producer's fetch_or comes after its
// publication, so either the daemon's exchange takes that bit (and, by
// release/acquire, sees the publication), or the bit is set after the
// exchange and the next scan takes it. A bit may also lead to a ring that
// turns out empty (its item was taken in an earlier drain): harmless.
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

  // Daemon: takes and clears word `word`, masked to existing rings; bit b of
  // the result is ring word * 64 + b. REQUIRES: word < wordCount().
  std::uint64_t take(std::uint32_t word);

  // Daemon: takes every word and calls f(ring) for each set bit, in ring order.
  // A word is exchanged only when a load shows a bit in it: a pass over idle
  // rings writes nothing, so it leaves the lines shared with the producers.
  template <class F>
  void takeEach(F&& f) {
    for (std::uint32_t w = 0; w < word_count_; ++w) {
      if (!anySetIn(w)) continue;
      std::uint64_t bits = take(w);
      while (bits != 0) {
        const int b = __builtin_ctzll(bits);
        bits &= bits - 1;
        f(w * 64 + static_cast<std::uint32_t>(b));
      }
    }
  }

  // Daemon's re-check after announcing sleep (doorbell.hpp): is any bit of
  // an existing ring set? Relaxed loads; the caller's seq_cst fence orders them.
  bool anySet() const;

  std::uint32_t wordCount() const { return word_count_; }

 private:
  // A relaxed load of word `w`: a set bit here is taken by take(w), whose
  // acquire orders the ring's publication.
  bool anySetIn(std::uint32_t w) const {
    return sharedLoad(words_[w], std::memory_order_relaxed) != 0;
  }

  std::uint64_t validMask(std::uint32_t word) const;

  std::uint64_t* words_ = nullptr;
  std::uint32_t ring_count_ = 0;
  std::uint32_t word_count_ = 0;
};

}  // namespace fairsched::shm
