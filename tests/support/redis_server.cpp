#include "tests/support/redis_server.hpp"

#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

extern char** environ;

namespace fairsched::testing {
namespace {

std::optional<std::uint16_t> freePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::nullopt;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  std::optional<std::uint16_t> port;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

void flatten(const redisReply* r, std::vector<std::string>& out) {
  switch (r->type) {
    case REDIS_REPLY_ARRAY:
      for (std::size_t i = 0; i < r->elements; ++i) flatten(r->element[i], out);
      break;
    case REDIS_REPLY_INTEGER:
      out.push_back(std::to_string(r->integer));
      break;
    case REDIS_REPLY_NIL:
      out.emplace_back();
      break;
    default:
      out.emplace_back(r->str, r->len);
      break;
  }
}

}  // namespace

std::variant<std::unique_ptr<RedisServer>, std::string> RedisServer::start(std::string binary) {
  if (::access(binary.c_str(), X_OK) != 0) return binary + " is not installed";
  std::unique_ptr<RedisServer> s(new RedisServer());
  s->binary_ = std::move(binary);
  std::string tmpl = (std::filesystem::temp_directory_path() / "fairsched-redis-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) return std::string("mkdtemp: ") + std::strerror(errno);
  s->dir_ = tmpl;
  s->unix_path_ = s->dir_ + "/redis.sock";
  for (int attempt = 0; attempt < 5; ++attempt) {
    const auto port = freePort();
    if (!port) return std::string("no free loopback port");
    s->port_ = *port;
    auto err = s->spawn();
    if (!err) return s;
    if (attempt == 4) return *err;
  }
  return std::string("unreachable");
}

std::optional<std::string> RedisServer::spawn() {
  const std::string port = std::to_string(port_);
  std::vector<std::string> args{binary_,
                                "--port",
                                port,
                                "--bind",
                                "127.0.0.1",
                                "--save",
                                "",
                                "--appendonly",
                                "no",
                                "--dir",
                                dir_,
                                "--unixsocket",
                                unix_path_,
                                "--unixsocketperm",
                                "700",
                                "--daemonize",
                                "no",
                                "--protected-mode",
                                "no",
                                "--loglevel",
                                "warning",
                                "--logfile",
                                dir_ + "/redis.log"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  if (const int rc = posix_spawn(&pid, binary_.c_str(), nullptr, nullptr, argv.data(), environ);
      rc != 0) {
    return std::string("posix_spawn: ") + std::strerror(rc);
  }
  pid_ = pid;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return "redis-server exited at start (port " + port + " taken?); see " + dir_ + "/redis.log";
    }
    if (auto pong = command({"PING"}); pong && !pong->empty() && pong->front() == "PONG") {
      return std::nullopt;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill();
  return "redis-server did not answer PING within 5 s";
}

RedisServer::~RedisServer() {
  kill();
  std::error_code ec;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
}

void RedisServer::kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
}

void RedisServer::pause() {
  if (pid_ > 0) ::kill(pid_, SIGSTOP);
}

void RedisServer::resume() {
  if (pid_ > 0) ::kill(pid_, SIGCONT);
}

std::optional<std::string> RedisServer::restart() {
  if (running()) kill();
  ::unlink(unix_path_.c_str());
  return spawn();
}

std::optional<std::vector<std::string>> RedisServer::command(
    const std::vector<std::string>& args) const {
  timeval tv{1, 0};
  redisContext* c = redisConnectWithTimeout("127.0.0.1", port_, tv);
  if (c == nullptr) return std::nullopt;
  if (c->err != 0 || redisSetTimeout(c, tv) != REDIS_OK) {
    redisFree(c);
    return std::nullopt;
  }
  std::vector<const char*> argv;
  std::vector<std::size_t> lens;
  for (const auto& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  auto* r = static_cast<redisReply*>(
      redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data()));
  std::optional<std::vector<std::string>> out;
  if (r != nullptr && r->type != REDIS_REPLY_ERROR) {
    out.emplace();
    flatten(r, *out);
  }
  if (r != nullptr) freeReplyObject(r);
  redisFree(c);
  return out;
}

std::optional<std::size_t> RedisServer::clientCount() const {
  auto list = command({"CLIENT", "LIST"});
  if (!list || list->empty()) return std::nullopt;
  std::size_t lines = 0;
  for (char ch : list->front()) lines += ch == '\n' ? 1 : 0;
  return lines == 0 ? 0 : lines - 1;  // not the connection asking
}

std::uint64_t RedisServer::hashSum(const std::string& key) const {
  const auto all = command({"HGETALL", key});
  std::uint64_t sum = 0;
  if (!all) return 0;
  for (std::size_t i = 1; i < all->size(); i += 2) sum += std::stoull((*all)[i]);
  return sum;
}

}  // namespace fairsched::testing
