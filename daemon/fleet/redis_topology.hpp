// What a Redis client needs to know about a Cluster, without any I/O: the
// slot of a key, the redirections a node answers with, and the slot map that
// CLUSTER SLOTS returns (https://redis.io/docs/reference/cluster-spec/).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/config/redis_url.hpp"
#include "daemon/fleet/lease_backend.hpp"

struct redisReply;

namespace fairsched::fleet {

inline constexpr int kClusterSlots = 16384;

// CRC16 (XMODEM) of the key's hash tag — the text between the first '{' and
// the next '}' when that is not empty — or of the whole key, mod 16384.
std::uint16_t keySlot(std::string_view key);

// "-MOVED 3999 127.0.0.1:6381" / "-ASK 3999 127.0.0.1:6381". An empty host
// (":6381") is the host of the node that answered, `from`.
struct Redirect {
  enum class Kind : std::uint8_t { kMoved, kAsk } kind = Kind::kMoved;
  std::uint16_t slot = 0;
  config::RedisAddress to;
};
std::optional<Redirect> parseRedirect(std::string_view error, const config::RedisAddress& from);

// Which master serves each slot.
// "0-5460,10923".
std::string formatSlots(const std::vector<SlotRange>& ranges);
// The node of `key` in `t`: a cluster's master for the key's slot, else the
// server in use; "" when none is known.
std::string nodeOfKey(const BackendTopology& t, std::string_view key);

class SlotMap {
 public:
  // From a CLUSTER SLOTS reply asked of `from`; nullopt when the reply is not
  // one (an error, a node not in cluster mode).
  static std::optional<SlotMap> fromClusterSlots(const redisReply& reply,
                                                 const config::RedisAddress& from);

  bool empty() const { return nodes_.empty(); }
  // The master of `slot`, or nullptr when no node serves it.
  const config::RedisAddress* nodeFor(std::uint16_t slot) const;
  // After a MOVED: `slot` is now served by `to`.
  void assign(std::uint16_t slot, const config::RedisAddress& to);
  const std::vector<config::RedisAddress>& nodes() const { return nodes_; }
  // The slots `node` serves, in ranges.
  std::vector<SlotRange> slotsOf(const config::RedisAddress& node) const;
  // Slots that no node serves.
  int unserved() const;

 private:
  static constexpr std::uint16_t kNone = 0xffff;
  std::uint16_t indexOf(const config::RedisAddress& node);
  std::vector<config::RedisAddress> nodes_;
  std::vector<std::uint16_t> owner_ = std::vector<std::uint16_t>(kClusterSlots, kNone);
};

}  // namespace fairsched::fleet
