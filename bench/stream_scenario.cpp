#include "bench/stream_scenario.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include "bench/raw_pingpong.hpp"
#include "bench/stats.hpp"
#include "fairsched/client.hpp"
#include "fairsched/worker.hpp"
#include "shm/worker_protocol.hpp"
#include "tests/support/daemon_config.hpp"
#include "tests/support/forked_daemon.hpp"
#include "tests/support/process_group.hpp"
#include "tests/support/temp_dir.hpp"
#include "worker/reference_engine.hpp"

namespace fairsched::bench {

using testing::ProcessGroup;

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr std::uint32_t kSequences = 64;  // the worker's, and the client's requests in flight
constexpr std::size_t kMaxSamples = 200'000;

struct Plan {
  std::uint32_t requests = 0;
  std::uint32_t output_tokens = 0;
  bool sleeping = false;  // the client blocks on its descriptor instead of spinning
  std::uint32_t in_flight = kSequences;
};

// What a client process measured; sent to the parent through a pipe.
struct ClientResult {
  std::uint64_t tokens = 0;
  std::uint64_t mismatched = 0;
  std::uint64_t lost = 0;    // tokens of OK requests that never arrived
  std::uint64_t failed = 0;  // requests that did not end OK
  double seconds = 0;
  std::uint32_t samples = 0;  // latency samples (ns) that follow
};

fairsched::Result<config::Config, std::string> streamConfig(const std::string& dir) {
  testing::DaemonConfigText c;  // the socket and the client rule are set below
  c.socket_mode = "";
  c.tiers = {"bench"};
  c.body =
      "[endpoints.chat]\nexecutor = \"worker\"\nmax_batch_tokens = 65536\n"
      "max_output_tokens = 8192\nbatch_timeout_ms = 0\n"
      "[endpoints.chat.worker]\nmax_sequences = 256\nclient_buffer_chunks = 65536\n"
      "[tenants.bench]\ntier = \"bench\"\nqueue_limit = 100000\n";
  c.client = false;
  auto parsed = c.parse("<stream>");
  if (auto* err = parsed.errorOrNull()) return *err;
  config::Config cfg = std::move(parsed).value();
  cfg.daemon.socket = dir + "/fairsched.sock";
  cfg.daemon.state_dir.clear();  // every run starts clean
  config::ClientRule rule;       // this uid: the client and the worker
  rule.name = "fairsched-bench";
  rule.uids = {static_cast<std::uint32_t>(getuid())};
  rule.tenants = {"*"};
  rule.endpoints = {"*"};
  rule.workers = {"chat"};
  cfg.clients.insert(cfg.clients.begin(), rule);
  return cfg;
}

bool writeAll(int fd, const void* p, std::size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = write(fd, c, n);
    if (w <= 0) return false;
    c += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

bool readAll(int fd, void* p, std::size_t n) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t r = read(fd, c, n);
    if (r <= 0) return false;
    c += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

// The client process: keeps kSequences streamed requests in flight until
// plan.requests are done, checking every token.
int runClient(const std::string& socket, const Plan& plan, int out_fd) {
  ClientOptions o;
  o.socket_path = socket;
  o.client_name = "stream";
  auto client = Client::connect(o);
  if (!client) return 1;
  auto tenant = client->openTenant("bench");
  if (!tenant) return 1;
  const std::string params = "output_tokens=" + std::to_string(plan.output_tokens);
  struct Live {
    std::vector<std::uint32_t> prompt;
    std::uint32_t got = 0;
  };
  std::unordered_map<RequestId, Live> live;
  std::vector<double> samples;
  samples.reserve(kMaxSamples);
  ClientResult res;
  std::uint32_t submitted = 0, finished = 0;
  std::uint64_t chunks = 0;
  std::vector<Completion> got;
  const auto t0 = Clock::now();
  while (finished < plan.requests) {
    while (submitted < plan.requests && live.size() < plan.in_flight) {
      Live l;
      l.prompt = {submitted * 7u + 1, submitted * 13u + 5, 42, submitted};
      SubmitRequest r;
      r.tenant = *tenant;
      r.endpoint = "chat";
      r.prompt = l.prompt;
      r.max_output_tokens = plan.output_tokens;
      r.stream = true;
      r.params = std::as_bytes(std::span<const char>(params.data(), params.size()));
      auto id = client->submit(r);
      if (!id) break;
      live.emplace(*id, std::move(l));
      ++submitted;
    }
    got.clear();
    if (client->poll(got) == 0) {
      if (plan.sleeping) {
        auto block = client->prepareToBlock();
        if (block && *block) (void)client->wait(1s);
      }
      continue;
    }
    const auto now = Clock::now();
    for (const Completion& c : got) {
      auto it = live.find(c.request_id);
      if (it == live.end()) continue;
      Live& l = it->second;
      if (c.partial) {
        for (std::size_t i = 0; i < c.tokens.size(); ++i) {
          if (c.tokens[i] !=
              shm::referenceToken(l.prompt, c.first_token + static_cast<std::uint32_t>(i))) {
            ++res.mismatched;
          }
        }
        if (c.first_token != l.got) ++res.mismatched;  // a gap or a repeat
        l.got += static_cast<std::uint32_t>(c.tokens.size());
        res.tokens += c.tokens.size();
        // Every chunk until the buffer is full, then one in 16.
        if (samples.size() < kMaxSamples &&
            (samples.size() < kMaxSamples / 2 || ++chunks % 16 == 0)) {
          samples.push_back(static_cast<double>((now - c.emitted).count()));
        }
        continue;
      }
      if (c.status != Status::kOk) {
        ++res.failed;
      } else if (c.output_tokens > l.got) {
        res.lost += c.output_tokens - l.got;
      }
      live.erase(it);
      ++finished;
    }
  }
  res.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  res.samples = static_cast<std::uint32_t>(samples.size());
  if (!writeAll(out_fd, &res, sizeof res)) return 1;
  if (!writeAll(out_fd, samples.data(), samples.size() * sizeof(double))) return 1;
  return 0;
}

struct Measured {
  ClientResult result;
  std::vector<double> samples;
};

std::variant<Measured, std::string> measure(const std::string& socket, const Plan& plan) {
  int fds[2];
  if (pipe(fds) != 0) return std::string("pipe failed");
  ProcessGroup group;
  const pid_t child = group.spawn([&] {
    close(fds[0]);
    pinTo(0);
    return runClient(socket, plan, fds[1]);
  });
  if (child < 0) return std::string("fork failed");
  close(fds[1]);
  Measured m;
  const bool ok = readAll(fds[0], &m.result, sizeof m.result);
  if (ok) {
    m.samples.resize(m.result.samples);
    readAll(fds[0], m.samples.data(), m.samples.size() * sizeof(double));
  }
  close(fds[0]);
  // It has sent everything (or failed): what is left is its exit.
  const bool exited_ok = group.wait(child, ProcessGroup::in(30s)) == 0;
  if (!ok || !exited_ok) return std::string("the client process failed");
  return m;
}

// The q-quantile (0..1) of `ns` in microseconds.
double percentileUs(const std::vector<double>& ns, double q) {
  return percentile(ns, q * 100) / 1000.0;
}

nlohmann::json latencyJson(const std::vector<double>& ns) {
  return {{"p50_us", percentileUs(ns, 0.5)},
          {"p99_us", percentileUs(ns, 0.99)},
          {"samples", ns.size()}};
}

// A reference worker process on `cpu` with `model` in `group`; SIGTERM stops it.
pid_t startWorker(ProcessGroup& group, const std::string& socket,
                  const reference::EngineModel& model, int cpu) {
  return group.spawn([&] {
    pinTo(cpu);
    WorkerOptions wo;
    wo.socket_path = socket;
    wo.endpoint = "chat";
    wo.worker_name = "reference";
    auto w = Worker::connect(wo);
    if (!w) return 1;
    static std::atomic<bool> stop{false};
    signal(SIGTERM, [](int) { stop.store(true); });
    reference::ReferenceEngine engine(*w, model);
    const Result<void> r = engine.run(stop);
    return r ? 0 : 1;
  });
}

void stopWorker(ProcessGroup& group, pid_t worker) {
  group.stop(worker, ProcessGroup::in(30s));
}

}  // namespace

ScenarioResult runStreamScenario(const ScenarioOptions& options) {
  const std::uint32_t requests = options.quick ? 256 : 4096;
  const std::uint32_t output_tokens = options.quick ? 128 : 512;
  const testing::TempDir tmp("fairsched-stream");
  if (tmp.path().empty()) return ScenarioError{"mkdtemp failed"};
  auto cfg = streamConfig(tmp.path());
  if (auto* err = cfg.errorOrNull()) return ScenarioError{*err};
  pinTo(1);  // the daemon inherits this CPU
  auto started = daemon::ForkedDaemon::start(cfg.value());
  if (!started) {
    pinTo(0);
    return ScenarioError{started.error().message};
  }
  daemon::ForkedDaemon& d = started.value();
  ProcessGroup workers;
  // 1. Throughput: a zero-cost engine of 64 sequences (every step decodes
  // one token of each) on the daemon's CPU; the client keeps 64 requests in
  // flight on the other.
  reference::EngineModel saturating;
  saturating.max_sequences = kSequences;
  saturating.kv_tokens = 1ull << 30;
  saturating.step_us = 0;
  saturating.prefill_token_us = 0;
  saturating.decode_token_us = 0;
  pid_t worker = startWorker(workers, d.socket(), saturating, 1);
  pinTo(0);
  auto busy = measure(d.socket(), Plan{requests, output_tokens, false, kSequences});
  stopWorker(workers, worker);
  // 1b. The same with a TOKENS record per sequence per step (the baseline
  // of STEP records, in the same run).
  reference::EngineModel per_sequence = saturating;
  per_sequence.step_records = false;
  worker = startWorker(workers, d.socket(), per_sequence, 1);
  pinTo(0);
  auto busy_records = measure(d.socket(), Plan{requests, output_tokens, false, kSequences});
  stopWorker(workers, worker);
  // 2. Latency of one token at a time: one sequence, a step of 100 µs (the
  // engine sleeps between steps), one request in flight — the pipeline is
  // idle when each token is emitted, so nothing queues in front of it.
  reference::EngineModel paced = saturating;
  paced.max_sequences = 1;
  paced.step_us = 100;
  worker = startWorker(workers, d.socket(), paced, 0);
  const std::uint32_t paced_requests = options.quick ? 8 : 64;
  auto latency = measure(d.socket(), Plan{paced_requests, 256, false, 1});
  auto sleeping = measure(d.socket(), Plan{paced_requests / 4, 256, true, 1});
  stopWorker(workers, worker);
  const int daemon_status = d.terminate();
  for (const auto* m : {&busy, &busy_records, &latency, &sleeping}) {
    if (auto* err = std::get_if<std::string>(m)) return ScenarioError{*err};
  }
  const Measured& b = std::get<Measured>(busy);
  const Measured& br = std::get<Measured>(busy_records);
  const Measured& l = std::get<Measured>(latency);
  const Measured& s = std::get<Measured>(sleeping);
  const std::vector<double> raw = rawPingPong(options.quick ? 2'000 : 50'000, 0, 1);
  // The paced worker sleeps between steps on the client's CPU: what handing
  // a word over costs there, with nothing of fairsched in between.
  const std::vector<double> handoff = rawSleepingHandoff(paced_requests * 16, 0, 100);

  const auto rate = [](const Measured& m) {
    return m.result.seconds > 0 ? m.result.tokens / m.result.seconds : 0.0;
  };
  const double tokens_per_s = rate(b), tokens_per_s_records = rate(br);
  const double raw_p50 = percentileUs(raw, 0.5);
  const double handoff_p50 = percentileUs(handoff, 0.5);
  const double lat_p50 = percentileUs(l.samples, 0.5), lat_p99 = percentileUs(l.samples, 0.99);
  const std::uint64_t lost = b.result.lost + br.result.lost + l.result.lost + s.result.lost;
  const std::uint64_t mismatched =
      b.result.mismatched + br.result.mismatched + l.result.mismatched + s.result.mismatched;
  const std::uint64_t failed =
      b.result.failed + br.result.failed + l.result.failed + s.result.failed;
  ScenarioReport report;
  report.json = {
      {"scenario", "stream"},
      {"tokens_per_s", tokens_per_s},
      {"tokens_per_s_token_records", tokens_per_s_records},
      {"step_records_speedup",
       tokens_per_s_records > 0 ? tokens_per_s / tokens_per_s_records : 0.0},
      {"token_latency", latencyJson(l.samples)},
      {"token_latency_sleeping", latencyJson(s.samples)},
      {"token_latency_saturated", latencyJson(b.samples)},
      {"raw_pingpong", {{"p50_us", raw_p50}, {"p99_us", percentileUs(raw, 0.99)}}},
      {"vs_raw", {{"p50", raw_p50 > 0 ? lat_p50 / raw_p50 : 0.0}}},
      {"sleeping_handoff", {{"p50_us", handoff_p50}, {"p99_us", percentileUs(handoff, 0.99)}}},
      {"vs_sleeping_handoff", {{"p50", handoff_p50 > 0 ? lat_p50 / handoff_p50 : 0.0}}},
      {"lost", lost},
      {"mismatched", mismatched},
      {"failed_requests", failed},
      {"requests", 2 * requests + paced_requests + paced_requests / 4},
      {"output_tokens_per_request", output_tokens},
      {"daemon_exit_status", daemon_status}};
  char buf[2048];
  std::snprintf(buf, sizeof buf,
                "stream: reference worker -> fairschedd -> client\n\n"
                "%-52s %9.2f M/s  (aim >= 3 M/s: %s)\n"
                "%-52s %9.2f M/s  (STEP records: %.1fx)\n"
                "%-52s %9.2f us p50 %9.2f us p99\n"
                "%-52s %9.2f us p50 %9.2f us p99\n"
                "%-52s %9.2f us p50 %9.2f us p99\n"
                "%-52s %9.2f us p50\n"
                "%-52s %9.2f us p50 %9.2f us p99\n"
                "token latency vs raw ping-pong (same run): p50 %.2fx (aim <= 10x: %s)\n"
                "token latency vs the sleeping handoff (same run): p50 %.2fx\n"
                "lost %llu, mismatched %llu, requests not OK %llu\n",
                "throughput: 64 sequences, zero-cost engine, STEP records", tokens_per_s / 1e6,
                tokens_per_s >= 3e6 ? "MET" : "MISS",
                "throughput: the same, a TOKENS record per sequence", tokens_per_s_records / 1e6,
                tokens_per_s_records > 0 ? tokens_per_s / tokens_per_s_records : 0.0,
                "emit -> receipt, one token at a time, busy-polling", lat_p50, lat_p99,
                "emit -> receipt, one token at a time, sleeping client",
                percentileUs(s.samples, 0.5), percentileUs(s.samples, 0.99),
                "emit -> receipt, saturated (queueing included)", percentileUs(b.samples, 0.5),
                percentileUs(b.samples, 0.99), "raw shm ping-pong round trip (physical limit)",
                raw_p50, "sleeping writer -> spinning reader, one CPU (handoff)", handoff_p50,
                percentileUs(handoff, 0.99), raw_p50 > 0 ? lat_p50 / raw_p50 : 0.0,
                raw_p50 > 0 && lat_p50 / raw_p50 <= 10 ? "MET" : "MISS",
                handoff_p50 > 0 ? lat_p50 / handoff_p50 : 0.0,
                static_cast<unsigned long long>(lost), static_cast<unsigned long long>(mismatched),
                static_cast<unsigned long long>(failed));
  report.table = buf;
  if (daemon_status != 0) return ScenarioError{"the daemon did not stop cleanly"};
  return report;
}

}  // namespace fairsched::bench
