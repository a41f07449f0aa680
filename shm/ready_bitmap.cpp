#include "shm/ready_bitmap.hpp"

#include "shm/shared_word.hpp"

namespace fairsched::shm {

ReadyBitmap::ReadyBitmap(std::uint64_t* words, std::uint32_t ring_count)
    : words_(words), ring_count_(ring_count), word_count_((ring_count + 63) / 64) {}

std::uint64_t ReadyBitmap::validMask(std::uint32_t word) const {
  const std::uint32_t rings_here = ring_count_ - word * 64;
  return rings_here >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << rings_here) - 1;
}

void ReadyBitmap::mark(std::uint32_t ring) {
  markBit(words_[ring / 64], std::uint64_t{1} << (ring % 64));
}

void markBit(std::uint64_t& word, std::uint64_t bit) {
  // seq_cst fence: the caller's publication comes before the load below in
  // the single total order, against the daemon's seq_cst take-then-drain.
  seqCstFence();
  if ((sharedLoad(word, std::memory_order_relaxed) & bit) != 0) return;  // the daemon will look
  // Release: the daemon's take of the bit sees what was published before it.
  sharedFetchOr(word, bit, std::memory_order_release);
}

std::uint64_t ReadyBitmap::take(std::uint32_t word, std::uint64_t keep) {
  // seq_cst: acquire pairs with the producers' release fetch_or (publications
  // made before a bit was set are visible when the ring is drained); the
  // total order pairs with markBit()'s fence for a producer that found its
  // bit set and did not write it.
  return sharedFetchAnd(words_[word], keep, std::memory_order_seq_cst) & ~keep & validMask(word);
}

void ReadyBitmap::clear(std::uint32_t word, std::uint64_t bits) {
  sharedFetchAnd(words_[word], ~bits, std::memory_order_seq_cst);  // as take()
}

bool ReadyBitmap::anySet(const std::uint64_t* keep) const {
  for (std::uint32_t w = 0; w < word_count_; ++w) {
    const std::uint64_t kept = keep != nullptr ? keep[w] : 0;
    if ((sharedLoad(words_[w], std::memory_order_relaxed) & validMask(w) & ~kept) != 0) return true;
  }
  return false;
}

}  // namespace fairsched::shm
