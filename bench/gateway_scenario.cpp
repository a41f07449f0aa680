// `gateway`: what fairsched-gateway adds to a request, against calling the
// same upstream directly, in one run.
//
// In this process: a native zero-cost OpenAI-compatible upstream (HTTP/1.1
// keep-alive, a thread per connection; JSON or SSE with 8 tokens and a
// usage chunk, no generation time; or the same SSE paced as an engine sends
// it, the header with the first event, then an event every 500 us) and a
// native load generator (a thread per caller, one keep-alive connection
// each, requests back to back). Forked: fairschedd (a worker endpoint, 256
// sequences) and fairsched-gateway (next to this binary) in front of the
// upstream. For each cell — concurrency 1, 16 and 64, JSON and streamed,
// and streamed paced at 16 — the same load runs direct to the upstream and
// through the gateway, one after the other; the whole grid runs three
// times: the gateway on one thread (the baseline) and on its default
// threads (one per core, at most 8) with the daemon's default busy
// polling, and on its default threads with busy_poll_us = 0. The aims read
// the default threads' cells.
//
// Per cell: requests/s, p50/p99 of the whole request (and of the first
// streamed chunk), the upstream connections the gateway opened, and the
// CPU the gateway and the daemon spent per request (/proc/PID/task/*/schedstat).
//
// Aims (on a 2-vCPU machine where gateway, daemon, upstream and generator
// share the cores): at concurrency 1 added p50 <= 0.1 ms and p99 <= 0.5 ms;
// gateway + daemon CPU per request <= 0.08 ms with busy_poll_us = 0; at 64
// the gateway's requests/s >= 0.25x direct; at 16 the added time to the
// first streamed token <= 0.5 ms; upstream connections <= 2x concurrency.
//
// Where nginx is installed, each cell also runs through nginx as a plain
// keep-alive reverse proxy to the same upstream (bench/nginx_proxy.hpp): the
// ceiling any gateway can reach here, with aims against it: at 16 and 64
// requests/s >= 0.5x nginx's, gateway + daemon CPU per request <= 2.5x
// nginx's, added p50 at 1 <= nginx's + 0.05 ms, streamed requests/s at 16
// >= 0.7x nginx's with the first chunk no later (on the paced stream: an
// upstream that writes a whole stream at once sends its first chunk with
// the rest, so there it only repeats the rate).
//
// JSON: {"scenario":"gateway","seconds_per_cell":S,"cells":[{"busy_poll_us":B,
// "gateway_threads":T,"concurrency":C,"stream":bool,"paced_us":P,"requests":M,
// "direct":{"req_per_s","p50_ms","p99_ms","first_chunk_p50_ms"?},"gateway":{...},
// "nginx":{...,"cpu_ms_per_request"}?,
// "upstream_connections":N,"gateway_cpu_ms_per_request","daemon_cpu_ms_per_request","errors"}],
// "aims":{name:{"value","aim","met"}}}.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench/nginx_proxy.hpp"
#include "bench/process_run.hpp"
#include "bench/property_scenarios.hpp"
#include "bench/scenario.hpp"
#include "bench/stats.hpp"
#include "tests/support/forked_daemon.hpp"

namespace fairsched::bench {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr const char* kKey = "sk-bench-0123456789";
// SHA-256 of kKey, as the gateway's [keys] table holds it.
constexpr const char* kKeyDigest =
    "ebadd1f77d7caaabf8b1160a2e3c3bdb38ff59c1452ebcbd8d7a31a53d3f9abb";
constexpr int kTokens = 8;
// A paced stream's events, one write each this far apart (an engine at
// 2,000 tokens/s).
constexpr int kPaceUs = 500;

// --- sockets -------------------------------------------------------------------

int listenLoopback(std::uint16_t& port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 1024) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ::close(fd);
    return -1;
  }
  port = ntohs(a.sin_port);
  return fd;
}

