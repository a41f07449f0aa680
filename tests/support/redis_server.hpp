// A throwaway redis-server for tests and the fleet benchmark: started on a
// free loopback port (and a unix socket) in a fresh temporary directory, with
// persistence off, stopped and removed again by the destructor. Tests that
// cannot start one skip with the reason start() gives.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace fairsched::testing {

class RedisServer {
 public:
  static constexpr const char* kDefaultBinary = "/usr/bin/redis-server";

  // The server, or why it could not be started (binary missing, no port,
  // did not answer PING within 5 s).
  static std::variant<std::unique_ptr<RedisServer>, std::string> start(
      std::string binary = kDefaultBinary);
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  // SIGKILL, as a crash would; waits for the process.
  void kill();
  // Starts it again on the same port and socket (empty, as after a crash
  // without persistence). nullopt on success, else why not.
  std::optional<std::string> restart();
  bool running() const { return pid_ > 0; }
  // SIGSTOP / SIGCONT: a server that accepts nothing and answers nothing
  // (calls to it time out).
  void pause();
  void resume();

  std::uint16_t port() const { return port_; }
  const std::string& unixPath() const { return unix_path_; }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }

  // One command on a fresh connection; the reply flattened to strings
  // (integers in decimal, nil as ""), or nullopt when it failed.
  std::optional<std::vector<std::string>> command(const std::vector<std::string>& args) const;
  // The sum of the values of hash `key` (a fleet limit's sub-bucket counts);
  // 0 when it does not exist or the command fails.
  std::uint64_t hashSum(const std::string& key) const;
  // Connections the server has open (CLIENT LIST), not counting the one
  // asking; nullopt when it cannot be asked.
  std::optional<std::size_t> clientCount() const;

 private:
  RedisServer() = default;
  std::optional<std::string> spawn();

  std::string binary_;
  std::string dir_;
  std::string unix_path_;
  std::uint16_t port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace fairsched::testing
