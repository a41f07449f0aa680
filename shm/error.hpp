// Errors of the shared-memory layer: creating, attaching to and mapping a
// segment, and making eventfds. Errors are values; nothing in shm/ throws.
// Per-request outcomes (Status in completions) are a separate vocabulary.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include "fairsched/error.hpp"

namespace fairsched::shm {

enum class ErrorCode : std::uint8_t {
  kInvalidGeometry,  // ring count, capacities or sizes outside the limits in layout.hpp
  kSystem,           // a system call failed; sys_errno says which way
  kMapFailed,        // mmap of a part failed (Boost.Interprocess reported it)
  kBadSeals,         // attach: not a sealable memfd, or its size is not sealed
  kTooSmall,         // attach: the file is smaller than a header
  kBadMagic,         // attach: not a fairsched segment
  kBadVersion,       // attach: a layout version this build does not speak
  kBadPageSize,      // attach: the segment was laid out for another page size
  kLayoutMismatch,   // attach: an offset or size in the header disagrees with its geometry
  kSizeMismatch,     // attach: the header's total size is not the file's size
};

std::string_view toString(ErrorCode code);

struct Error {
  ErrorCode code = ErrorCode::kSystem;
  int sys_errno = 0;    // errno for kSystem/kMapFailed/kBadSeals, else 0
  std::string message;  // one line: what was being done and what was found

  std::string toString() const;
};

// A value or a shm::Error: the project's one Result type (fairsched/error.hpp)
// with this layer's error.
template <class T>
using Result = fairsched::Result<T, Error>;

// "<what>: <message> (<strerror(sys_errno)>)", leaving out the empty parts:
// the one format of every error value in shm/ and the client library.
std::string formatError(std::string_view what, const std::string& message, int sys_errno);

}  // namespace fairsched::shm