int connectLoopback(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

bool writeAll(int fd, std::string_view s) {
  while (!s.empty()) {
    const ssize_t n = ::send(fd, s.data(), s.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    s.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

// Buffered reads of one HTTP/1.1 connection.
class Reader {
 public:
  explicit Reader(int fd) : fd_(fd) {}

  // Up to and including "\r\n\r\n"; false at EOF or error.
  bool head(std::string& out) {
    for (;;) {
      if (const auto end = buf_.find("\r\n\r\n", pos_); end != std::string::npos) {
        out.assign(buf_, pos_, end + 4 - pos_);
        pos_ = end + 4;
        return true;
      }
      if (!fill()) return false;
    }
  }
  // Exactly `n` bytes (appended to `out`, when given).
  bool bytes(std::size_t n, std::string* out) {
    while (buf_.size() - pos_ < n) {
      if (!fill()) return false;
    }
    if (out != nullptr) out->append(buf_, pos_, n);
    pos_ += n;
    return true;
  }
  // One line without its "\r\n".
  bool line(std::string& out) {
    for (;;) {
      if (const auto end = buf_.find("\r\n", pos_); end != std::string::npos) {
        out.assign(buf_, pos_, end - pos_);
        pos_ = end + 2;
        return true;
      }
      if (!fill()) return false;
    }
  }

 private:
  bool fill() {
    if (pos_ > 0 && pos_ == buf_.size()) {
      buf_.clear();
      pos_ = 0;
    }
    char tmp[16384];
    const ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
    if (n <= 0) return false;
    buf_.append(tmp, static_cast<std::size_t>(n));
    return true;
  }

  int fd_;
  std::string buf_;
  std::size_t pos_ = 0;
};

// The value of header `name` (lower-case) in `head`, or "".
std::string headerValue(const std::string& head, std::string_view name) {
  std::string lower(head);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  const std::string key = "\r\n" + std::string(name) + ":";
  const auto at = lower.find(key);
  if (at == std::string::npos) return "";
  auto from = at + key.size();
  while (from < head.size() && head[from] == ' ') ++from;
  return head.substr(from, head.find("\r\n", from) - from);
}

// --- the native upstream -------------------------------------------------------

class NativeUpstream {
 public:
  bool start() {
    fd_ = listenLoopback(port_);
    if (fd_ < 0) return false;
    acceptor_ = std::thread([this] { acceptLoop(); });
    return true;
  }
  ~NativeUpstream() {
    stop_ = true;
    if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
    if (acceptor_.joinable()) acceptor_.join();
    {
      std::lock_guard lock(mu_);
      for (const int c : conns_) ::shutdown(c, SHUT_RDWR);
    }
    for (std::thread& t : threads_) t.join();
    if (fd_ >= 0) ::close(fd_);
  }
  std::uint16_t port() const { return port_; }
  std::uint64_t connections() const { return accepted_.load(); }

 private:
  void acceptLoop() {
    while (!stop_) {
      const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) {
        if (stop_ || errno == EINVAL) return;
        continue;
      }
      const int one = 1;
      ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      accepted_.fetch_add(1);
      std::lock_guard lock(mu_);
      conns_.push_back(c);
      threads_.emplace_back([this, c] { serve(c); });
    }
  }

  static void serve(int fd) {
    Reader r(fd);
    std::string head;
    std::string body;
    while (r.head(head)) {
      body.clear();
      const std::string len = headerValue(head, "content-length");
      const std::size_t n = std::strtoul(len.c_str(), nullptr, 10);  // 0 when absent or bad
      if (n > (1u << 20) || !r.bytes(n, &body)) break;
      if (head.starts_with("GET ")) {
        if (!writeAll(fd,
                      "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                      "Content-Length: 15\r\n\r\n{\"status\":\"ok\"}")) {
          break;
        }
        continue;
      }
      const bool stream = body.find("\"stream\":true") != std::string::npos;
      if (stream && body.find("\"model\":\"paced\"") != std::string::npos) {
        if (!writePaced(fd)) break;
        continue;
      }
      if (!writeAll(fd, stream ? sseAnswer() : jsonAnswer())) break;
    }
    ::close(fd);
  }

  static const std::string& jsonAnswer() {
    static const std::string a = [] {
      std::string text;
      for (int i = 0; i < kTokens; ++i) text += "t" + std::to_string(i) + " ";
      const std::string body =
          R"({"id":"cmpl-1","object":"text_completion","model":"m","choices":[{"index":0,"text":")" +
          text +
          R"(","finish_reason":"length"}],"usage":{"prompt_tokens":34,"completion_tokens":8,"total_tokens":42}})";
      return "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
             std::to_string(body.size()) + "\r\n\r\n" + body;
    }();
    return a;
  }

  // The stream's writes as an engine makes them: the header with the first
  // event, then one write per event, the usage, [DONE] and the last chunk
  // with the last. sseAnswer() is them in one.
  static const std::vector<std::string>& sseWrites() {
    static const std::vector<std::string> w = [] {
      std::vector<std::string> out(kTokens);
      out[0] =
          "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
          "Transfer-Encoding: chunked\r\n\r\n";
      const auto chunk = [](std::string& to, const std::string& data) {
        char size[16];
        std::snprintf(size, sizeof size, "%zx\r\n", data.size());
        to += size + data + "\r\n";
      };
      for (int i = 0; i < kTokens; ++i) {
        chunk(
            out[static_cast<std::size_t>(i)],
            R"(data: {"id":"cmpl-1","object":"text_completion.chunk","model":"m","choices":[{"index":0,"text":"t)" +
                std::to_string(i) + R"( ","finish_reason":null}]})" + "\n\n");
      }
      std::string& last = out.back();
      chunk(
          last,
          R"(data: {"id":"cmpl-1","object":"text_completion.chunk","model":"m","choices":[],"usage":{"prompt_tokens":34,"completion_tokens":8,"total_tokens":42}})"
          "\n\n");
      chunk(last, "data: [DONE]\n\n");
      last += "0\r\n\r\n";
      return out;
    }();
    return w;
  }

  static const std::string& sseAnswer() {
    static const std::string a = [] {
      std::string out;
      for (const std::string& w : sseWrites()) out += w;
      return out;
    }();
    return a;
  }

  // The stream paced: its writes kPaceUs apart.
  static bool writePaced(int fd) {
    const std::vector<std::string>& writes = sseWrites();
    for (std::size_t i = 0; i < writes.size(); ++i) {
      if (i > 0) std::this_thread::sleep_for(std::chrono::microseconds(kPaceUs));
      if (!writeAll(fd, writes[i])) return false;
    }
    return true;
  }

  int fd_ = -1;
  std::uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> accepted_{0};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<int> conns_;
  std::vector<std::thread> threads_;
};

