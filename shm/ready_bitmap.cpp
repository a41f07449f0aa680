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
  // Release: the daemon's acquire exchange that takes the bit sees what the
  // producer published before marking.
  sharedFetchOr(words_[ring / 64], std::uint64_t{1} << (ring % 64), std::memory_order_release);
}

std::uint64_t ReadyBitmap::take(std::uint32_t word) {
  // Acquire: pairs with the producers' release fetch_or; publications made
  // before a bit was set are visible when the ring is drained.
  return sharedExchange(words_[word], std::uint64_t{0}, std::memory_order_acquire) &
         validMask(word);
}

bool ReadyBitmap::anySet() const {
  for (std::uint32_t w = 0; w < word_count_; ++w) {
    if ((sharedLoad(words_[w], std::memory_order_relaxed) & validMask(w)) != 0) return true;
  }
  return false;
}

}  // namespace fairsched::shm
