#include "tests/support/redis_cluster.hpp"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "tests/support/run_program.hpp"

namespace fairsched::testing {
namespace {

// One line of CLUSTER NODES.
struct ClusterNode {
  std::string id;
  std::uint16_t port = 0;
  std::string flags;
  std::string master_id;  // "-" for a master
  bool connected = false;
  std::vector<std::pair<int, int>> slots;

  bool isMaster() const { return hasFlag("master"); }
  bool hasFlag(std::string_view flag) const {
    std::stringstream ss(flags);
    std::string f;
    while (std::getline(ss, f, ',')) {
      if (f == flag) return true;
    }
    return false;
  }
  bool serves(int slot) const {
    return std::any_of(slots.begin(), slots.end(),
                       [&](const auto& r) { return r.first <= slot && slot <= r.second; });
  }
};

std::vector<ClusterNode> parseNodes(const std::string& text) {
  std::vector<ClusterNode> nodes;
  std::stringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::stringstream fields(line);
    ClusterNode n;
    std::string addr, ping, pong, epoch, link;
    if (!(fields >> n.id >> addr >> n.flags >> n.master_id >> ping >> pong >> epoch >> link)) {
      continue;
    }
    // 127.0.0.1:port@cport[,hostname]
    const auto colon = addr.rfind(':', addr.find('@'));
    if (colon == std::string::npos) continue;
    n.port = static_cast<std::uint16_t>(std::strtoul(addr.c_str() + colon + 1, nullptr, 10));
    n.connected = link == "connected";
    std::string range;
    while (fields >> range) {
      if (range.empty() || range[0] == '[') continue;  // a slot being migrated or imported
      const auto dash = range.find('-');
      const int lo = std::atoi(range.c_str());
      const int hi = dash == std::string::npos ? lo : std::atoi(range.c_str() + dash + 1);
      n.slots.emplace_back(lo, hi);
    }
    nodes.push_back(std::move(n));
  }
  return nodes;
}

std::optional<std::vector<ClusterNode>> clusterNodes(const RedisServer& server) {
  const auto reply = server.command({"CLUSTER", "NODES"});
  if (!reply || reply->size() != 1) return std::nullopt;
  return parseNodes(reply->front());
}

bool clusterOk(const RedisServer& server) {
  const auto info = server.command({"CLUSTER", "INFO"});
  return info && !info->empty() && info->front().find("cluster_state:ok") != std::string::npos;
}

bool bindable(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return ok;
}

// A port that is free with its cluster bus port (port + 10000). Both below
// the kernel's ephemeral range (32768+), so the nodes' own outgoing
// connections cannot take them.
std::optional<std::uint16_t> freeClusterPort(const std::set<std::uint16_t>& taken) {
  thread_local std::mt19937 rng{std::random_device{}()};
  std::uniform_int_distribution<int> pick(15000, 22000);
  for (int i = 0; i < 200; ++i) {
    const auto port = static_cast<std::uint16_t>(pick(rng));
    if (taken.count(port) != 0) continue;
    if (bindable(port) && bindable(static_cast<std::uint16_t>(port + 10000))) return port;
  }
  return std::nullopt;
}

std::uint16_t crc16(std::string_view data) {
  std::uint16_t crc = 0;
  for (const char c : data) {
    crc ^= static_cast<std::uint16_t>(static_cast<unsigned char>(c) << 8);
    for (int bit = 0; bit < 8; ++bit) {
      crc = (crc & 0x8000) != 0 ? static_cast<std::uint16_t>((crc << 1) ^ 0x1021)
                                : static_cast<std::uint16_t>(crc << 1);
    }
  }
  return crc;
}

}  // namespace

int RedisClusterServers::slotOf(std::string_view key) {
  if (const auto open = key.find('{'); open != std::string_view::npos) {
    const auto close = key.find('}', open + 1);
    if (close != std::string_view::npos && close != open + 1) {
      key = key.substr(open + 1, close - open - 1);
    }
  }
  return crc16(key) & (kSlots - 1);
}