// --- the load generator -------------------------------------------------------

struct LoadResult {
  std::vector<double> ms;        // whole requests
  std::vector<double> first_ms;  // first streamed chunk (stream only)
  std::uint64_t errors = 0;
  double seconds = 0;
};

// One request on `fd`: false when the connection or the answer broke.
bool oneRequest(int fd, Reader& r, const std::string& request, bool stream, double& first_ms,
                bool& ok, Clock::time_point t0) {
  if (!writeAll(fd, request)) return false;
  std::string head;
  if (!r.head(head)) return false;
  ok = head.starts_with("HTTP/1.1 200");
  const std::string len = headerValue(head, "content-length");
  if (!len.empty()) {
    first_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    return r.bytes(std::strtoul(len.c_str(), nullptr, 10), nullptr);
  }
  if (headerValue(head, "transfer-encoding") != "chunked") return false;
  bool first = true;
  std::string size_line;
  for (;;) {
    if (!r.line(size_line)) return false;
    char* end = nullptr;
    const std::size_t n = std::strtoul(size_line.c_str(), &end, 16);
    if (end == size_line.c_str()) return false;  // not a chunk size
    if (first && stream && n > 0) {
      first_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      first = false;
    }
    if (!r.bytes(n + 2, nullptr)) return false;  // the data and its "\r\n"
    if (n == 0) return true;
  }
}

