#include "daemon/fleet/redis_topology.hpp"

#include <hiredis/hiredis.h>

#include <charconv>

namespace fairsched::fleet {
namespace {

std::uint16_t crc16(std::string_view data) {
  std::uint16_t crc = 0;
  for (const char ch : data) {
    crc ^= static_cast<std::uint16_t>(static_cast<unsigned char>(ch) << 8);
    for (int bit = 0; bit < 8; ++bit) {
      crc = (crc & 0x8000) != 0 ? static_cast<std::uint16_t>((crc << 1) ^ 0x1021)
                                : static_cast<std::uint16_t>(crc << 1);
    }
  }
  return crc;
}

std::string_view text(const redisReply& r) {
  return (r.type == REDIS_REPLY_STRING || r.type == REDIS_REPLY_STATUS)
             ? std::string_view(r.str, r.len)
             : std::string_view();
}

}  // namespace

std::uint16_t keySlot(std::string_view key) {
  if (const std::size_t open = key.find('{'); open != std::string_view::npos) {
    const std::size_t close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1) {
      key = key.substr(open + 1, close - open - 1);
    }
  }
  return crc16(key) % kClusterSlots;
}

std::optional<Redirect> parseRedirect(std::string_view error, const config::RedisAddress& from) {
  Redirect r;
  if (error.starts_with("MOVED ")) {
    r.kind = Redirect::Kind::kMoved;
    error.remove_prefix(6);
  } else if (error.starts_with("ASK ")) {
    r.kind = Redirect::Kind::kAsk;
    error.remove_prefix(4);
  } else {
    return std::nullopt;
  }
  const std::size_t space = error.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  unsigned slot = 0;
  const std::string_view slotText = error.substr(0, space);
  const auto [end, ec] = std::from_chars(slotText.data(), slotText.data() + slotText.size(), slot);
  if (ec != std::errc() || end != slotText.data() + slotText.size() || slot >= kClusterSlots) {
    return std::nullopt;
  }
  r.slot = static_cast<std::uint16_t>(slot);
  std::string_view where = error.substr(space + 1);
  std::string host;
  if (where.starts_with(':')) {
    host = from.host.find(':') != std::string::npos ? "[" + from.host + "]" : from.host;
  }
  auto to = config::parseRedisAddress(host + std::string(where), 6379);
  if (!std::holds_alternative<config::RedisAddress>(to)) return std::nullopt;
  r.to = std::get<config::RedisAddress>(std::move(to));
  return r;
}

std::optional<SlotMap> SlotMap::fromClusterSlots(const redisReply& reply,
                                                 const config::RedisAddress& from) {
  if (reply.type != REDIS_REPLY_ARRAY || reply.elements == 0) return std::nullopt;
  SlotMap map;
  for (std::size_t i = 0; i < reply.elements; ++i) {
    const redisReply& range = *reply.element[i];
    if (range.type != REDIS_REPLY_ARRAY || range.elements < 3) return std::nullopt;
    const redisReply& first = *range.element[0];
    const redisReply& last = *range.element[1];
    const redisReply& master = *range.element[2];
    if (first.type != REDIS_REPLY_INTEGER || last.type != REDIS_REPLY_INTEGER ||
        master.type != REDIS_REPLY_ARRAY || master.elements < 2 ||
        master.element[1]->type != REDIS_REPLY_INTEGER || first.integer < 0 ||
        last.integer >= kClusterSlots || first.integer > last.integer) {
      return std::nullopt;
    }
    config::RedisAddress node;
    // An empty or "?" endpoint is the node we asked (Redis 7: cluster-preferred-endpoint-type).
    const std::string_view host = text(*master.element[0]);
    node.host = host.empty() || host == "?" ? from.host : std::string(host);
    const long long port = master.element[1]->integer;
    if (port <= 0 || port > 65535) return std::nullopt;
    node.port = static_cast<std::uint16_t>(port);
    const std::uint16_t index = map.indexOf(node);
    for (long long s = first.integer; s <= last.integer; ++s) map.owner_[s] = index;
  }
  return map;
}

std::uint16_t SlotMap::indexOf(const config::RedisAddress& node) {
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i] == node) return static_cast<std::uint16_t>(i);
  }
  nodes_.push_back(node);
  return static_cast<std::uint16_t>(nodes_.size() - 1);
}

const config::RedisAddress* SlotMap::nodeFor(std::uint16_t slot) const {
  const std::uint16_t i = owner_[slot % kClusterSlots];
  return i == kNone ? nullptr : &nodes_[i];
}

void SlotMap::assign(std::uint16_t slot, const config::RedisAddress& to) {
  owner_[slot % kClusterSlots] = indexOf(to);
}

std::vector<SlotRange> SlotMap::slotsOf(const config::RedisAddress& node) const {
  std::vector<SlotRange> out;
  std::uint16_t index = kNone;
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i] == node) index = static_cast<std::uint16_t>(i);
  }
  if (index == kNone) return out;
  for (int s = 0; s < kClusterSlots;) {
    if (owner_[s] != index) {
      ++s;
      continue;
    }
    int e = s;
    while (e + 1 < kClusterSlots && owner_[e + 1] == index) ++e;
    out.push_back({static_cast<std::uint16_t>(s), static_cast<std::uint16_t>(e)});
    s = e + 1;
  }
  return out;
}

std::string formatSlots(const std::vector<SlotRange>& ranges) {
  std::string out;
  for (const SlotRange& r : ranges) {
    if (!out.empty()) out += ',';
    out += std::to_string(r.first);
    if (r.last > r.first) out += "-" + std::to_string(r.last);
  }
  return out;
}

std::string nodeOfKey(const BackendTopology& t, std::string_view key) {
  if (t.mode != "cluster") return t.master;
  const std::uint16_t slot = keySlot(key);
  for (const BackendNode& n : t.nodes) {
    for (const SlotRange& r : n.slots) {
      if (slot >= r.first && slot <= r.last) return n.address;
    }
  }
  return {};
}

int SlotMap::unserved() const {
  int n = 0;
  for (const std::uint16_t o : owner_) n += o == kNone ? 1 : 0;
  return n;
}

}  // namespace fairsched::fleet
