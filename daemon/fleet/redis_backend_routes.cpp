// RedisBackend, the half that finds where a call goes: the slot map of a
// Cluster (CLUSTER SLOTS, MOVED), the master behind Sentinel, one connection
// per server, and what status shows of it. The calls themselves are in
// redis_backend.cpp.
#include <hiredis/hiredis.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <string_view>

#include "daemon/fleet/redis_backend.hpp"

namespace fairsched::fleet {
namespace {

std::string_view words(const redisReply& r) {
  return r.type == REDIS_REPLY_STRING || r.type == REDIS_REPLY_STATUS
             ? std::string_view(r.str, r.len)
             : std::string_view();
}

const char* modeName(config::FleetMode m) {
  switch (m) {
    case config::FleetMode::kSingle:
      return "single";
    case config::FleetMode::kCluster:
      return "cluster";
    case config::FleetMode::kSentinel:
      return "sentinel";
  }
  return "?";
}

}  // namespace

BackendTopology RedisBackend::topology() const {
  BackendTopology t = topo_;
  t.mode = modeName(mode_);
  if (mode_ == config::FleetMode::kCluster) {
    for (const config::RedisAddress& node : slots_.nodes()) {
      std::vector<SlotRange> slots = slots_.slotsOf(node);
      if (slots.empty()) continue;  // a master that lost its slots (failed over)
      t.nodes.push_back({node.str(), std::move(slots), conns_.contains(node.str())});
    }
  } else if (master_) {
    t.master = master_->str();
    t.nodes.push_back({t.master, {}, conns_.contains(t.master)});
  }
  return t;
}

std::variant<RedisBackend::Conn*, BackendFailure> RedisBackend::connection(
    const config::RedisAddress& at) {
  const std::string key = at.str();
  if (auto it = conns_.find(key); it != conns_.end()) return &it->second;
  auto opened = RedisConnection::open(at, o_.data);
  if (auto* failed = std::get_if<BackendFailure>(&opened)) {
    lost(at);
    return *failed;
  }
  Conn& c = conns_[key];
  c.link = std::get<std::unique_ptr<RedisConnection>>(std::move(opened));
  changed();
  return &c;
}

void RedisBackend::lost(const config::RedisAddress& at) {
  if (auto it = conns_.find(at.str()); it != conns_.end()) {
    closed_round_trips_ += it->second.link->roundTrips();
    conns_.erase(it);
    changed();
  }
  if (mode_ == config::FleetMode::kCluster) slots_stale_ = true;
  if (mode_ == config::FleetMode::kSentinel) master_stale_ = true;
}

std::optional<BackendFailure> RedisBackend::refreshSlots() {
  std::vector<config::RedisAddress> candidates = slots_.nodes();
  for (const config::RedisAddress& seed : o_.nodes) {
    if (std::find(candidates.begin(), candidates.end(), seed) == candidates.end()) {
      candidates.push_back(seed);
    }
  }
  BackendFailure last{BackendError::kConnect, "no cluster node to ask"};
  for (const config::RedisAddress& node : candidates) {
    auto c = connection(node);
    if (auto* failed = std::get_if<BackendFailure>(&c)) {
      last = *failed;
      continue;
    }
    auto reply = std::get<Conn*>(c)->link->command({"CLUSTER", "SLOTS"});
    if (auto* failed = std::get_if<BackendFailure>(&reply)) {
      last = *failed;
      lost(node);
      continue;
    }
    const redisReply& r = *std::get<RedisReply>(reply);
    if (isAuthError(errorText(r))) {
      return BackendFailure{BackendError::kAuth, node.str() + ": " + std::string(errorText(r))};
    }
    std::optional<SlotMap> map = SlotMap::fromClusterSlots(r, node);
    if (!map) {
      last = {BackendError::kReply,
              node.str() + ": no slot map (" +
                  (errorText(r).empty() ? "unexpected reply" : std::string(errorText(r))) + ")"};
      continue;
    }
    if (!slots_.empty() && map->nodes() != slots_.nodes()) topo_.failovers++;
    slots_ = std::move(*map);
    slots_stale_ = false;
    topo_.refreshes++;
    changed();
    // Connections to nodes that no longer serve slots (a failed master) go.
    for (auto it = conns_.begin(); it != conns_.end();) {
      const auto& nodes = slots_.nodes();
      const bool serves = std::any_of(nodes.begin(), nodes.end(), [&](const auto& n) {
        return n.str() == it->first && !slots_.slotsOf(n).empty();
      });
      if (serves) {
        ++it;
      } else {
        closed_round_trips_ += it->second.link->roundTrips();
        it = conns_.erase(it);
      }
    }
    return std::nullopt;
  }
  return last;
}

std::optional<BackendFailure> RedisBackend::discoverMaster() {
  BackendFailure last{BackendError::kConnect, "no sentinel to ask"};
  for (std::size_t i = 0; i < o_.nodes.size(); ++i) {
    const config::RedisAddress sentinel = o_.nodes[i];
    auto opened = RedisConnection::open(sentinel, o_.sentinel);
    if (auto* failed = std::get_if<BackendFailure>(&opened)) {
      last = *failed;
      continue;
    }
    auto& link = std::get<std::unique_ptr<RedisConnection>>(opened);
    auto reply = link->command({"SENTINEL", "get-master-addr-by-name", o_.master_name});
    closed_round_trips_ += link->roundTrips();
    if (auto* failed = std::get_if<BackendFailure>(&reply)) {
      last = *failed;
      continue;
    }
    const redisReply& r = *std::get<RedisReply>(reply);
    if (r.type != REDIS_REPLY_ARRAY || r.elements != 2) {
      last = {BackendError::kReply,
              sentinel.str() + " knows no master " + o_.master_name +
                  (errorText(r).empty() ? "" : ": " + std::string(errorText(r)))};
      if (isAuthError(errorText(r))) last.error = BackendError::kAuth;
      continue;
    }
    auto address = config::parseRedisAddress(
        std::string(words(*r.element[0])) + ":" + std::string(words(*r.element[1])), 6379);
    if (!std::holds_alternative<config::RedisAddress>(address)) {
      last = {BackendError::kReply, sentinel.str() + " named a master that is no address"};
      continue;
    }
    const auto master = std::get<config::RedisAddress>(std::move(address));
    // A sentinel may still name a master that was demoted: ask the server itself.
    auto c = connection(master);
    if (auto* failed = std::get_if<BackendFailure>(&c)) {
      last = *failed;
      continue;
    }
    auto role = std::get<Conn*>(c)->link->command({"ROLE"});
    if (auto* failed = std::get_if<BackendFailure>(&role)) {
      last = *failed;
      lost(master);
      continue;
    }
    const redisReply& rr = *std::get<RedisReply>(role);
    if (rr.type != REDIS_REPLY_ARRAY || rr.elements == 0 || words(*rr.element[0]) != "master") {
      last = {BackendError::kReply,
              master.str() + ", named by " + sentinel.str() + ", is not a master (yet)"};
      lost(master);
      continue;
    }
    if (master_ && *master_ != master) {
      topo_.failovers++;
      lost(*master_);
      spdlog::warn("fleet: the sentinels' master {} is now {} (was {})", o_.master_name,
                   master.str(), master_->str());
    }
    master_ = master;
    master_stale_ = false;
    topo_.refreshes++;
    changed();
    // The sentinel that answered is asked first next time.
    std::rotate(o_.nodes.begin(), o_.nodes.begin() + static_cast<std::ptrdiff_t>(i),
                o_.nodes.begin() + static_cast<std::ptrdiff_t>(i) + 1);
    return std::nullopt;
  }
  return last;
}

RedisBackend::Target RedisBackend::route(std::uint16_t slot, bool may_ask) {
  if (mode_ == config::FleetMode::kCluster) {
    if ((slots_stale_ || slots_.empty()) && may_ask) {
      if (auto failed = refreshSlots(); failed && slots_.empty()) return *failed;
    }
    if (const config::RedisAddress* node = slots_.nodeFor(slot)) return *node;
    slots_stale_ = true;
    return BackendFailure{BackendError::kReply,
                          "no node serves slot " + std::to_string(slot) + " (cluster down?)"};
  }
  if (mode_ == config::FleetMode::kSentinel && (master_stale_ || !master_) && may_ask) {
    if (auto failed = discoverMaster()) return *failed;
  }
  if (!master_) return BackendFailure{BackendError::kConnect, "no master known"};
  return *master_;
}

void RedisBackend::followMoved(const Redirect& r) {
  if (mode_ != config::FleetMode::kCluster) {
    spdlog::warn(
        "fleet: {} answered MOVED: it is a Redis Cluster node; following the cluster (write "
        "mode = \"cluster\" in [fleet] to say so)",
        master_ ? master_->str() : std::string("the server"));
    mode_ = config::FleetMode::kCluster;
    if (master_ && std::find(o_.nodes.begin(), o_.nodes.end(), *master_) == o_.nodes.end()) {
      o_.nodes.push_back(*master_);
    }
    master_.reset();
  }
  topo_.moved++;
  slots_.assign(r.slot, r.to);
  slots_stale_ = true;  // one MOVED usually means more slots moved: fetch the map again
  changed();
}

}  // namespace fairsched::fleet
