// A throwaway Sentinel setup on loopback for tests and benchmarks: a master,
// one replica of it and three sentinels watching it (quorum 2, down after
// 1 s), each a RedisServer in its own temporary directory. start() returns
// once every sentinel knows the master, its replica and the other sentinels.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "tests/support/redis_server.hpp"

namespace fairsched::testing {

class TlsFiles;

struct RedisSentinelOptions {
  std::string master_name = "fairsched";
  int sentinels = 3;
  int quorum = 2;
  int down_after_ms = 1000;
  int failover_timeout_ms = 10000;
  // The data servers and the sentinels on TLS; must outlive them.
  const TlsFiles* tls = nullptr;
  // requirepass and masterauth on the master and the replica (the admin
  // password too), `sentinel auth-pass` on the sentinels; the sentinels
  // themselves ask none.
  std::string password;
  // More redis.conf directives for the master and the replica.
  std::vector<std::string> config_lines;
  std::string binary = kRedisServerBinary;
  std::string cli_binary = kRedisCliBinary;
};

class RedisSentinelServers {
 public:
  // The setup, or why it could not be made (a server did not start, the
  // replica did not sync, or the sentinels did not find each other within
  // 60 s).
  static std::variant<std::unique_ptr<RedisSentinelServers>, std::string> start(
      RedisSentinelOptions options = {});
  ~RedisSentinelServers() = default;
  RedisSentinelServers(const RedisSentinelServers&) = delete;
  RedisSentinelServers& operator=(const RedisSentinelServers&) = delete;

  const std::string& masterName() const { return options_.master_name; }
  std::vector<std::uint16_t> sentinelPorts() const { return sentinel_ports_; }
  // The master and the replica, as started.
  std::vector<std::uint16_t> serverPorts() const { return server_ports_; }
  // The master now, as the first sentinel that answers reports it
  // (SENTINEL get-master-addr-by-name); nullopt when none answers.
  std::optional<std::uint16_t> masterPort() const;
  // Any server or sentinel; throws std::out_of_range for another port.
  RedisServer& node(std::uint16_t port) const;
  // redis-sentinel://127.0.0.1:<s1>,...#<master name> (rediss-sentinel://
  // under TLS), no credentials.
  std::string url() const;

  // SIGKILL a server or sentinel, as a crash would.
  void kill(std::uint16_t port);
  // Polls until every sentinel that answers (at least one) reports the same
  // master, not `old_master`, and that server says it is a master. False
  // when that does not happen within `bound`.
  bool waitForPromotion(std::uint16_t old_master, std::chrono::seconds bound) const;

 private:
  RedisSentinelServers() = default;
  std::optional<std::string> waitUntilWatching(std::chrono::seconds bound) const;

  RedisSentinelOptions options_;
  std::vector<std::uint16_t> server_ports_;
  std::vector<std::uint16_t> sentinel_ports_;
  std::map<std::uint16_t, std::unique_ptr<RedisServer>> nodes_;
};

}  // namespace fairsched::testing
