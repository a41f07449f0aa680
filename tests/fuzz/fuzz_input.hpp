// What the libFuzzer targets share: require() (abort, so libFuzzer reports
// the input) and Bytes, the input read as little-endian integers and
// records, zero past its end.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace fairsched::fuzz {

inline void require(bool ok) {
  if (!ok) std::abort();
}

struct Bytes {
  const std::uint8_t* data;
  std::size_t size;
  std::size_t pos = 0;

  // The next `n` bytes (at most 8) as a little-endian integer.
  std::uint64_t take(std::size_t n) {
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < n; ++i) {
      v |= std::uint64_t{pos < size ? data[pos] : std::uint8_t{0}} << (8 * i);
      ++pos;
    }
    return v;
  }
  // The next sizeof(T) bytes as a T.
  template <class T>
  T record() {
    std::uint8_t raw[sizeof(T)];
    for (std::uint8_t& b : raw) b = static_cast<std::uint8_t>(take(1));
    T out;
    std::memcpy(&out, raw, sizeof(T));
    return out;
  }
};

}  // namespace fairsched::fuzz
