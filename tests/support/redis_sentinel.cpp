#include "tests/support/redis_sentinel.hpp"

#include <set>
#include <stdexcept>
#include <thread>

namespace fairsched::testing {
namespace {

// A flattened field/value reply (SENTINEL MASTER): the value of `field`.
std::optional<std::string> fieldOf(const std::vector<std::string>& reply,
                                   const std::string& field) {
  for (std::size_t i = 0; i + 1 < reply.size(); i += 2) {
    if (reply[i] == field) return reply[i + 1];
  }
  return std::nullopt;
}

bool infoHas(const RedisServer& server, const std::string& section, const std::string& line) {
  const auto info = server.command({"INFO", section});
  return info && !info->empty() && info->front().find(line) != std::string::npos;
}

template <class Check>
std::optional<std::string> pollUntil(std::chrono::seconds bound, Check&& check) {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  for (;;) {
    std::string why = check();
    if (why.empty()) return std::nullopt;
    if (std::chrono::steady_clock::now() >= deadline) return why;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace

std::variant<std::unique_ptr<RedisSentinelServers>, std::string> RedisSentinelServers::start(
    RedisSentinelOptions options) {
  std::unique_ptr<RedisSentinelServers> s(new RedisSentinelServers());
  s->options_ = std::move(options);
  const auto& o = s->options_;

  RedisServerOptions data;
  data.binary = o.binary;
  data.cli_binary = o.cli_binary;
  data.tls = o.tls;
  data.config_lines = o.config_lines;
  if (!o.password.empty()) {
    data.config_lines.push_back("requirepass " + o.password);
    data.config_lines.push_back("masterauth " + o.password);
    data.admin_password = o.password;
  }
  auto master = RedisServer::start(data);
  if (auto* err = std::get_if<std::string>(&master)) return "master: " + *err;
  const std::uint16_t master_port = std::get<0>(master)->port();
  const std::string master_port_text = std::to_string(master_port);
  data.config_lines.push_back("replicaof 127.0.0.1 " + master_port_text);
  auto replica = RedisServer::start(data);
  if (auto* err = std::get_if<std::string>(&replica)) return "replica: " + *err;
  const std::uint16_t replica_port = std::get<0>(replica)->port();
  s->server_ports_ = {master_port, replica_port};
  s->nodes_[master_port] = std::move(std::get<0>(master));
  s->nodes_[replica_port] = std::move(std::get<0>(replica));

  // A sentinel finds replicas in its master's INFO, refreshed every 10 s:
  // start them once the replica is attached, so the first INFO shows it.
  if (auto why = pollUntil(std::chrono::seconds(30), [&]() -> std::string {
        if (!infoHas(*s->nodes_[replica_port], "replication", "master_link_status:up")) {
          return "the replica is not in sync with the master";
        }
        if (!infoHas(*s->nodes_[master_port], "replication", "connected_slaves:1")) {
          return "the master does not list the replica";
        }
        return {};
      })) {
    return "within 30 s: " + *why;
  }

  RedisServerOptions sentinel;
  sentinel.binary = o.binary;
  sentinel.cli_binary = o.cli_binary;
  sentinel.tls = o.tls;
  sentinel.sentinel = true;
  sentinel.unix_socket = false;
  const std::string& name = o.master_name;
  sentinel.config_lines = {
      "sentinel resolve-hostnames no",
      "sentinel monitor " + name + " 127.0.0.1 " + master_port_text + " " +
          std::to_string(o.quorum),
      "sentinel down-after-milliseconds " + name + " " + std::to_string(o.down_after_ms),
      "sentinel failover-timeout " + name + " " + std::to_string(o.failover_timeout_ms)};
  if (!o.password.empty())
    sentinel.config_lines.push_back("sentinel auth-pass " + name + " " + o.password);
  for (int i = 0; i < o.sentinels; ++i) {
    auto started = RedisServer::start(sentinel);
    if (auto* err = std::get_if<std::string>(&started)) {
      return "sentinel " + std::to_string(i + 1) + ": " + *err;
    }
    const std::uint16_t port = std::get<0>(started)->port();
    s->sentinel_ports_.push_back(port);
    s->nodes_[port] = std::move(std::get<0>(started));
  }
  if (auto why = s->waitUntilWatching(std::chrono::seconds(60))) {
    return "the sentinels did not settle within 60 s: " + *why;
  }
  return s;
}

std::optional<std::string> RedisSentinelServers::waitUntilWatching(
    std::chrono::seconds bound) const {
  const std::string others = std::to_string(options_.sentinels - 1);
  return pollUntil(bound, [&]() -> std::string {
    for (const auto port : sentinel_ports_) {
      const auto& n = *nodes_.at(port);
      const std::string who = "sentinel " + std::to_string(port) + ": ";
      const auto master = n.command({"SENTINEL", "MASTER", options_.master_name});
      if (!master) return who + "does not know the master";
      if (fieldOf(*master, "flags") != "master") {
        return who + "sees the master as " + fieldOf(*master, "flags").value_or("?");
      }
      if (fieldOf(*master, "num-other-sentinels") != others) {
        return who + "knows " + fieldOf(*master, "num-other-sentinels").value_or("?") +
               " other sentinels";
      }
      const auto replicas = n.command({"SENTINEL", "REPLICAS", options_.master_name});
      if (!replicas) return who + "SENTINEL REPLICAS failed";
      int healthy = 0;
      for (std::size_t i = 0; i + 1 < replicas->size(); i += 2) {
        if ((*replicas)[i] != "flags") continue;
        if ((*replicas)[i + 1] != "slave") return who + "sees a replica as " + (*replicas)[i + 1];
        ++healthy;
      }
      if (healthy < 1) return who + "sees no replica";
    }
    return {};
  });
}

std::optional<std::uint16_t> RedisSentinelServers::masterPort() const {
  for (const auto port : sentinel_ports_) {
    const auto& n = *nodes_.at(port);
    if (!n.running()) continue;
    const auto addr = n.command({"SENTINEL", "GET-MASTER-ADDR-BY-NAME", options_.master_name});
    if (!addr || addr->size() != 2 || addr->at(1).empty()) continue;
    return static_cast<std::uint16_t>(std::stoul(addr->at(1)));
  }
  return std::nullopt;
}

RedisServer& RedisSentinelServers::node(std::uint16_t port) const {
  const auto it = nodes_.find(port);
  if (it == nodes_.end()) {
    throw std::out_of_range("no server or sentinel on port " + std::to_string(port));
  }
  return *it->second;
}

std::string RedisSentinelServers::url() const {
  std::string url = options_.tls != nullptr ? "rediss-sentinel://" : "redis-sentinel://";
  for (std::size_t i = 0; i < sentinel_ports_.size(); ++i) {
    url += (i == 0 ? "127.0.0.1:" : ",127.0.0.1:") + std::to_string(sentinel_ports_[i]);
  }
  return url + "#" + options_.master_name;
}

void RedisSentinelServers::kill(std::uint16_t port) {
  node(port).kill();
}

bool RedisSentinelServers::waitForPromotion(std::uint16_t old_master,
                                            std::chrono::seconds bound) const {
  return !pollUntil(bound, [&]() -> std::string {
    std::set<std::uint16_t> masters;
    for (const auto port : sentinel_ports_) {
      const auto& n = *nodes_.at(port);
      if (!n.running()) continue;
      const auto addr = n.command({"SENTINEL", "GET-MASTER-ADDR-BY-NAME", options_.master_name});
      if (!addr || addr->size() != 2 || addr->at(1).empty()) continue;
      masters.insert(static_cast<std::uint16_t>(std::stoul(addr->at(1))));
    }
    if (masters.size() != 1) return "the sentinels do not agree on one master";
    const auto master = *masters.begin();
    if (master == old_master) return "still the old master";
    const auto it = nodes_.find(master);
    if (it == nodes_.end()) return "a master that is not ours";
    const auto role = it->second->command({"ROLE"});
    if (!role || role->empty() || role->front() != "master") return "not yet a master itself";
    return {};
  });
}

}  // namespace fairsched::testing
