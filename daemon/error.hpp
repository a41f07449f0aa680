// Errors of the daemon (daemon/*.cpp, fairschedctl's admin client): one enum,
// one Error value, one Result type — fairsched::Result of the public header
// with the daemon's Error in place of the client library's.
//
// An Error is the reason something could not be set up or done: the message
// is one line a person reads (logged, printed by fairschedctl, sent as the
// reload's "error"), with its context in front ("endpoints.gpu: ...",
// "bind /run/x.sock: Permission denied"); the code says which kind, for
// callers that branch on it. Per-request outcomes stay a fairsched::Status.
// The pure core (daemon/core), the config parser (config::ConfigError) and
// fleet limits (fleet::LeaseResult) keep their own vocabularies.
#pragma once

#include <cerrno>
#include <cstdint>
#include <string>
#include <string_view>

#include "fairsched/error.hpp"

namespace fairsched::daemon {

enum class Errc : std::uint8_t {
  kSystem,           // a system call failed; the message carries strerror
  kUnavailable,      // something the daemon needs is not there (a CUDA device, a free socket)
  kConfig,           // the config asks for what cannot be done (bad value, restart-only change)
  kInvalidArgument,  // a caller passed what the function rejects (a name or path too long)
  kDevice,           // a CUDA call failed
  kProtocol,         // the peer's reply is malformed, or it hung up before replying
  kTimedOut,         // no complete reply in time
  kInternal,         // a broken invariant (a bug)
};

std::string_view toString(Errc code);

struct Error {
  Errc code = Errc::kInternal;
  std::string message;  // one line, with its context in front

  // "<code>: <message>".
  std::string toString() const;
};

template <class T = void>
using Result = fairsched::Result<T, Error>;

// kSystem: "<what>: <strerror(err)>", e.g. systemError("bind " + path) gives
// "bind /x: Permission denied". `err` defaults to errno at the call.
Error systemError(std::string_view what, int err = errno);

// The same error with "<context>: " in front of its message.
Error withContext(std::string_view context, Error error);

}  // namespace fairsched::daemon
