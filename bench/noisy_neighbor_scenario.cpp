#include "bench/noisy_neighbor_scenario.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>
#include <unordered_map>
#include <variant>

#include "bench/noisy_neighbor_report.hpp"
#include "daemon/config/config.hpp"
#include "daemon/config/embedded_config.hpp"
#include "daemon/forked_daemon.hpp"
#include "fairsched/client.hpp"

namespace fairsched::bench {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr int kBurst = 10'000;
constexpr int kLight = 5;
constexpr auto kRunTimeout = 60s;

struct PlannedRequest {
  TimeNs offset = 0;  // after the run's start
  std::uint32_t input_tokens = 0;
  std::uint32_t max_output_tokens = 0;
};

struct Setup {
  config::Config cfg;
  std::string endpoint;
  std::vector<PlannedRequest> burst;  // A
  std::vector<PlannedRequest> light;  // B
};

std::variant<Setup, std::string> makeSetup(const ScenarioOptions& options, const std::string& dir) {
  auto parsed =
      options.config_path.empty()
          ? config::parseConfig(config::kEmbeddedDefaultConfig, "<embedded config/fairsched.toml>")
          : config::loadConfigFile(options.config_path);
  if (auto* err = std::get_if<config::ConfigError>(&parsed)) return err->toString();
  Setup s;
  s.cfg = std::get<config::Config>(parsed);
  const config::TenantConfig* a = s.cfg.findTenant("A");
  const config::TenantConfig* b = s.cfg.findTenant("B");
  if (!a || !b) return std::string("the config must list tenants A and B");
  if (a->tier != b->tier) return std::string("tenants A and B must share a tier");
  s.cfg.daemon.socket = dir + "/fairsched.sock";
  s.cfg.daemon.log_level = "error";
  config::ClientRule rule;
  rule.name = "fairsched-bench";
  rule.uids = {static_cast<std::uint32_t>(getuid())};
  rule.tenants = {"*"};
  rule.endpoints = {"*"};
  s.cfg.clients.insert(s.cfg.clients.begin(), rule);
  const config::EndpointConfig* ep = s.cfg.findEndpoint("chat");
  if (!ep) ep = &s.cfg.endpoints.front();
  s.endpoint = ep->name;

  std::mt19937_64 rng(options.seed);
  std::uniform_int_distribution<std::uint32_t> input(64, 512), output(16, 256);
  auto request = [&](TimeNs offset) {
    PlannedRequest r;
    r.offset = offset;
    r.input_tokens = std::min(input(rng), ep->max_batch_tokens / 2);
    r.max_output_tokens = std::min(output(rng), ep->max_output_tokens);
    return r;
  };
  for (int i = 0; i < kBurst; ++i) s.burst.push_back(request(0));
  // B's requests spread over the time the burst takes to drain.
  const double burst_us =
      kBurst *
      (ep->cpu.per_token_us * (288 + 136) + ep->cpu.per_batch_us / ep->max_batch_requests) /
      std::max<std::uint32_t>(1, ep->cpu.threads);
  const TimeNs spacing = static_cast<TimeNs>(burst_us * kNsPerUs / (kLight + 1));
  for (int i = 1; i <= kLight; ++i) s.light.push_back(request(spacing * i));
  return s;
}

SubmitRequest submitRequest(Tenant t, const std::string& endpoint,
                            const std::vector<std::uint32_t>& prompt, std::uint32_t max_output) {
  SubmitRequest r;
  r.tenant = t;
  r.endpoint = endpoint;
  r.prompt = prompt;
  r.max_output_tokens = max_output;
  return r;
}

// The client process of one tenant: follows its plan from `start`, records
// every request, writes the records to `out_path`. Exit status 0 or 1.
int tenantProcess(const std::string& socket, const std::string& tenant, const std::string& endpoint,
                  const std::vector<PlannedRequest>& plan, Clock::time_point start,
                  const std::string& out_path) {
  ClientOptions opts;
  opts.socket_path = socket;
  opts.client_name = "bench-" + tenant;
  auto client = Client::connect(opts);
  if (!client) {
    std::fprintf(stderr, "noisy-neighbor %s: %s\n", tenant.c_str(),
                 client.error().toString().c_str());
    return 1;
  }
  auto handle = client->openTenant(tenant);
  if (!handle) {
    std::fprintf(stderr, "noisy-neighbor %s: %s\n", tenant.c_str(),
                 handle.error().toString().c_str());
    return 1;
  }
  std::vector<RequestRecord> records(plan.size());
  std::unordered_map<RequestId, std::size_t> index;
  std::vector<std::uint32_t> prompt;
  std::vector<Completion> done;
  std::this_thread::sleep_until(start);
  const auto deadline = start + kRunTimeout;
  std::size_t next = 0, ended = 0;
  auto since = [&](Clock::time_point t) { return static_cast<TimeNs>((t - start).count()); };
  while (ended < plan.size() && Clock::now() < deadline) {
    while (next < plan.size() &&
           Clock::now() >= start + std::chrono::nanoseconds(plan[next].offset)) {
      prompt.assign(plan[next].input_tokens, static_cast<std::uint32_t>(next));
      auto id =
          client->submit(submitRequest(*handle, endpoint, prompt, plan[next].max_output_tokens));
      if (!id && id.error().code == ErrorCode::kRingFull) break;  // collect, then try again
      records[next].arrival = since(Clock::now());
      records[next].tokens = plan[next].input_tokens + plan[next].max_output_tokens;
      if (id) {
        index[*id] = next;
      } else {  // refused by the library itself: it ends here, explicitly
        records[next].completion = records[next].arrival;
        records[next].status = Status::kInvalid;
        ++ended;
      }
      ++next;
    }
    done.clear();
    if (client->poll(done) == 0) {
      const auto until_next =
          next < plan.size() ? start + std::chrono::nanoseconds(plan[next].offset) - Clock::now()
                             : Clock::duration(1ms);
      (void)client->wait(
          std::clamp<Clock::duration>(until_next, Clock::duration(0), Clock::duration(1ms)));
      client->poll(done);
    }
    const TimeNs now = since(Clock::now());
    for (const Completion& c : done) {
      auto it = index.find(c.request_id);
      if (it == index.end()) continue;
      RequestRecord& r = records[it->second];
      r.completion = now;
      r.status = c.status;
      if (c.status == Status::kOk) r.tokens = plan[it->second].input_tokens + c.output_tokens;
      index.erase(it);
      ++ended;
    }
  }
  std::ofstream out(out_path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(records.data()),
            static_cast<std::streamsize>(records.size() * sizeof(RequestRecord)));
  return out ? 0 : 1;
}

std::variant<NoisyRun, std::string> runOnce(Setup& setup, Policy policy, const char* label,
                                            bool burst, const std::string& dir) {
  setup.cfg.daemon.policy = policy;
  auto started = daemon::ForkedDaemon::start(setup.cfg);
  if (auto* err = std::get_if<std::string>(&started)) return *err;
  daemon::ForkedDaemon& d = std::get<daemon::ForkedDaemon>(started);
  const auto start = Clock::now() + 300ms;  // time for the clients to connect
  struct Child {
    std::string tenant;
    pid_t pid;
    std::string path;
    std::size_t count;
  };
  std::vector<Child> children;
  for (const char* tenant : {"A", "B"}) {
    if (!burst && std::string(tenant) == "A") continue;
    const auto& plan = std::string(tenant) == "A" ? setup.burst : setup.light;
    const std::string path = dir + "/records-" + tenant;
    const pid_t pid = fork();
    if (pid == 0) _exit(tenantProcess(d.socket(), tenant, setup.endpoint, plan, start, path));
    children.push_back({tenant, pid, path, plan.size()});
  }
  NoisyRun run{policy, label, {}};
  std::string failure;
  for (const Child& c : children) {
    int status = 0;
    waitpid(c.pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      failure = "client process " + c.tenant + " failed";
    std::vector<RequestRecord> records(c.count);
    std::ifstream in(c.path, std::ios::binary);
    in.read(reinterpret_cast<char*>(records.data()),
            static_cast<std::streamsize>(records.size() * sizeof(RequestRecord)));
    if (!in) failure = "no records from " + c.tenant;
    run.tenants[c.tenant] = std::move(records);
  }
  if (d.terminate() != 0 && failure.empty()) failure = "the daemon did not stop cleanly";
  if (!failure.empty()) return failure;
  return run;
}

}  // namespace

ScenarioResult runNoisyNeighbor(const ScenarioOptions& options) {
  char tmpl[] = "/tmp/fairsched-noisy-XXXXXX";
  if (!mkdtemp(tmpl)) return ScenarioError{"mkdtemp failed"};
  const std::string dir = tmpl;
  struct Cleanup {
    std::string dir;
    ~Cleanup() { std::filesystem::remove_all(dir); }
  } cleanup{dir};
  auto made = makeSetup(options, dir);
  if (auto* err = std::get_if<std::string>(&made)) return ScenarioError{*err};
  Setup& setup = std::get<Setup>(made);
  const config::TenantConfig* a = setup.cfg.findTenant("A");
  const config::TierConfig* tier = setup.cfg.findTier(a->tier);
  const double weight = a->weight.value_or(tier->default_weight);

  std::vector<NoisyRun> runs;
  struct Plan {
    Policy policy;
    const char* label;
    bool burst;
  };
  for (const Plan plan : {Plan{Policy::kFair, "burst", true}, Plan{Policy::kFifo, "burst", true},
                          Plan{Policy::kFair, "alone", false}}) {
    auto run = runOnce(setup, plan.policy, plan.label, plan.burst, dir);
    if (auto* err = std::get_if<std::string>(&run)) return ScenarioError{*err};
    runs.push_back(std::move(std::get<NoisyRun>(run)));
  }
  ScenarioReport report;
  report.json = noisyNeighborJson(runs, "processes", tier->name, weight);
  report.table = noisyNeighborTable(
      report.json,
      "noisy-neighbor: a real fairschedd and client processes through libfairsched "
      "(executor: the config's cpu model)\n"
      "A: burst of 10,000 requests; B: 5 requests spaced out during the burst; same tier and "
      "weight");
  return report;
}

}  // namespace fairsched::bench
