#include "daemon/error.hpp"

#include <cstring>

namespace fairsched::daemon {

std::string_view toString(Errc code) {
  switch (code) {
    case Errc::kSystem:
      return "system call failed";
    case Errc::kUnavailable:
      return "unavailable";
    case Errc::kConfig:
      return "config";
    case Errc::kInvalidArgument:
      return "invalid argument";
    case Errc::kDevice:
      return "device error";
    case Errc::kProtocol:
      return "protocol error";
    case Errc::kTimedOut:
      return "timed out";
    case Errc::kInternal:
      return "internal error";
  }
  return "unknown error";
}

std::string Error::toString() const {
  std::string out(daemon::toString(code));
  if (!message.empty()) out += ": " + message;
  return out;
}

Error systemError(std::string_view what, int err) {
  return Error{Errc::kSystem, std::string(what) + ": " + std::strerror(err)};
}

Error withContext(std::string_view context, Error error) {
  error.message = std::string(context) + ": " + error.message;
  return error;
}

}  // namespace fairsched::daemon
