// A throwaway redis-server for tests and the fleet benchmark: started on a
// free loopback port (and a unix socket) in a fresh temporary directory, with
// persistence off, stopped and removed again by the destructor. Tests that
// cannot start one skip with the reason start() gives.
//
// Options add redis.conf directives (ACL users, requirepass, cluster mode),
// TLS on the port, or sentinel mode; RedisClusterServers and
// RedisSentinelServers build topologies out of these.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace fairsched::testing {

class TlsFiles;

inline constexpr const char* kRedisServerBinary = "/usr/bin/redis-server";
inline constexpr const char* kRedisCliBinary = "/usr/bin/redis-cli";

struct RedisServerOptions {
  std::string binary = kRedisServerBinary;
  // Extra redis.conf directives, after (so overriding) the defaults, e.g.
  // "requirepass s3cret", "user app on >pw ~fairsched:* +evalsha",
  // "cluster-enabled yes".
  std::vector<std::string> config_lines;
  // When set, the port serves TLS only (server certificate, clients verified
  // against the CA when they present a certificate), and replication and the
  // cluster bus use TLS too. Must outlive the server (restart() reads it).
  const TlsFiles* tls = nullptr;
  bool unix_socket = true;
  // 0: a free loopback port; else this one (one try).
  std::uint16_t port = 0;
  // `redis-server <conf> --sentinel`; config_lines carry the sentinel lines.
  bool sentinel = false;
  // What command(), hashSum() and clientCount() authenticate as: a password
  // alone is AUTH <password> (requirepass), with a user AUTH <user> <password>.
  std::string admin_user;
  std::string admin_password;
  // Used for command() under TLS or AUTH.
  std::string cli_binary = kRedisCliBinary;
};

class RedisServer {
 public:
  static constexpr const char* kDefaultBinary = kRedisServerBinary;

  // The server, or why it could not be started (binary missing, no port,
  // exited at start, did not answer PING within 10 s; with the tail of its log).
  static std::variant<std::unique_ptr<RedisServer>, std::string> start(
      std::string binary = kDefaultBinary);
  static std::variant<std::unique_ptr<RedisServer>, std::string> start(RedisServerOptions options);
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  // SIGKILL, as a crash would; waits for the process.
  void kill();
  // Starts it again on the same port and socket with the same options and
  // config file (empty, as after a crash without persistence; a cluster
  // node keeps its nodes.conf, a sentinel its rewritten config). nullopt on
  // success, else why not.
  std::optional<std::string> restart();
  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  // SIGSTOP / SIGCONT: a server that accepts nothing and answers nothing
  // (calls to it time out).
  void pause();
  void resume();

  std::string host() const { return "127.0.0.1"; }
  std::uint16_t port() const { return port_; }
  bool tls() const { return options_.tls != nullptr; }
  const RedisServerOptions& options() const { return options_; }
  // "" when started without a unix socket.
  const std::string& unixPath() const { return unix_path_; }
  // redis:// (rediss:// under TLS) with host and port, no credentials.
  std::string url() const {
    return std::string(tls() ? "rediss" : "redis") + "://127.0.0.1:" + std::to_string(port_);
  }
  const std::string& dir() const { return dir_; }
  std::string logPath() const { return dir_ + "/redis.log"; }

  // One command on a fresh connection, as the admin user; the reply
  // flattened to strings (integers in decimal, nil as ""), or nullopt when
  // it failed, with the error reply or why in *error when given. Plain
  // servers are asked through hiredis (1 s timeout), servers with TLS or
  // AUTH through redis-cli (5 s).
  std::optional<std::vector<std::string>> command(const std::vector<std::string>& args,
                                                  std::string* error = nullptr) const;
  // The sum of the values of hash `key` (a fleet limit's sub-bucket counts);
  // 0 when it does not exist or the command fails.
  std::uint64_t hashSum(const std::string& key) const;
  // Connections the server has open (CLIENT LIST), not counting the one
  // asking; nullopt when it cannot be asked.
  std::optional<std::size_t> clientCount() const;
  // redis-cli with the connection flags (host, port, TLS files, AUTH) this
  // server needs, before any command arguments.
  std::vector<std::string> cliArgs() const;

 private:
  RedisServer() = default;
  std::optional<std::string> writeConfig() const;
  std::optional<std::string> spawn();
  bool viaCli() const { return tls() || !options_.admin_password.empty(); }
  std::string logTail() const;

  RedisServerOptions options_;
  std::string dir_;
  std::string config_path_;
  std::string unix_path_;
  std::uint16_t port_ = 0;
  pid_t pid_ = -1;
};

// redis-cli and its connection flags towards 127.0.0.1:port (no -h/-p when
// port is 0): --tls with the CA and client certificate when `tls` is set,
// --user/--pass when given.
std::vector<std::string> redisCliArgs(const std::string& cli, std::uint16_t port,
                                      const TlsFiles* tls, const std::string& user,
                                      const std::string& password);

}  // namespace fairsched::testing