// `paced`: the upstream spaces the stream's events (model "paced").
LoadResult runLoad(std::uint16_t port, bool through_gateway, int concurrency, bool stream,
                   bool paced, std::chrono::milliseconds duration) {
  const std::string body =
      std::string(paced ? R"({"model":"paced","prompt":")" : R"({"model":"m","prompt":")") +
      "benchmark prompt benchmark prompt benchmark prompt" + R"(","max_tokens":8,"stream":)" +
      (stream ? "true" : "false") + "}";
  std::string request = "POST /v1/completions HTTP/1.1\r\nHost: bench\r\n";
  if (through_gateway) request += std::string("Authorization: Bearer ") + kKey + "\r\n";
  request += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
             "\r\n\r\n" + body;
  LoadResult out;
  std::mutex mu;
  const auto start = Clock::now();
  const auto until = start + duration;
  std::vector<std::thread> callers;
  for (int i = 0; i < concurrency; ++i) {
    callers.emplace_back([&] {
      LoadResult mine;
      int fd = connectLoopback(port);
      Reader r(fd);
      while (fd >= 0 && Clock::now() < until) {
        const auto t0 = Clock::now();
        double first = 0;
        bool ok = false;
        if (!oneRequest(fd, r, request, stream, first, ok, t0)) {
          ++mine.errors;
          break;
        }
        mine.ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
        if (stream) mine.first_ms.push_back(first);
        if (!ok) ++mine.errors;
      }
      if (fd >= 0) ::close(fd);
      std::lock_guard lock(mu);
      out.ms.insert(out.ms.end(), mine.ms.begin(), mine.ms.end());
      out.first_ms.insert(out.first_ms.end(), mine.first_ms.begin(), mine.first_ms.end());
      out.errors += mine.errors;
    });
  }
  for (std::thread& t : callers) t.join();
  out.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::sort(out.ms.begin(), out.ms.end());
  std::sort(out.first_ms.begin(), out.first_ms.end());
  return out;
}

json loadJson(const LoadResult& r) {
  json j = {{"req_per_s", static_cast<double>(r.ms.size()) / r.seconds},
            {"p50_ms", percentileOfSorted(r.ms, 50)},
            {"p99_ms", percentileOfSorted(r.ms, 99)}};
  if (!r.first_ms.empty()) j["first_chunk_p50_ms"] = percentileOfSorted(r.first_ms, 50);
  return j;
}

// --- the gateway process ---------------------------------------------------------

std::string gatewayBinary() {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return (self.parent_path() / "fairsched-gateway").string();
}

