#include "fairsched/error.hpp"

#include "shm/error.hpp"

#include <cstring>

namespace fairsched {

std::string_view toString(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return "invalid argument";
    case ErrorCode::kConnectFailed:
      return "cannot connect to the daemon";
    case ErrorCode::kTimedOut:
      return "timed out";
    case ErrorCode::kUnauthorized:
      return "unauthorized";
    case ErrorCode::kVersionMismatch:
      return "version mismatch";
    case ErrorCode::kNoCapacity:
      return "no capacity";
    case ErrorCode::kShuttingDown:
      return "daemon shutting down";
    case ErrorCode::kRefused:
      return "refused by the daemon";
    case ErrorCode::kProtocol:
      return "protocol error";
    case ErrorCode::kNotConnected:
      return "not connected";
    case ErrorCode::kDaemonLost:
      return "daemon lost";
    case ErrorCode::kUnknownTenant:
      return "unknown tenant";
    case ErrorCode::kUnknownEndpoint:
      return "unknown endpoint";
    case ErrorCode::kPromptTooLarge:
      return "prompt too large";
    case ErrorCode::kRingFull:
      return "submission ring full";
    case ErrorCode::kSystem:
      return "system error";
  }
  return "unknown error";
}

std::string Error::toString() const {
  return shm::formatError(fairsched::toString(code), message, sys_errno);
}

}  // namespace fairsched
