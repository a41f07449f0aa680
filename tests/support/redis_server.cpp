#include "tests/support/redis_server.hpp"

#include <fcntl.h>
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
#include <fstream>
#include <sstream>
#include <thread>

#include "tests/support/run_program.hpp"
#include "tests/support/tls_files.hpp"

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

// The JSON redis-cli --json prints, flattened as flatten() does a hiredis
// reply. Bytes that are not UTF-8 pass through (redis-cli does not escape
// them), so no general JSON parser.
class CliJson {
 public:
  explicit CliJson(const std::string& text) : s_(text) {}

  bool parse(std::vector<std::string>& out) {
    skipSpace();
    if (!value(out)) return false;
    skipSpace();
    return i_ == s_.size();
  }

 private:
  void skipSpace() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\r' || s_[i_] == '\t'))
      ++i_;
  }

  bool literal(const char* word) {
    const std::size_t n = std::strlen(word);
    if (s_.compare(i_, n, word) != 0) return false;
    i_ += n;
    return true;
  }

  bool value(std::vector<std::string>& out) {
    skipSpace();
    if (i_ >= s_.size()) return false;
    const char c = s_[i_];
    if (c == '"') {
      std::string str;
      if (!string(str)) return false;
      out.push_back(std::move(str));
      return true;
    }
    if (c == '[' || c == '{') {
      const char close = c == '[' ? ']' : '}';
      ++i_;
      skipSpace();
      if (i_ < s_.size() && s_[i_] == close) {
        ++i_;
        return true;
      }
      for (;;) {
        if (!value(out)) return false;
        skipSpace();
        if (i_ >= s_.size()) return false;
        if (s_[i_] == ',' || (close == '}' && s_[i_] == ':')) {
          ++i_;
          continue;
        }
        if (s_[i_] != close) return false;
        ++i_;
        return true;
      }
    }
    if (literal("null")) {
      out.emplace_back();
      return true;
    }
    if (literal("true")) {
      out.emplace_back("1");
      return true;
    }
    if (literal("false")) {
      out.emplace_back("0");
      return true;
    }
    const std::size_t start = i_;
    while (i_ < s_.size() && std::strchr("+-.eE0123456789", s_[i_]) != nullptr) ++i_;
    if (i_ == start) return false;
    out.push_back(s_.substr(start, i_ - start));
    return true;
  }

  bool string(std::string& str) {
    ++i_;  // the opening quote
    while (i_ < s_.size()) {
      const char c = s_[i_++];
      if (c == '"') return true;
      if (c != '\\') {
        str.push_back(c);
        continue;
      }
      if (i_ >= s_.size()) return false;
      const char e = s_[i_++];
      switch (e) {
        case 'n':
          str.push_back('\n');
          break;
        case 'r':
          str.push_back('\r');
          break;
        case 't':
          str.push_back('\t');
          break;
        case 'b':
          str.push_back('\b');
          break;
        case 'f':
          str.push_back('\f');
          break;
        case 'u': {
          if (i_ + 4 > s_.size()) return false;
          const unsigned long cp = std::strtoul(s_.substr(i_, 4).c_str(), nullptr, 16);
          i_ += 4;
          if (cp < 0x80) {
            str.push_back(static_cast<char>(cp));
          } else if (cp < 0x800) {
            str.push_back(static_cast<char>(0xC0 | (cp >> 6)));
            str.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
          } else {
            str.push_back(static_cast<char>(0xE0 | (cp >> 12)));
            str.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
            str.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
          }
          break;
        }
        default:  // \" \\ \/
          str.push_back(e);
          break;
      }
    }
    return false;
  }

  const std::string& s_;
  std::size_t i_ = 0;
};

std::string trimmed(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' '))
    text.pop_back();
  return text;
}

std::string fileTail(const std::string& path, std::size_t bytes) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return {};
  std::stringstream ss;
  ss << f.rdbuf();
  std::string text = ss.str();
  if (text.size() > bytes) text = "..." + text.substr(text.size() - bytes);
  return trimmed(text);
}

}  // namespace

std::vector<std::string> redisCliArgs(const std::string& cli, std::uint16_t port,
                                      const TlsFiles* tls, const std::string& user,
                                      const std::string& password) {
  std::vector<std::string> args{cli};
  if (port != 0) args.insert(args.end(), {"-h", "127.0.0.1", "-p", std::to_string(port)});
  if (tls != nullptr) {
    args.insert(args.end(), {"--tls", "--cacert", tls->caCert(), "--cert", tls->clientCert(),
                             "--key", tls->clientKey()});
  }
  if (!password.empty()) {
    if (!user.empty()) args.insert(args.end(), {"--user", user});
    args.insert(args.end(), {"--pass", password});
  }
  args.emplace_back("--no-auth-warning");
  return args;
}

std::variant<std::unique_ptr<RedisServer>, std::string> RedisServer::start(std::string binary) {
  RedisServerOptions options;
  options.binary = std::move(binary);
  return start(std::move(options));
}

