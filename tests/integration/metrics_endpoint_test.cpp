// The Prometheus endpoint of a real fairschedd: a client submits requests
// for two tenants (one over its rate limit), and a plain HTTP GET of
// /metrics reports what was sent, by tenant, endpoint, reason and status.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "daemon/config/config.hpp"
#include "fairsched/client.hpp"
#include "tests/support/daemon_config.hpp"
#include "tests/support/forked_daemon.hpp"
#include "tests/support/temp_dir_test.hpp"

namespace fairsched {
namespace {

using namespace std::chrono_literals;

// A port that was free a moment ago (the kernel does not hand it out again
// at once).
int freePort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  close(fd);
  return ntohs(a.sin_port);
}

// GET `path` over plain HTTP/1.0; the body, or "" with `error` set.
std::string httpGet(int port, const std::string& path, std::string& error) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    error = "connect: " + std::string(std::strerror(errno));
    if (fd >= 0) close(fd);
    return "";
  }
  const std::string req = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  if (send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) {
    error = "send failed";
    close(fd);
    return "";
  }
  std::string response;
  char buf[16384];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    response.append(buf, static_cast<std::size_t>(n));
  }
  close(fd);
  const std::size_t body = response.find("\r\n\r\n");
  if (response.rfind("HTTP/1.1 200", 0) != 0 && response.rfind("HTTP/1.0 200", 0) != 0) {
    error = "response: " + response.substr(0, response.find("\r\n"));
    return "";
  }
  if (body == std::string::npos) {
    error = "no end of headers";
    return "";
  }
  return response.substr(body + 4);
}

// Text exposition format → "name{k=v,...}" (labels sorted) → value.
std::map<std::string, double> parseExposition(const std::string& text) {
  std::map<std::string, double> out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.empty() || line[0] == '#') continue;
    const std::size_t space = line.rfind(' ');
    if (space == std::string::npos) continue;
    std::string series = line.substr(0, space);
    const double value = std::stod(line.substr(space + 1));
    std::string name = series;
    std::map<std::string, std::string> labels;
    if (const std::size_t brace = series.find('{'); brace != std::string::npos) {
      name = series.substr(0, brace);
      std::size_t p = brace + 1;
      while (p < series.size() && series[p] != '}') {
        const std::size_t eq = series.find('=', p);
        const std::size_t close = series.find('"', eq + 2);
        labels[series.substr(p, eq - p)] = series.substr(eq + 2, close - eq - 2);
        p = close + 1;
        if (p < series.size() && series[p] == ',') ++p;
      }
    }
    std::string key = name + "{";
    for (const auto& [k, v] : labels) key += k + "=" + v + ",";
    out[key + "}"] = value;
  }
  return out;
}

double metric(const std::map<std::string, double>& m, const std::string& key) {
  const auto it = m.find(key);
  return it == m.end() ? -1 : it->second;
}

config::Config makeConfig(const std::string& socket, int port) {
  testing::DaemonConfigText c;
  c.socket = socket;
  c.before_tiers = "[metrics]\nlisten = \"127.0.0.1:" + std::to_string(port) + "\"\n";
  c.body =
      "[endpoints.chat]\nmax_batch_requests = 8\nmax_wait_us = 100\nmax_output_tokens = 16\n"
      "[endpoints.chat.cpu]\nper_batch_us = 10.0\nper_token_us = 0.0\n"
      "[tenants.acme]\ntier = \"paid\"\n[tenants.acme.limits]\nchat = [\"unlimited\"]\n"
      "[tenants.capped]\ntier = \"paid\"\n[tenants.capped.limits]\n"
      "chat = [\"5 requests/minute\"]\n";
  c.client_endpoints = "";
  return c.parsed();
}

class MetricsEndpoint : public testing::TempDirTest {
 protected:
  MetricsEndpoint() : TempDirTest("fairsched-metrics") {}
};

// Submits `n` requests for `tenant` and waits for every completion; returns
// the count per status.
std::map<Status, int> submitAndWait(Client& client, const std::string& tenant, int n) {
  std::map<Status, int> by_status;
  auto t = client.openTenant(tenant);
  EXPECT_TRUE(t) << t.error().message;
  if (!t) return by_status;
  const std::vector<std::uint32_t> prompt = {1, 2, 3, 4};
  int submitted = 0;
  int completed = 0;
  std::vector<Completion> done;
  const auto until = std::chrono::steady_clock::now() + 30s;
  while (completed < n && std::chrono::steady_clock::now() < until) {
    while (submitted < n) {
      SubmitRequest r;
      r.tenant = *t;
      r.endpoint = "chat";
      r.prompt = prompt;
      r.max_output_tokens = 2;
      r.tag = static_cast<std::uint64_t>(submitted);
      auto id = client.submit(r);
      if (!id) {
        EXPECT_EQ(id.error().code, ErrorCode::kRingFull) << id.error().message;
        break;
      }
      ++submitted;
    }
    (void)client.wait(20ms);
    done.clear();
    client.poll(done);
    for (const Completion& c : done) ++by_status[c.status];
    completed += static_cast<int>(done.size());
  }
  EXPECT_EQ(completed, n) << tenant << ": not every request completed";
  return by_status;
}