std::variant<std::unique_ptr<RedisClusterServers>, std::string> RedisClusterServers::start(
    RedisClusterOptions options) {
  if (options.masters < 3) return std::string("a Redis Cluster needs at least 3 masters");
  if (::access(options.cli_binary.c_str(), X_OK) != 0) {
    return options.cli_binary + " is not installed";
  }
  std::unique_ptr<RedisClusterServers> c(new RedisClusterServers());
  c->options_ = std::move(options);
  const auto& o = c->options_;

  RedisServerOptions node_options;
  node_options.binary = o.binary;
  node_options.cli_binary = o.cli_binary;
  node_options.tls = o.tls;
  // Validity factor 0: a replica may take over however long it was cut off
  // from its master, as tests kill masters at any moment.
  node_options.config_lines = {"cluster-enabled yes", "cluster-config-file nodes.conf",
                               "cluster-node-timeout " + std::to_string(o.cluster_node_timeout_ms),
                               "cluster-replica-validity-factor 0"};
  if (!o.password.empty()) {
    node_options.config_lines.push_back("requirepass " + o.password);
    node_options.config_lines.push_back("masterauth " + o.password);
    node_options.admin_password = o.password;
  }
  node_options.config_lines.insert(node_options.config_lines.end(), o.config_lines.begin(),
                                   o.config_lines.end());

  const int count = o.masters * (1 + o.replicas_per_master);
  std::set<std::uint16_t> taken;
  for (int i = 0; i < count; ++i) {
    std::string why = "no port free with its cluster bus port";
    for (int attempt = 0; attempt < 5; ++attempt) {
      const auto port = freeClusterPort(taken);
      if (!port) break;
      taken.insert(*port);
      node_options.port = *port;
      auto started = RedisServer::start(node_options);
      if (auto* err = std::get_if<std::string>(&started)) {
        why = *err;
        continue;
      }
      c->ports_.push_back(*port);
      c->nodes_[*port] = std::move(std::get<0>(started));
      why.clear();
      break;
    }
    if (!why.empty()) return "cluster node " + std::to_string(i + 1) + ": " + why;
  }

  auto create = redisCliArgs(o.cli_binary, 0, o.tls, "", o.password);
  create.insert(create.end(), {"--cluster", "create"});
  for (const auto port : c->ports_) create.push_back("127.0.0.1:" + std::to_string(port));
  create.insert(create.end(),
                {"--cluster-replicas", std::to_string(o.replicas_per_master), "--cluster-yes"});
  if (const auto r = runProgram(create, std::chrono::seconds(60)); !r.ok()) {
    return "redis-cli --cluster create: " + r.describe() + "\n" + r.out;
  }
  if (auto why = c->waitUntilFormed(std::chrono::seconds(60))) {
    return "the cluster did not settle within 60 s: " + *why;
  }
  for (const auto port : c->ports_) {
    const auto id = c->nodes_.at(port)->command({"CLUSTER", "MYID"});
    if (!id || id->size() != 1) return "CLUSTER MYID on " + std::to_string(port) + " failed";
    c->ids_[port] = id->front();
  }
  // Masters first.
  const auto masters = c->masterPorts();
  std::stable_partition(c->ports_.begin(), c->ports_.end(), [&](std::uint16_t p) {
    return std::find(masters.begin(), masters.end(), p) != masters.end();
  });
  return c;
}