class GatewayProcess {
 public:
  ~GatewayProcess() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  // Starts it on `config`; once /readyz answers 200 on `port`, nullopt.
  std::optional<std::string> start(const std::string& config, const std::string& log,
                                   std::uint16_t port) {
    const std::string bin = gatewayBinary();
    if (::access(bin.c_str(), X_OK) != 0) return bin + " is not built";
    pid_ = ::fork();
    if (pid_ < 0) return std::string("fork: ") + std::strerror(errno);
    if (pid_ == 0) {
      const int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (out >= 0) {
        ::dup2(out, 1);
        ::dup2(out, 2);
      }
      ::execl(bin.c_str(), bin.c_str(), "--config", config.c_str(), nullptr);
      ::_exit(127);
    }
    const auto until = Clock::now() + std::chrono::seconds(15);
    while (Clock::now() < until) {
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        return "fairsched-gateway exited at start (see " + log + ")";
      }
      const int fd = connectLoopback(port);
      if (fd >= 0) {
        Reader r(fd);
        std::string head;
        const bool ready = writeAll(fd, "GET /readyz HTTP/1.1\r\nHost: b\r\n\r\n") &&
                           r.head(head) && head.starts_with("HTTP/1.1 200");
        ::close(fd);
        if (ready) return std::nullopt;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return "fairsched-gateway not ready within 15 s (see " + log + ")";
  }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
};

std::uint16_t freePort() {
  std::uint16_t port = 0;
  const int fd = listenLoopback(port);
  if (fd >= 0) ::close(fd);
  return port;
}

std::string daemonConfigText(std::uint64_t busy_poll_us) {
  return "default_tier = \"bench\"\n[daemon]\nbusy_poll_us = " + std::to_string(busy_poll_us) +
         "\n[[tiers]]\nname = \"bench\"\n[endpoints.chat]\nexecutor = \"worker\"\nmax_batch_tokens "
         "= 65536\n"
         "max_output_tokens = 4096\nbatch_timeout_ms = 60000\n"
         "[endpoints.chat.worker]\nmax_sequences = 256\n"
         "[tenants.bench]\nqueue_limit = 100000\n";
}

std::string gatewayConfigText(const std::string& socket, std::uint16_t listen,
                              std::uint16_t upstream, unsigned threads) {
  return "[gateway]\nlisten = \"127.0.0.1:" + std::to_string(listen) + "\"\nsocket = \"" + socket +
         "\"\nendpoint = \"chat\"\nlog_level = \"warn\"\ndaemon_config = \"\"\nthreads = " +
         std::to_string(threads) +
         "\n"
         "[upstream]\nurl = \"http://127.0.0.1:" +
         std::to_string(upstream) +
         "\"\nmax_sequences = 256\nmax_tokens = 100000000\n"
         "[keys.bench]\nsha256 = \"" +
         kKeyDigest + "\"\ntenant = \"bench\"\n";
}

struct Cell {
  int concurrency;
  bool stream;
  bool paced = false;  // the upstream's events kPaceUs apart
};
constexpr Cell kCells[] = {{1, false}, {16, false}, {64, false},     {1, true},
                           {16, true}, {64, true},  {16, true, true}};

// One grid with the daemon's busy_poll_us and the gateway's threads set so;
// its cells appended to `cells`. The upstream starts after the daemon is
// forked, so that the fork copies no thread.
std::optional<std::string> runGrid(std::uint64_t busy_poll_us, unsigned threads,
                                   std::chrono::milliseconds per_cell, json& cells,
                                   std::string& table) {
  const TempDir dir("fairsched-bench-gateway");
  auto parsed = config::parseConfig(daemonConfigText(busy_poll_us), "<gateway>");
  if (auto* err = parsed.errorOrNull()) return err->toString();
  config::Config cfg = parsed.value();
  prepareBenchConfig(cfg, dir.path());
  auto daemon = daemon::ForkedDaemon::start(cfg);
  if (!daemon) return "fairschedd: " + daemon.error().toString();
  GatewayProcess gateway;  // killed after the upstream's threads end, below
  NativeUpstream upstream;
  if (!upstream.start()) return "cannot listen on loopback";
  const std::uint16_t port = freePort();
  const std::string gw_config = dir.path() + "/gateway.toml";
  std::ofstream(gw_config) << gatewayConfigText(cfg.daemon.socket, port, upstream.port(), threads);
  if (auto err = gateway.start(gw_config, dir.path() + "/gateway.log", port)) return err;
  // The ceiling: nginx as a plain keep-alive proxy to the same upstream.
  NginxProxy nginx;
  const std::uint16_t nginx_port = NginxProxy::available() ? freePort() : 0;
  if (nginx_port != 0) {
    if (auto err = nginx.start(dir.path(), nginx_port, upstream.port())) return "nginx: " + *err;
  }

  for (const Cell& c : kCells) {
    // Warm both paths (connections, the pool, caches), then measure.
    runLoad(upstream.port(), false, c.concurrency, c.stream, c.paced, per_cell / 5);
    runLoad(port, true, c.concurrency, c.stream, c.paced, per_cell / 5);
    const LoadResult direct =
        runLoad(upstream.port(), false, c.concurrency, c.stream, c.paced, per_cell);
    std::optional<json> via_nginx;
    if (nginx_port != 0) {
      runLoad(nginx_port, false, c.concurrency, c.stream, c.paced, per_cell / 5);
      const std::uint64_t ng_cpu = nginx.cpuNs();
      const LoadResult proxied =
          runLoad(nginx_port, false, c.concurrency, c.stream, c.paced, per_cell);
      via_nginx = loadJson(proxied);
      (*via_nginx)["cpu_ms_per_request"] =
          static_cast<double>(nginx.cpuNs() - ng_cpu) / 1e6 /
          std::max<double>(1, static_cast<double>(proxied.ms.size()));
      if (proxied.errors > 0) (*via_nginx)["errors"] = proxied.errors;
    }
    const std::uint64_t conns = upstream.connections();
    const auto gw_cpu = cpuTimeNs(gateway.pid()).value_or(0);
    const auto dm_cpu = cpuTimeNs(daemon.value().pid()).value_or(0);
    const LoadResult through = runLoad(port, true, c.concurrency, c.stream, c.paced, per_cell);
    const double n = std::max<double>(1, static_cast<double>(through.ms.size()));
    const double gw_ms =
        static_cast<double>(cpuTimeNs(gateway.pid()).value_or(0) - gw_cpu) / 1e6 / n;
    const double dm_ms =
        static_cast<double>(cpuTimeNs(daemon.value().pid()).value_or(0) - dm_cpu) / 1e6 / n;
    json cell = {{"busy_poll_us", busy_poll_us},
                 {"gateway_threads", threads},
                 {"concurrency", c.concurrency},
                 {"stream", c.stream},
                 {"paced_us", c.paced ? kPaceUs : 0},
                 {"requests", through.ms.size()},
                 {"direct", loadJson(direct)},
                 {"gateway", loadJson(through)},
                 {"upstream_connections", upstream.connections() - conns},
                 {"gateway_cpu_ms_per_request", gw_ms},
                 {"daemon_cpu_ms_per_request", dm_ms},
                 {"errors", direct.errors + through.errors}};
    if (via_nginx) cell["nginx"] = std::move(*via_nginx);
    const double nginx_rps = cell.contains("nginx") ? cell["nginx"]["req_per_s"].get<double>() : 0;
    char line[320];
    std::snprintf(
        line, sizeof line,
        "%6llu %3u %4d %-6s %9.0f %9.0f %9.0f %6.2f %6.2f %8.3f %8.3f %8.3f %8.3f %7.3f %7.3f "
        "%5llu\n",
        static_cast<unsigned long long>(busy_poll_us), threads, c.concurrency,
        c.paced    ? "sse-p"
        : c.stream ? "sse"
                   : "json",
        cell["direct"]["req_per_s"].get<double>(), nginx_rps,
        cell["gateway"]["req_per_s"].get<double>(),
        cell["gateway"]["req_per_s"].get<double>() /
            std::max(1.0, cell["direct"]["req_per_s"].get<double>()),
        nginx_rps > 0 ? cell["gateway"]["req_per_s"].get<double>() / nginx_rps : 0.0,
        cell["direct"]["p50_ms"].get<double>(), cell["gateway"]["p50_ms"].get<double>(),
        cell["direct"]["p99_ms"].get<double>(), cell["gateway"]["p99_ms"].get<double>(), gw_ms,
        dm_ms, static_cast<unsigned long long>(cell["upstream_connections"]));
    table += line;
    cells.push_back(std::move(cell));
  }
  return std::nullopt;
}

const json* findCell(const json& cells, std::uint64_t busy_poll_us, unsigned threads,
                     int concurrency, bool stream, bool paced = false) {
  for (const json& c : cells) {
    if (c["busy_poll_us"] == busy_poll_us && c["gateway_threads"] == threads &&
        c["concurrency"] == concurrency && c["stream"] == stream && (c["paced_us"] != 0) == paced) {
      return &c;
    }
  }
  return nullptr;
}

}  // namespace

