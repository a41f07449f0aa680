// The narrow interface between FleetLimiter and the store that keeps the
// fleet-wide counts: one call takes a lease and/or gives cost back, as one
// atomic step on the store's side. RedisBackend is the real one; tests
// substitute a fake to inject failures.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>

#include "daemon/core/types.hpp"
#include "daemon/fleet/lease_pool.hpp"

namespace fairsched::fleet {

struct LeaseCall {
  std::string_view key;     // the limit's key, e.g. "fairsched:{acme}:chat:requests/60s"
  std::uint64_t limit = 0;  // the limit's amount
  TimeNs window = 0;        // the limit's window
  std::uint64_t want = 0;   // lease size asked for; 0 = give back only
  std::uint64_t min = 1;    // grant nothing rather than less than this
  std::span<const LeaseReturn> returns;  // applied before the grant
};

struct LeaseReply {
  std::uint64_t granted = 0;  // 0: denied (or want was 0)
  std::int64_t bucket = 0;    // sub-bucket the grant was counted in
  TimeNs retry_after = 0;     // denied: when `min` would fit if nothing else is granted
  std::uint64_t used = 0;     // counted in the window after this call
};

enum class BackendError : std::uint8_t {
  kConnect,  // could not connect (refused, timeout, bad address)
  kIo,       // the connection failed or timed out during the call
  kReply,    // an unexpected reply (error reply, wrong shape)
};

constexpr const char* toString(BackendError e) {
  switch (e) {
    case BackendError::kConnect:
      return "connect";
    case BackendError::kIo:
      return "io";
    case BackendError::kReply:
      return "reply";
  }
  return "?";
}

struct BackendFailure {
  BackendError error = BackendError::kIo;
  std::string message;
};

using LeaseResult = std::variant<LeaseReply, BackendFailure>;

// Called from one thread at a time (FleetLimiter's background thread, or a
// benchmark's driver).
class LeaseBackend {
 public:
  virtual ~LeaseBackend() = default;
  virtual LeaseResult call(const LeaseCall& c) = 0;
  // Drop the connection (the next call reconnects).
  virtual void disconnect() = 0;
  // Round trips made so far (calls that reached the wire, reloads included).
  virtual std::uint64_t roundTrips() const = 0;
};

}  // namespace fairsched::fleet
