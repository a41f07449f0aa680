// A throwaway Redis Cluster on loopback for tests and benchmarks: masters
// with replicas, each a RedisServer (cluster-enabled) in its own temporary
// directory, joined with `redis-cli --cluster create`. start() returns once
// every node agrees on the slots and every replica is attached; failover and
// slot migration steps are here for MOVED/ASK and failover tests.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "tests/support/redis_server.hpp"

namespace fairsched::testing {

class TlsFiles;

struct RedisClusterOptions {
  int masters = 3;
  int replicas_per_master = 1;
  int cluster_node_timeout_ms = 1000;
  // Every node and the cluster bus on TLS; must outlive the cluster.
  const TlsFiles* tls = nullptr;
  // requirepass and masterauth on every node; the admin password too.
  std::string password;
  // More redis.conf directives for every node.
  std::vector<std::string> config_lines;
  std::string binary = kRedisServerBinary;
  std::string cli_binary = kRedisCliBinary;
};

class RedisClusterServers {
 public:
  static constexpr int kSlots = 16384;

  // The cluster, or why it could not be made (a node did not start, the
  // create failed, or the nodes did not agree within 60 s).
  static std::variant<std::unique_ptr<RedisClusterServers>, std::string> start(
      RedisClusterOptions options = {});
  ~RedisClusterServers() = default;
  RedisClusterServers(const RedisClusterServers&) = delete;
  RedisClusterServers& operator=(const RedisClusterServers&) = delete;

  // The masters that own slots now, as a live node reports them (sorted);
  // empty when no node answers.
  std::vector<std::uint16_t> masterPorts() const;
  // Every node, masters first, in start order.
  std::vector<std::uint16_t> allPorts() const;
  // Throws std::out_of_range for a port that is not a node of this cluster.
  RedisServer& node(std::uint16_t port) const;
  // The node's id (CLUSTER MYID, read at start).
  const std::string& nodeId(std::uint16_t port) const;
  // The master serving `slot` as the first live node that answers says;
  // nullopt when none answers or none serves it.
  std::optional<std::uint16_t> ownerOfSlot(int slot) const;
  // The slot of `key`: CRC16 (XMODEM) of the key, or of its {hash tag} when
  // it has a non-empty one, mod 16384.
  static int slotOf(std::string_view key);
  // redis://127.0.0.1:<p1>,127.0.0.1:<p2>,... (rediss:// under TLS), no
  // credentials: every node as a seed.
  std::string url() const;

  // SIGKILL one node, as a crash would.
  void kill(std::uint16_t port);
  // Polls until every node that answers (at least one) reports
  // cluster_state:ok and the same master for `slot`, not `old_port`. False
  // when that does not happen within `bound`.
  bool waitForNewOwner(int slot, std::uint16_t old_port, std::chrono::seconds bound) const;

  // Moving a slot by hand, in the steps a resharding takes, so tests see
  // ASK (between begin and finish, for keys already moved) and then MOVED.
  // Each returns nullopt on success, else what failed.
  // CLUSTER SETSLOT IMPORTING on `to`, then MIGRATING on `from`.
  std::optional<std::string> beginMigration(int slot, std::uint16_t from, std::uint16_t to);
  // MIGRATE every key of `slot` from `from` to `to`.
  std::optional<std::string> migrateKeys(int slot, std::uint16_t from, std::uint16_t to);
  // CLUSTER SETSLOT NODE <to> on `to`, then on every other master.
  std::optional<std::string> finishMigration(int slot, std::uint16_t to);

 private:
  RedisClusterServers() = default;
  // nullopt once every node agrees and every replica is attached, else what
  // was still wrong when `bound` passed.
  std::optional<std::string> waitUntilFormed(std::chrono::seconds bound) const;

  RedisClusterOptions options_;
  std::vector<std::uint16_t> ports_;
  std::map<std::uint16_t, std::unique_ptr<RedisServer>> nodes_;
  std::map<std::uint16_t, std::string> ids_;
};

}  // namespace fairsched::testing