ScenarioResult runGatewayScenario(const ScenarioOptions& opts) {
  const std::chrono::milliseconds per_cell(opts.quick ? 300 : 1500);
  const std::uint64_t default_poll = config::DaemonConfig().busy_poll_us;
  // The gateway's default: a thread per core, at most 8 (gateway_server.hpp).
  const unsigned threads = std::clamp(std::thread::hardware_concurrency(), 1u, 8u);
  json cells = json::array();
  std::string table =
      "  poll thr conc  kind   direct/s   nginx/s gateway/s   g/d    g/n  d p50ms  g p50ms  d "
      "p99ms  g p99ms  gw cpu  dm cpu conns\n";
  // One thread (the baseline), then the default threads with the daemon's
  // busy polling on and off.
  const std::pair<std::uint64_t, unsigned> grids[] = {
      {default_poll, 1}, {default_poll, threads}, {0, threads}};
  for (const auto& [poll, n] : grids) {
    if (threads == 1 && n == 1 && poll == default_poll) continue;  // the same as the next
    if (auto err = runGrid(poll, n, per_cell, cells, table)) return ScenarioError{*err};
  }

  json aims = json::object();
  const auto aim = [&](const char* name, double value, double target, bool at_most) {
    const bool met = at_most ? value <= target : value >= target;
    aims[name] = {{"value", value}, {"aim", target}, {"met", met}};
    char line[200];
    std::snprintf(line, sizeof line, "%-44s %9.3f %s %-7g %s\n", name, value,
                  at_most ? "<=" : ">=", target, met ? "MET" : "MISS");
    table += line;
  };
  table += "\n";
  const json* c1 = findCell(cells, default_poll, threads, 1, false);
  const json* c64 = findCell(cells, default_poll, threads, 64, false);
  const json* s16 = findCell(cells, default_poll, threads, 16, true);
  const json* idle16 = findCell(cells, 0, threads, 16, false);
  if (c1 && c64 && s16 && idle16) {
    aim("added p50 at concurrency 1 (ms)",
        (*c1)["gateway"]["p50_ms"].get<double>() - (*c1)["direct"]["p50_ms"].get<double>(), 0.1,
        true);
    aim("added p99 at concurrency 1 (ms)",
        (*c1)["gateway"]["p99_ms"].get<double>() - (*c1)["direct"]["p99_ms"].get<double>(), 0.5,
        true);
    aim("gateway+daemon CPU/request, busy_poll_us 0 (ms)",
        (*idle16)["gateway_cpu_ms_per_request"].get<double>() +
            (*idle16)["daemon_cpu_ms_per_request"].get<double>(),
        0.08, true);
    aim("gateway / direct requests/s at 64",
        (*c64)["gateway"]["req_per_s"].get<double>() /
            std::max(1.0, (*c64)["direct"]["req_per_s"].get<double>()),
        0.25, false);
    aim("added first streamed chunk at 16 (ms)",
        (*s16)["gateway"]["first_chunk_p50_ms"].get<double>() -
            (*s16)["direct"]["first_chunk_p50_ms"].get<double>(),
        0.5, true);
    double worst = 0;
    for (const json& c : cells) {
      worst =
          std::max(worst, c["upstream_connections"].get<double>() / c["concurrency"].get<double>());
    }
    aim("upstream connections / concurrency (worst)", worst, 2.0, true);
  }
  // Against the ceiling measured beside it: nginx as a plain proxy.
  const json* c16 = findCell(cells, default_poll, threads, 16, false);
  const json* p16 = findCell(cells, default_poll, threads, 16, true, true);
  if (c1 && c16 && c64 && s16 && p16 && idle16 && c16->contains("nginx")) {
    const auto ratio = [](const json& c, const char* what) {
      return c["gateway"][what].get<double>() / std::max(1e-9, c["nginx"][what].get<double>());
    };
    aim("gateway / nginx requests/s at 16", ratio(*c16, "req_per_s"), 0.5, false);
    aim("gateway / nginx requests/s at 64", ratio(*c64, "req_per_s"), 0.5, false);
    aim("(gateway+daemon) / nginx CPU per request at 16",
        ((*c16)["gateway_cpu_ms_per_request"].get<double>() +
         (*c16)["daemon_cpu_ms_per_request"].get<double>()) /
            std::max(1e-9, (*c16)["nginx"]["cpu_ms_per_request"].get<double>()),
        2.5, true);
    aim("added p50 at 1 minus nginx's added p50 (ms)",
        (*c1)["gateway"]["p50_ms"].get<double>() - (*c1)["nginx"]["p50_ms"].get<double>(), 0.05,
        true);
    aim("gateway / nginx streamed requests/s at 16", ratio(*s16, "req_per_s"), 0.7, false);
    // Where the upstream writes a whole stream at once its first chunk
    // comes with the rest, so the first chunk is read where it paces it.
    aim("first chunk at 16, paced: gateway minus nginx (ms)",
        (*p16)["gateway"]["first_chunk_p50_ms"].get<double>() -
            (*p16)["nginx"]["first_chunk_p50_ms"].get<double>(),
        0.0, true);
  }
  std::uint64_t errors = 0;
  for (const json& c : cells) errors += c["errors"].get<std::uint64_t>();
  json report = {{"scenario", "gateway"},
                 {"seconds_per_cell", static_cast<double>(per_cell.count()) / 1000.0},
                 {"cells", cells},
                 {"aims", aims}};
  if (errors > 0) {
    return ScenarioError{std::to_string(errors) + " requests failed\n" + table};
  }
  return ScenarioReport{std::move(report), std::move(table)};
}

}  // namespace fairsched::bench
