// The narrow interface between FleetLimiter and the store that keeps the
// fleet-wide counts: one call takes a lease and/or gives cost back, as one
// atomic step on the store's side. RedisBackend is the real one; tests
// substitute a fake to inject failures.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

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
  kAuth,     // AUTH refused or an ACL denial: the credentials or the user's rights
  kTls,      // the TLS handshake or the server's certificate failed
};

constexpr const char* toString(BackendError e) {
  switch (e) {
    case BackendError::kConnect:
      return "connect";
    case BackendError::kIo:
      return "io";
    case BackendError::kReply:
      return "reply";
    case BackendError::kAuth:
      return "auth";
    case BackendError::kTls:
      return "tls";
  }
  return "?";
}

struct BackendFailure {
  BackendError error = BackendError::kIo;
  std::string message;
};

using LeaseResult = std::variant<LeaseReply, BackendFailure>;

// Where the backend's data lives, for status and metrics.
struct SlotRange {
  std::uint16_t first = 0;
  std::uint16_t last = 0;  // inclusive
  bool operator==(const SlotRange&) const = default;
};

struct BackendNode {
  std::string address;           // host:port or socket path
  std::vector<SlotRange> slots;  // a cluster master's slots; empty otherwise
  bool connected = false;
};

struct BackendTopology {
  std::string mode;                // "single", "cluster" or "sentinel"
  std::string master;              // single and sentinel: the server in use (empty: none known)
  std::vector<BackendNode> nodes;  // cluster: the masters; else the one server
  std::uint64_t moved = 0;         // MOVED redirections followed
  std::uint64_t ask = 0;           // ASK redirections followed
  std::uint64_t retried = 0;       // TRYAGAIN / CLUSTERDOWN answers retried
  std::uint64_t refreshes = 0;     // slot maps fetched (cluster) or masters asked of sentinels
  std::uint64_t failovers = 0;     // the master changed (sentinel) or a slot's node did (cluster)
  std::uint64_t version = 0;       // changes whenever anything above does
};

// Called from one thread at a time (FleetLimiter's background thread, or a
// benchmark's driver).
class LeaseBackend {
 public:
  virtual ~LeaseBackend() = default;
  virtual LeaseResult call(const LeaseCall& c) = 0;
  // Several calls at once, results in their order: a backend that can
  // pipeline them (one round trip per server) overrides this.
  virtual std::vector<LeaseResult> callBatch(std::span<const LeaseCall> calls) {
    std::vector<LeaseResult> out;
    out.reserve(calls.size());
    for (const LeaseCall& c : calls) out.push_back(call(c));
    return out;
  }
  // Drop the connection (the next call reconnects).
  virtual void disconnect() = 0;
  // Round trips made so far (calls that reached the wire, reloads included).
  virtual std::uint64_t roundTrips() const = 0;
  // Where the data lives now, and a number that changes whenever that does;
  // the same thread as call().
  virtual BackendTopology topology() const { return {}; }
  virtual std::uint64_t topologyVersion() const { return 0; }
  // Before the first call: connect and authenticate, so a wrong address,
  // password or certificate is reported at start, not at the first request.
  virtual std::optional<BackendFailure> probe() { return std::nullopt; }
};

}  // namespace fairsched::fleet
