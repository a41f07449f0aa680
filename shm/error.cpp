#include "shm/error.hpp"

#include <cstring>

namespace fairsched::shm {

std::string_view toString(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidGeometry:
      return "invalid geometry";
    case ErrorCode::kSystem:
      return "system call failed";
    case ErrorCode::kMapFailed:
      return "mapping failed";
    case ErrorCode::kBadSeals:
      return "bad seals";
    case ErrorCode::kTooSmall:
      return "segment too small";
    case ErrorCode::kBadMagic:
      return "bad magic";
    case ErrorCode::kBadVersion:
      return "unsupported layout version";
    case ErrorCode::kBadPageSize:
      return "page size mismatch";
    case ErrorCode::kLayoutMismatch:
      return "layout mismatch";
    case ErrorCode::kSizeMismatch:
      return "size mismatch";
  }
  return "unknown error";
}

std::string formatError(std::string_view what, const std::string& message, int sys_errno) {
  std::string out(what);
  if (!message.empty()) out += ": " + message;
  if (sys_errno != 0) {
    out += " (";
    out += std::strerror(sys_errno);
    out += ")";
  }
  return out;
}

std::string Error::toString() const {
  return formatError(shm::toString(code), message, sys_errno);
}

}  // namespace fairsched::shm
