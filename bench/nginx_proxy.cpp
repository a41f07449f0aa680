#include "bench/nginx_proxy.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "bench/process_run.hpp"

namespace fairsched::bench {
namespace {

bool accepts(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

std::string configText(const std::string& dir, std::uint16_t port, std::uint16_t upstream) {
  std::ostringstream c;
  c << "daemon off;\nmaster_process on;\nworker_processes 1;\npid " << dir << "/nginx.pid;\n"
    << "error_log " << dir << "/nginx-error.log warn;\n"
    << "events { worker_connections 4096; }\n"
    << "http {\n"
    << "  access_log off;\n"
    << "  client_body_temp_path " << dir << "/nginx-body;\n"
    << "  proxy_temp_path " << dir << "/nginx-proxy;\n"
    << "  fastcgi_temp_path " << dir << "/nginx-fastcgi;\n"
    << "  uwsgi_temp_path " << dir << "/nginx-uwsgi;\n"
    << "  scgi_temp_path " << dir << "/nginx-scgi;\n"
    << "  keepalive_requests 1000000;\n"
    << "  upstream engine { server 127.0.0.1:" << upstream
    << "; keepalive 256; keepalive_requests 1000000; }\n"
    << "  server {\n"
    << "    listen 127.0.0.1:" << port << ";\n"
    << "    location / {\n"
    << "      proxy_pass http://engine;\n"
    << "      proxy_http_version 1.1;\n"
    << "      proxy_set_header Connection \"\";\n"
    << "      proxy_buffering off;\n"
    << "    }\n"
    << "  }\n"
    << "}\n";
  return c.str();
}

}  // namespace

bool NginxProxy::available() {
  return ::access(kBinary, X_OK) == 0;
}

std::optional<std::string> NginxProxy::start(const std::string& dir, std::uint16_t port,
                                             std::uint16_t upstream) {
  const std::string config = dir + "/nginx.conf";
  std::ofstream(config) << configText(dir, port, upstream);
  const std::string log = dir + "/nginx.out";
  pid_ = ::fork();
  if (pid_ < 0) return std::string("fork: ") + std::strerror(errno);
  if (pid_ == 0) {
    const int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out >= 0) {
      ::dup2(out, 1);
      ::dup2(out, 2);
    }
    ::execl(kBinary, kBinary, "-p", dir.c_str(), "-c", config.c_str(), nullptr);
    ::_exit(127);
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  while (std::chrono::steady_clock::now() < until) {
    if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
      pid_ = -1;
      return "nginx exited at start (see " + log + " and " + dir + "/nginx-error.log)";
    }
    if (accepts(port)) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return "nginx not accepting within 15 s (see " + log + ")";
}

std::uint64_t NginxProxy::cpuNs() const {
  if (pid_ <= 0) return 0;
  std::uint64_t sum = cpuTimeNs(pid_).value_or(0);
  // The workers are the master's children.
  std::ifstream children("/proc/" + std::to_string(pid_) + "/task/" + std::to_string(pid_) +
                         "/children");
  pid_t child = 0;
  while (children >> child) sum += cpuTimeNs(child).value_or(0);
  return sum;
}

NginxProxy::~NginxProxy() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGQUIT);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < until) {
    if (::waitpid(pid_, nullptr, WNOHANG) == pid_) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
}

}  // namespace fairsched::bench