std::optional<std::string> RedisClusterServers::waitUntilFormed(std::chrono::seconds bound) const {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  std::string why;
  for (;;) {
    why = [&]() -> std::string {
      std::optional<std::vector<std::string>> first_slots;
      for (const auto port : ports_) {
        const auto& n = *nodes_.at(port);
        const std::string name = "node " + std::to_string(port) + ": ";
        if (!clusterOk(n)) return name + "cluster_state is not ok";
        const auto slots = n.command({"CLUSTER", "SLOTS"});
        if (!slots) return name + "CLUSTER SLOTS failed";
        if (!first_slots) {
          first_slots = slots;
        } else if (*slots != *first_slots) {
          return name + "CLUSTER SLOTS differs from node " + std::to_string(ports_.front()) + "'s";
        }
        const auto view = clusterNodes(n);
        if (!view || view->size() != ports_.size()) return name + "does not know every node yet";
        int masters = 0;
        for (const auto& v : *view) {
          if (!v.connected || v.hasFlag("fail") || v.hasFlag("fail?") || v.hasFlag("handshake") ||
              v.hasFlag("noaddr")) {
            return name + "sees " + std::to_string(v.port) + " as " + v.flags;
          }
          if (!v.isMaster()) continue;
          ++masters;
          const auto replicas = std::count_if(view->begin(), view->end(),
                                              [&](const auto& r) { return r.master_id == v.id; });
          if (replicas != options_.replicas_per_master) {
            return name + "sees " + std::to_string(replicas) + " replicas of " +
                   std::to_string(v.port);
          }
        }
        if (masters != options_.masters)
          return name + "sees " + std::to_string(masters) + " masters";
        const bool replica = std::any_of(view->begin(), view->end(), [](const auto& v) {
          return v.hasFlag("myself") && v.hasFlag("slave");
        });
        if (replica) {
          const auto info = n.command({"INFO", "replication"});
          if (!info || info->empty() ||
              info->front().find("master_link_status:up") == std::string::npos) {
            return name + "replica not in sync with its master yet";
          }
        }
      }
      return {};
    }();
    if (why.empty()) return std::nullopt;
    if (std::chrono::steady_clock::now() >= deadline) return why;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

std::vector<std::uint16_t> RedisClusterServers::masterPorts() const {
  for (const auto port : ports_) {
    const auto& n = *nodes_.at(port);
    if (!n.running()) continue;
    const auto view = clusterNodes(n);
    if (!view) continue;
    std::vector<std::uint16_t> masters;
    for (const auto& v : *view) {
      if (v.isMaster() && !v.slots.empty()) masters.push_back(v.port);
    }
    std::sort(masters.begin(), masters.end());
    return masters;
  }
  return {};
}

std::vector<std::uint16_t> RedisClusterServers::allPorts() const {
  return ports_;
}

RedisServer& RedisClusterServers::node(std::uint16_t port) const {
  const auto it = nodes_.find(port);
  if (it == nodes_.end())
    throw std::out_of_range("no cluster node on port " + std::to_string(port));
  return *it->second;
}

const std::string& RedisClusterServers::nodeId(std::uint16_t port) const {
  const auto it = ids_.find(port);
  if (it == ids_.end()) throw std::out_of_range("no cluster node on port " + std::to_string(port));
  return it->second;
}

std::optional<std::uint16_t> RedisClusterServers::ownerOfSlot(int slot) const {
  for (const auto port : ports_) {
    const auto& n = *nodes_.at(port);
    if (!n.running()) continue;
    const auto view = clusterNodes(n);
    if (!view) continue;
    for (const auto& v : *view) {
      if (v.isMaster() && v.serves(slot)) return v.port;
    }
    return std::nullopt;
  }
  return std::nullopt;
}

std::string RedisClusterServers::url() const {
  std::string url = options_.tls != nullptr ? "rediss://" : "redis://";
  for (std::size_t i = 0; i < ports_.size(); ++i) {
    url += (i == 0 ? "127.0.0.1:" : ",127.0.0.1:") + std::to_string(ports_[i]);
  }
  return url;
}

void RedisClusterServers::kill(std::uint16_t port) {
  node(port).kill();
}

bool RedisClusterServers::waitForNewOwner(int slot, std::uint16_t old_port,
                                          std::chrono::seconds bound) const {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  for (;;) {
    std::set<std::uint16_t> owners;
    int answered = 0;
    bool all_ok = true;
    for (const auto port : ports_) {
      const auto& n = *nodes_.at(port);
      if (!n.running()) continue;
      const auto view = clusterNodes(n);
      if (!view) continue;  // paused, or not answering now
      ++answered;
      all_ok = all_ok && clusterOk(n);
      std::optional<std::uint16_t> owner;
      for (const auto& v : *view) {
        if (v.isMaster() && v.serves(slot)) owner = v.port;
      }
      owners.insert(owner.value_or(0));
    }
    if (answered > 0 && all_ok && owners.size() == 1 && *owners.begin() != 0 &&
        *owners.begin() != old_port) {
      return true;
    }
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

std::optional<std::string> RedisClusterServers::beginMigration(int slot, std::uint16_t from,
                                                               std::uint16_t to) {
  const std::string s = std::to_string(slot);
  std::string error;
  if (!node(to).command({"CLUSTER", "SETSLOT", s, "IMPORTING", nodeId(from)}, &error)) {
    return "CLUSTER SETSLOT " + s + " IMPORTING on " + std::to_string(to) + ": " + error;
  }
  if (!node(from).command({"CLUSTER", "SETSLOT", s, "MIGRATING", nodeId(to)}, &error)) {
    return "CLUSTER SETSLOT " + s + " MIGRATING on " + std::to_string(from) + ": " + error;
  }
  return std::nullopt;
}

std::optional<std::string> RedisClusterServers::migrateKeys(int slot, std::uint16_t from,
                                                            std::uint16_t to) {
  const std::string s = std::to_string(slot);
  std::string error;
  for (;;) {
    const auto keys = node(from).command({"CLUSTER", "GETKEYSINSLOT", s, "100"}, &error);
    if (!keys) return "CLUSTER GETKEYSINSLOT " + s + " on " + std::to_string(from) + ": " + error;
    if (keys->empty()) return std::nullopt;
    std::vector<std::string> migrate{"MIGRATE", "127.0.0.1", std::to_string(to), "", "0", "5000"};
    if (!options_.password.empty()) migrate.insert(migrate.end(), {"AUTH", options_.password});
    migrate.emplace_back("KEYS");
    migrate.insert(migrate.end(), keys->begin(), keys->end());
    if (!node(from).command(migrate, &error)) {
      return "MIGRATE from " + std::to_string(from) + " to " + std::to_string(to) + ": " + error;
    }
  }
}

std::optional<std::string> RedisClusterServers::finishMigration(int slot, std::uint16_t to) {
  const std::string s = std::to_string(slot);
  std::vector<std::uint16_t> order{to};
  for (const auto p : masterPorts()) {
    if (p != to && node(p).running()) order.push_back(p);
  }
  std::string error;
  for (const auto p : order) {
    if (!node(p).command({"CLUSTER", "SETSLOT", s, "NODE", nodeId(to)}, &error)) {
      return "CLUSTER SETSLOT " + s + " NODE on " + std::to_string(p) + ": " + error;
    }
  }
  return std::nullopt;
}

}  // namespace fairsched::testing
