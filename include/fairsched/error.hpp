// Errors of the client library: one enum, one Error value, one Result type.
//
// These are transport and usage errors (the daemon is not there, a ring is
// full, a name is unknown). The outcome of a request the daemon accepted is a
// fairsched::Status in its Completion, a separate vocabulary. Nothing in the
// library throws across its API.
#pragma once

#include <cassert>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "fairsched/export.hpp"

namespace fairsched {

enum class ErrorCode : std::uint8_t {
  kInvalidArgument,  // options or request fields the library rejects before sending anything
  kConnectFailed,    // socket() or connect() failed: the daemon is not running or not reachable
  kTimedOut,         // a control reply (Hello, OpenTenant) or wait() did not come in time
  kUnauthorized,     // the daemon refused this client, tenant, tier or endpoint
  kVersionMismatch,  // the daemon speaks another control protocol or segment layout
  kNoCapacity,       // the connection holds the most tenants the daemon allows open
  kShuttingDown,     // the daemon refused because it is stopping
  kRefused,          // another refusal by the daemon (BAD_REQUEST, INTERNAL); the message says
  kProtocol,         // malformed reply, missing descriptors, or a segment that fails its checks
  kNotConnected,     // no live connection (lost and not reconnected, or reconnect disabled)
  kDaemonLost,       // the connection was lost during this call
  kUnknownTenant,    // the handle was not returned by openTenant(), or its tenant is not open now
  kUnknownEndpoint,  // the endpoint name is not in the daemon's HelloReply
  kPromptTooLarge,   // the prompt exceeds one slot's arena share or the endpoint's batch tokens
  kRingFull,         // the tenant's submission ring is full: back off and retry
  kSystem,           // an unexpected system call failure; sys_errno says which
};

FAIRSCHED_API std::string_view toString(ErrorCode code);

struct Error {
  ErrorCode code = ErrorCode::kSystem;
  int sys_errno = 0;    // errno for kSystem and kConnectFailed, else 0
  std::string message;  // one line of context; may be empty (kRingFull stays allocation-free)

  // "<code>: <message> (<strerror>)".
  FAIRSCHED_API std::string toString() const;
};

// A value or an error. value() and error() REQUIRE the matching state.
//
// E is the error type: the client library's Error by default; another module
// (the daemon) passes its own, any type with a `code` member.
template <class T, class E = Error>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::in_place_index<0>, std::move(value)) {}  // NOLINT: implicit by design
  Result(E error) : v_(std::in_place_index<1>, std::move(error)) {}  // NOLINT

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & {
    assert(ok());
    return *std::get_if<0>(&v_);
  }
  const T& value() const& {
    assert(ok());
    return *std::get_if<0>(&v_);
  }
  T&& value() && {
    assert(ok());
    return std::move(*std::get_if<0>(&v_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  const E& error() const& {
    assert(!ok());
    return *std::get_if<1>(&v_);
  }
  E&& error() && {
    assert(!ok());
    return std::move(*std::get_if<1>(&v_));
  }
  // The error, or null when ok(): `if (const auto* e = r.errorOrNull())`.
  const E* errorOrNull() const { return std::get_if<1>(&v_); }
  // The value, or null when !ok().
  T* valueOrNull() { return std::get_if<0>(&v_); }
  const T* valueOrNull() const { return std::get_if<0>(&v_); }
  // The error's code; REQUIRES: !ok(). Only for an E with a `code` member.
  template <class F = E>
  auto code() const -> decltype(std::declval<const F&>().code) {
    return error().code;
  }

 private:
  std::variant<T, E> v_;
};

template <class E>
class [[nodiscard]] Result<void, E> {
 public:
  Result() = default;
  Result(E error) : error_(std::move(error)) {}  // NOLINT: implicit by design

  bool ok() const { return !error_.has_value(); }
  explicit operator bool() const { return ok(); }
  const E& error() const& {
    assert(!ok());
    return *error_;
  }
  E&& error() && {
    assert(!ok());
    return std::move(*error_);
  }
  // The error's code; REQUIRES: !ok(). Only for an E with a `code` member.
  template <class F = E>
  auto code() const -> decltype(std::declval<const F&>().code) {
    return error().code;
  }

 private:
  std::optional<E> error_;
};

}  // namespace fairsched