TEST_F(MetricsEndpoint, ScrapeCountsWhatTheClientSent) {
  const int port = freePort();
  ASSERT_GT(port, 0);
  const std::string socket = dir_ + "/fairsched.sock";
  auto started = daemon::ForkedDaemon::start(makeConfig(socket, port));
  ASSERT_TRUE(started.ok()) << started.error().message;
  auto& d = started.value();

  ClientOptions o;
  o.socket_path = socket;
  o.client_name = "metrics-it";
  auto client = Client::connect(o);
  ASSERT_TRUE(client) << client.error().message;
  constexpr int kAcme = 60;
  constexpr int kCapped = 12;
  const auto acme = submitAndWait(*client, "acme", kAcme);
  const auto capped = submitAndWait(*client, "capped", kCapped);
  EXPECT_EQ(acme.at(Status::kOk), kAcme);
  ASSERT_EQ(capped.at(Status::kOk), 5);
  ASSERT_EQ(capped.at(Status::kRateLimited), kCapped - 5);

  // The daemon publishes within a second of going idle.
  std::map<std::string, double> m;
  std::string error;
  const auto until = std::chrono::steady_clock::now() + 10s;
  for (;;) {
    error.clear();
    const std::string body = httpGet(port, "/metrics", error);
    if (error.empty()) m = parseExposition(body);
    if (metric(m, "fairsched_requests_completed_total{endpoint=chat,status=OK,tenant=capped,}") ==
            5 &&
        metric(m, "fairsched_requests_completed_total{endpoint=chat,status=OK,tenant=acme,}") ==
            kAcme) {
      break;
    }
    if (std::chrono::steady_clock::now() > until) break;
    std::this_thread::sleep_for(100ms);
  }
  ASSERT_TRUE(error.empty()) << error;
  EXPECT_EQ(metric(m, "fairsched_requests_submitted_total{endpoint=chat,tenant=acme,}"), kAcme);
  EXPECT_EQ(metric(m, "fairsched_requests_admitted_total{endpoint=chat,tenant=acme,}"), kAcme);
  EXPECT_EQ(metric(m, "fairsched_requests_completed_total{endpoint=chat,status=OK,tenant=acme,}"),
            kAcme);
  EXPECT_EQ(metric(m,
                   "fairsched_requests_rejected_total{endpoint=chat,reason=RATE_LIMITED,"
                   "tenant=acme,}"),
            0);
  EXPECT_EQ(metric(m, "fairsched_tokens_served_total{endpoint=chat,tenant=acme,}"),
            kAcme * (4 + 2));
  EXPECT_EQ(metric(m, "fairsched_end_to_end_seconds_count{endpoint=chat,tenant=acme,}"), kAcme);
  EXPECT_EQ(metric(m, "fairsched_queue_wait_seconds_bucket{endpoint=chat,le=+Inf,tenant=acme,}"),
            kAcme);

  EXPECT_EQ(metric(m, "fairsched_requests_submitted_total{endpoint=chat,tenant=capped,}"), kCapped);
  EXPECT_EQ(metric(m, "fairsched_requests_admitted_total{endpoint=chat,tenant=capped,}"), 5);
  EXPECT_EQ(metric(m,
                   "fairsched_requests_rejected_total{endpoint=chat,reason=RATE_LIMITED,"
                   "tenant=capped,}"),
            kCapped - 5);
  EXPECT_EQ(metric(m, "fairsched_tenant_queue_depth{endpoint=chat,tenant=acme,}"), 0);
  EXPECT_EQ(metric(m, "fairsched_tenant_clients{tenant=acme,}"), 1);
  EXPECT_EQ(metric(m, "fairsched_clients{}"), 1);
  EXPECT_GE(metric(m, "fairsched_connections_accepted_total{}"), 1);  // + the readiness probe
  EXPECT_GE(metric(m, "fairsched_batches_total{}"), 1);
  EXPECT_GE(metric(m, "fairsched_loop_iterations_total{}"), 1);
  EXPECT_EQ(metric(m, "fairsched_bad_slots_total{}"), 0);
  bool build_info = false;
  for (const auto& [k, v] : m) build_info = build_info || k.rfind("fairsched_build_info{", 0) == 0;
  EXPECT_TRUE(build_info);

  std::string not_found_error;
  (void)httpGet(port, "/nothing", not_found_error);
  EXPECT_FALSE(not_found_error.empty());

  EXPECT_EQ(d.terminate(), 0);
}

TEST_F(MetricsEndpoint, DaemonRefusesToStartWhenThePortIsTaken) {
  const int taken = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(taken, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ASSERT_EQ(bind(taken, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(listen(taken, 1), 0);
  ASSERT_EQ(getsockname(taken, reinterpret_cast<sockaddr*>(&a), &len), 0);
  auto started =
      daemon::ForkedDaemon::start(makeConfig(dir_ + "/fairsched.sock", ntohs(a.sin_port)), 3s);
  EXPECT_FALSE(started.ok());
  close(taken);
}

}  // namespace
}  // namespace fairsched