std::variant<std::unique_ptr<RedisServer>, std::string> RedisServer::start(
    RedisServerOptions options) {
  if (::access(options.binary.c_str(), X_OK) != 0) return options.binary + " is not installed";
  std::unique_ptr<RedisServer> s(new RedisServer());
  s->options_ = std::move(options);
  if (s->viaCli() && ::access(s->options_.cli_binary.c_str(), X_OK) != 0) {
    return s->options_.cli_binary + " is not installed";
  }
  std::string tmpl = (std::filesystem::temp_directory_path() / "fairsched-redis-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) return std::string("mkdtemp: ") + std::strerror(errno);
  s->dir_ = tmpl;
  s->config_path_ = s->dir_ + (s->options_.sentinel ? "/sentinel.conf" : "/redis.conf");
  if (s->options_.unix_socket) s->unix_path_ = s->dir_ + "/redis.sock";
  const int attempts = s->options_.port != 0 ? 1 : 5;
  for (int attempt = 0; attempt < attempts; ++attempt) {
    const auto port = s->options_.port != 0 ? std::optional(s->options_.port) : freePort();
    if (!port) return std::string("no free loopback port");
    s->port_ = *port;
    auto err = s->writeConfig();
    if (!err) err = s->spawn();
    if (!err) return s;
    if (attempt == attempts - 1) return *err;
  }
  return std::string("unreachable");
}

std::optional<std::string> RedisServer::writeConfig() const {
  const std::string port = std::to_string(port_);
  std::ofstream f(config_path_, std::ios::trunc);
  f << "bind 127.0.0.1\n"
    << "protected-mode no\n"
    << "daemonize no\n"
    << "dir " << dir_ << "\n"
    << "logfile " << logPath() << "\n"
    << "loglevel warning\n";
  if (!options_.sentinel) {
    // No persistence; a replica's first sync starts at once, not after the
    // 5 s a master waits by default for more replicas to share it.
    f << "save \"\"\nappendonly no\nrepl-diskless-sync-delay 0\n";
  }
  if (const TlsFiles* tls = options_.tls) {
    f << "port 0\n"
      << "tls-port " << port << "\n"
      << "tls-cert-file " << tls->serverCert() << "\n"
      << "tls-key-file " << tls->serverKey() << "\n"
      << "tls-ca-cert-file " << tls->caCert() << "\n"
      << "tls-auth-clients optional\n"
      << "tls-replication yes\n";
    if (!options_.sentinel) f << "tls-cluster yes\n";
  } else {
    f << "port " << port << "\n";
  }
  if (!unix_path_.empty()) f << "unixsocket " << unix_path_ << "\nunixsocketperm 700\n";
  for (const auto& line : options_.config_lines) f << line << "\n";
  f.close();
  if (!f) return "cannot write " + config_path_;
  return std::nullopt;
}

std::string RedisServer::logTail() const {
  std::string text = fileTail(dir_ + "/redis.out", 1000);
  const std::string log = fileTail(logPath(), 1000);
  if (!log.empty()) text += (text.empty() ? "" : "\n") + log;
  return text.empty() ? std::string("(no output)") : text;
}

std::optional<std::string> RedisServer::spawn() {
  const std::string port = std::to_string(port_);
  std::vector<std::string> args{options_.binary, config_path_};
  if (options_.sentinel) args.emplace_back("--sentinel");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // What it prints before its log file is open (config errors) goes here.
  const std::string out_path = dir_ + "/redis.out";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_APPEND,
                                   0600);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = -1;
  const int rc =
      posix_spawn(&pid, options_.binary.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return std::string("posix_spawn: ") + std::strerror(rc);
  pid_ = pid;
  const std::string our_pid = "process_id:" + std::to_string(pid_) + "\r\n";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return "redis-server exited at start (port " + port + " taken?): " + logTail();
    }
    if (auto pong = command({"PING"}); pong && !pong->empty() && pong->front() == "PONG") {
      // Another process's server on a port we lost the race for would
      // answer too.
      const auto info = command({"INFO", "server"});
      if (!info || info->empty() || info->front().find(our_pid) != std::string::npos) {
        return std::nullopt;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill();
  return "redis-server on port " + port + " did not answer PING within 10 s: " + logTail();
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
  if (!unix_path_.empty()) ::unlink(unix_path_.c_str());
  return spawn();
}

std::vector<std::string> RedisServer::cliArgs() const {
  return redisCliArgs(options_.cli_binary, port_, options_.tls, options_.admin_user,
                      options_.admin_password);
}

std::optional<std::vector<std::string>> RedisServer::command(const std::vector<std::string>& args,
                                                             std::string* error) const {
  if (viaCli()) {
    // RESP2 as JSON, so arrays keep their elements apart; -e makes an error
    // reply a failure.
    auto argv = cliArgs();
    argv.insert(argv.end(), {"-2", "--json", "-e"});
    argv.insert(argv.end(), args.begin(), args.end());
    const auto r = runProgram(argv, std::chrono::seconds(5));
    if (!r.ok()) {
      if (error != nullptr) *error = r.timed_out || r.err.empty() ? r.describe() : trimmed(r.err);
      return std::nullopt;
    }
    std::vector<std::string> out;
    // What redis-cli prints as it came (INFO, CLIENT LIST, CLUSTER NODES…)
    // is not JSON: one string.
    if (!CliJson(r.out).parse(out)) out.assign(1, r.out);
    return out;
  }
  timeval tv{1, 0};
  redisContext* c = redisConnectWithTimeout("127.0.0.1", port_, tv);
  if (c == nullptr) {
    if (error != nullptr) *error = "cannot allocate a hiredis context";
    return std::nullopt;
  }
  if (c->err != 0 || redisSetTimeout(c, tv) != REDIS_OK) {
    if (error != nullptr) *error = c->errstr;
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
  } else if (error != nullptr) {
    *error = r != nullptr ? std::string(r->str, r->len) : std::string(c->errstr);
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
