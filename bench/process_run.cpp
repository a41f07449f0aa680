#include "bench/process_run.hpp"

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <thread>
#include <unordered_map>

#include <signal.h>

#include <atomic>

#include "daemon/ctl/admin_client.hpp"
#include "fairsched/client.hpp"
#include "fairsched/worker.hpp"
#include "tests/support/daemon_config.hpp"
#include "tests/support/forked_daemon.hpp"
#include "tests/support/process_group.hpp"
#include "worker/reference_engine.hpp"

namespace fairsched::bench {

using testing::ProcessGroup;

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr auto kConnectTime = 300ms;  // between fork and the common start
constexpr auto kExitMargin = 30s;     // for a process to exit once it should have

SubmitRequest submitRequest(Tenant t, const std::string& endpoint,
                            const std::vector<std::uint32_t>& prompt, std::uint32_t max_output) {
  SubmitRequest r;
  r.tenant = t;
  r.endpoint = endpoint;
  r.prompt = prompt;
  r.max_output_tokens = max_output;
  return r;
}

// A flooding client (FloodPlan); writes its FloodCounts to `out_path`.
int floodProcess(const std::string& socket, const FloodPlan& plan, Clock::time_point start,
                 const std::string& out_path) {
  ClientOptions opts;
  opts.socket_path = socket;
  opts.client_name = "bench-" + plan.prefix;
  auto client = Client::connect(opts);
  if (!client) {
    std::fprintf(stderr, "bench flooder %s: %s\n", plan.prefix.c_str(),
                 client.error().toString().c_str());
    return 1;
  }
  std::vector<Tenant> tenants;
  for (int k = 0; k < plan.tenants; ++k) {
    auto t = client->openTenant(plan.prefix + "-" + std::to_string(k));
    if (!t) {
      std::fprintf(stderr, "bench flooder %s: %s\n", plan.prefix.c_str(),
                   t.error().toString().c_str());
      return 1;
    }
    tenants.push_back(*t);
  }
  FloodCounts n;
  std::vector<Completion> done;
  auto take = [&] {
    done.clear();
    const std::size_t got = client->poll(done, 256);
    for (const Completion& c : done) {
      if (c.status == Status::kOk) {
        ++n.ok;
      } else if (c.status == Status::kRateLimited || c.status == Status::kQueueFull ||
                 c.status == Status::kOverloaded) {
        ++n.rejected;
      } else {
        ++n.other;
      }
    }
    return got;
  };
  const std::vector<std::uint32_t> prompt{1, 2, 3, 4};
  std::this_thread::sleep_until(start);
  const auto until = start + plan.duration;
  for (std::size_t i = 0; Clock::now() < until; ++i) {
    auto id = client->submit(submitRequest(tenants[i % tenants.size()], plan.endpoint, prompt, 1));
    if (id) {
      ++n.submitted;
    } else if (id.error().code == ErrorCode::kRingFull) {
      ++n.ring_full;  // and again at once: what a flood does
    } else {
      std::fprintf(stderr, "bench flooder %s: %s\n", plan.prefix.c_str(),
                   id.error().toString().c_str());
      return 1;
    }
    take();
  }
  const auto give_up = Clock::now() + 60s;
  while (n.ok + n.rejected + n.other < n.submitted && Clock::now() < give_up) {
    if (take() == 0) (void)client->wait(10ms);
  }
  n.unanswered = n.submitted - std::min(n.submitted, n.ok + n.rejected + n.other);
  std::ofstream out(out_path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(&n), sizeof n);
  return out ? 0 : 1;
}

// A storm of short-lived clients (StormPlan); writes its StormCounts to
// `out_path`. Each child says it connected through a shared page, so the
// count survives its SIGKILL.
int stormProcess(const std::string& socket, const StormPlan& plan, Clock::time_point start,
                 const std::string& out_path) {
  auto* connected = static_cast<std::atomic<std::uint64_t>*>(
      mmap(nullptr, sizeof(std::atomic<std::uint64_t>), PROT_READ | PROT_WRITE,
           MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  if (connected == MAP_FAILED) return 1;
  new (connected) std::atomic<std::uint64_t>(0);
  std::mt19937_64 rng(static_cast<std::uint64_t>(getpid()));
  const auto life_us = std::chrono::duration_cast<std::chrono::microseconds>(plan.max_life);
  std::uniform_int_distribution<std::int64_t> life(0, life_us.count());
  const auto period = std::chrono::nanoseconds(1'000'000'000 / std::max(1, plan.per_s));
  StormCounts n;
  std::this_thread::sleep_until(start);
  const auto until = start + plan.duration;
  for (auto next = Clock::now(); Clock::now() < until; next += period) {
    std::this_thread::sleep_until(next);
    const std::uint64_t k = n.forked++;
    const pid_t child = fork();
    if (child < 0) return 1;
    if (child == 0) {
      ClientOptions opts;
      opts.socket_path = socket;
      opts.client_name = "bench-storm";
      auto client = Client::connect(opts);
      if (!client) _exit(0);
      connected->fetch_add(1, std::memory_order_relaxed);
      auto t = client->openTenant(plan.prefix + "-" + std::to_string(k % 64));
      if (t) (void)client->submit(submitRequest(*t, plan.endpoint, {1, 2, 3, 4}, 1));
      pause();
      _exit(0);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(life(rng)));
    kill(child, SIGKILL);
    int status = 0;
    waitpid(child, &status, 0);
  }
  n.connected = connected->load(std::memory_order_relaxed);
  std::ofstream out(out_path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(&n), sizeof n);
  return out ? 0 : 1;
}

// The client process of one tenant: follows its plan from `start`, records
// every request, writes the records to `out_path`. Exit status 0 or 1.
int tenantProcess(const std::string& socket, const TenantPlan& plan,
                  const std::vector<std::vector<std::uint32_t>>& prompts, Clock::time_point start,
                  std::chrono::seconds timeout, const std::string& out_path) {
  const std::string& tenant = plan.tenant;
  ClientOptions opts;
  opts.socket_path = socket;
  opts.client_name = "bench-" + tenant;
  auto client = Client::connect(opts);
  if (!client) {
    std::fprintf(stderr, "bench client %s: %s\n", tenant.c_str(),
                 client.error().toString().c_str());
    return 1;
  }
  auto handle = client->openTenant(tenant);
  if (!handle) {
    std::fprintf(stderr, "bench client %s: %s\n", tenant.c_str(),
                 handle.error().toString().c_str());
    return 1;
  }
  const auto& requests = plan.requests;
  std::vector<RequestRecord> records(requests.size());
  std::unordered_map<RequestId, std::size_t> index;
  std::vector<std::uint32_t> prompt;
  std::vector<Completion> done;
  std::this_thread::sleep_until(start);
  const auto deadline = start + timeout;
  std::size_t next = 0, ended = 0;
  auto since = [&](Clock::time_point t) { return static_cast<TimeNs>((t - start).count()); };
  while (ended < requests.size() && Clock::now() < deadline) {
    while (next < requests.size() &&
           Clock::now() >= start + std::chrono::nanoseconds(requests[next].offset)) {
      if (next < prompts.size() && !prompts[next].empty()) {
        prompt = prompts[next];
      } else {
        prompt.assign(requests[next].input_tokens, static_cast<std::uint32_t>(next));
      }
      SubmitRequest sr =
          submitRequest(*handle, plan.endpoint, prompt, requests[next].max_output_tokens);
      sr.stream = plan.stream;
      auto id = client->submit(sr);
      if (!id && id.error().code == ErrorCode::kRingFull) break;  // collect, then try again
      records[next].arrival = since(Clock::now());
      records[next].tokens = requests[next].input_tokens + requests[next].max_output_tokens;
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
          next < requests.size()
              ? start + std::chrono::nanoseconds(requests[next].offset) - Clock::now()
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
      if (c.partial) {
        if (r.first_token < 0) r.first_token = now;
        continue;
      }
      r.completion = now;
      r.status = c.status;
      if (c.status == Status::kOk) r.tokens = requests[it->second].input_tokens + c.output_tokens;
      index.erase(it);
      ++ended;
    }
  }
  std::ofstream out(out_path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(records.data()),
            static_cast<std::streamsize>(records.size() * sizeof(RequestRecord)));
  return out ? 0 : 1;
}

// A reference worker process serving `ec` with its engine model until
// SIGTERM; then writes what its engine counted to `stats_path`.
int referenceWorker(const std::string& socket, const config::EndpointConfig& ec,
                    const std::string& name, const std::string& stats_path) {
  WorkerOptions wo;
  wo.socket_path = socket;
  wo.endpoint = ec.name;
  wo.worker_name = name;
  auto w = Worker::connect(wo);
  if (!w) {
    std::fprintf(stderr, "bench worker %s: %s\n", ec.name.c_str(), w.error().toString().c_str());
    return 1;
  }
  static std::atomic<bool> stop{false};
  signal(SIGTERM, [](int) { stop.store(true); });
  const config::EngineConfig& e = ec.engine;
  reference::EngineModel model{e.max_sequences,    e.kv_tokens,       e.step_us,
                               e.prefill_token_us, e.decode_token_us, e.chunked_prefill_tokens};
  model.cache_blocks = e.prefix_cache_blocks;
  model.block_tokens = ec.worker.prefix_block_tokens;
  model.kv_events = e.kv_events;
  reference::ReferenceEngine engine(*w, model);
  const Result<void> r = engine.run(stop);
  if (!r && r.error().code != ErrorCode::kDaemonLost) {
    std::fprintf(stderr, "bench worker %s: %s\n", name.c_str(), r.error().toString().c_str());
  }
  const reference::EngineStats& st = engine.stats();
  const std::uint64_t counts[3] = {st.prompt_tokens, st.cached_tokens, st.preempted};
  std::ofstream out(stats_path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(counts), sizeof counts);
  return (r || r.error().code == ErrorCode::kDaemonLost) && out ? 0 : 1;
}

}  // namespace

fairsched::Result<config::Config, std::string> echoDaemonConfig(const std::string& socket,
                                                                const std::string& daemon_extra) {
  testing::DaemonConfigText c;
  c.socket = socket;
  c.daemon_extra = daemon_extra;
  c.tiers = {"bench"};
  c.body =
      "[endpoints.echo]\nmax_batch_requests = 32\nmax_batch_tokens = 65536\nmax_wait_us = 0\n"
      "max_output_tokens = 16\n"
      "[endpoints.echo.cpu]\nper_batch_us = 0.0\nper_token_us = 0.0\nthreads = 1\n"
      "workload = false\n"
      "[tenants.bench]\ntier = \"bench\"\nqueue_limit = 100000\n";
  c.client_name = "bench";
  return c.parse("<bench>");
}

void prepareBenchConfig(config::Config& cfg, const std::string& dir) {
  cfg.daemon.socket = dir + "/fairsched.sock";
  cfg.daemon.log_level = "error";
  cfg.daemon.state_dir.clear();  // every run starts clean
  config::ClientRule rule;
  rule.name = "fairsched-bench";
  rule.uids = {static_cast<std::uint32_t>(getuid())};
  rule.tenants = {"*"};
  rule.endpoints = {"*"};
  rule.workers = {"*"};  // the reference workers runProcesses starts
  rule.admin = true;     // runProcesses reads `status` at the end
  cfg.clients.insert(cfg.clients.begin(), rule);
}

std::vector<TenantPlan> steadyPlans(int clients, int per_s, std::chrono::milliseconds duration,
                                    const std::string& endpoint) {
  const int per_client = static_cast<int>(per_s * duration.count() / 1000);
  std::vector<TenantPlan> plans;
  for (int i = 0; i < clients; ++i) {
    TenantPlan p{"steady-" + std::to_string(i), endpoint, {}, false};
    for (int k = 0; k < per_client; ++k) {
      const TimeNs offset = static_cast<TimeNs>(k) * kNsPerSec / per_s +
                            static_cast<TimeNs>(i) * kNsPerSec / per_s / clients;
      p.requests.push_back({offset, 4, 4});
    }
    plans.push_back(std::move(p));
  }
  return plans;
}

SteadyTally tallySteady(const TenantRecords& records) {
  SteadyTally t;
  for (const auto& [tenant, rs] : records) {
    for (const RequestRecord& r : rs) {
      ++t.requests;
      if (r.completion < 0) {
        ++t.lost;
      } else if (r.status != Status::kOk) {
        ++t.not_ok;
      } else {
        t.rtt_ms.push_back(static_cast<double>(r.completion - r.arrival) / kNsPerMs);
      }
    }
  }
  std::sort(t.rtt_ms.begin(), t.rtt_ms.end());
  return t;
}

std::optional<std::uint64_t> cpuTimeNs(pid_t pid) {
  const std::string proc = "/proc/" + std::to_string(pid);
  std::error_code ec;
  std::uint64_t sum = 0;
  bool any = false;
  for (const auto& task : std::filesystem::directory_iterator(proc + "/task", ec)) {
    std::ifstream f(task.path() / "schedstat");
    std::uint64_t ns = 0;
    if (f >> ns) {
      sum += ns;
      any = true;
    }
  }
  if (any) return sum;
  std::ifstream f(proc + "/stat");
  std::string line;
  if (!std::getline(f, line)) return std::nullopt;
  const std::size_t paren = line.rfind(')');  // the command may hold spaces
  if (paren == std::string::npos) return std::nullopt;
  std::istringstream rest(line.substr(paren + 2));
  std::string field;
  std::uint64_t utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {  // fields 14 and 15 of proc(5)
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  const long hz = sysconf(_SC_CLK_TCK);
  if (hz <= 0) return std::nullopt;
  return (utime + stime) * (1'000'000'000ull / static_cast<std::uint64_t>(hz));
}

std::variant<TenantRecords, std::string> runProcesses(const config::Config& cfg,
                                                      const std::vector<TenantPlan>& plans,
                                                      const std::string& dir,
                                                      std::chrono::seconds timeout,
                                                      RunExtras* extras) {
  auto started = daemon::ForkedDaemon::start(cfg);
  if (!started) return started.error().message;
  daemon::ForkedDaemon& d = started.value();
  ProcessGroup group;  // the workers and the clients; killed if anything is left
  struct Started {
    pid_t pid;
    std::string endpoint, stats_path;
  };
  std::vector<Started> workers;
  const std::uint32_t per_endpoint = extras != nullptr ? extras->workers_per_endpoint : 1;
  for (const config::EndpointConfig& ec : cfg.endpoints) {
    if (ec.executor != config::ExecutorKind::kWorker) continue;
    for (std::uint32_t k = 0; k < per_endpoint; ++k) {
      const std::string name = "bench-reference-" + std::to_string(k);
      const std::string stats = dir + "/engine-" + ec.name + "-" + std::to_string(k);
      workers.push_back({group.spawn([&] { return referenceWorker(d.socket(), ec, name, stats); }),
                         ec.name, stats});
    }
  }
  auto isWorkerEndpoint = [&](const std::string& name) {
    const config::EndpointConfig* ec = cfg.findEndpoint(name);
    return ec != nullptr && ec->executor == config::ExecutorKind::kWorker;
  };
  const auto start = Clock::now() + kConnectTime;
  struct Child {
    const TenantPlan* plan;
    pid_t pid;
    std::string path;
  };
  std::vector<Child> children;
  for (const TenantPlan& plan : plans) {
    const std::string path = dir + "/records-" + plan.tenant;
    const pid_t pid = group.spawn([&] {
      TenantPlan own = plan;
      own.stream = isWorkerEndpoint(plan.endpoint);
      static const std::vector<std::vector<std::uint32_t>> kFiller;
      const auto* prompts = &kFiller;
      if (extras != nullptr) {
        if (auto it = extras->prompts.find(plan.tenant); it != extras->prompts.end()) {
          prompts = &it->second;
        }
      }
      return tenantProcess(d.socket(), own, *prompts, start, timeout, path);
    });
    children.push_back({&plan, pid, path});
  }
  std::vector<std::pair<pid_t, std::string>> flooders;
  if (extras != nullptr) {
    for (const FloodPlan& f : extras->floods) {
      const std::string path = dir + "/flood-" + f.prefix;
      flooders.emplace_back(group.spawn([&] { return floodProcess(d.socket(), f, start, path); }),
                            path);
    }
  }
  std::vector<std::pair<pid_t, std::string>> stormers;
  if (extras != nullptr) {
    for (const StormPlan& f : extras->storms) {
      const std::string path = dir + "/storm-" + f.prefix;
      stormers.emplace_back(group.spawn([&] { return stormProcess(d.socket(), f, start, path); }),
                            path);
    }
  }
  // Each client gives up `timeout` after the start by itself; past that and
  // a margin, it is killed.
  const auto deadline = start + timeout + kExitMargin;
  TenantRecords records;
  std::string failure;
  for (const Child& c : children) {
    if (group.wait(c.pid, deadline) != 0) failure = "client process " + c.plan->tenant + " failed";
    std::vector<RequestRecord> r(c.plan->requests.size());
    std::ifstream in(c.path, std::ios::binary);
    in.read(reinterpret_cast<char*>(r.data()),
            static_cast<std::streamsize>(r.size() * sizeof(RequestRecord)));
    if (!in) failure = "no records from " + c.plan->tenant;
    records[c.plan->tenant] = std::move(r);
  }
  if (extras != nullptr) {
    extras->flooded.clear();
    for (const auto& [pid, path] : flooders) {
      if (group.wait(pid, deadline) != 0) failure = "a flooding client failed";
      FloodCounts n;
      std::ifstream in(path, std::ios::binary);
      in.read(reinterpret_cast<char*>(&n), sizeof n);
      if (!in) failure = "no counts from a flooding client";
      extras->flooded.push_back(n);
    }
    extras->stormed.clear();
    for (const auto& [pid, path] : stormers) {
      if (group.wait(pid, deadline) != 0) failure = "a storming client failed";
      StormCounts n;
      std::ifstream in(path, std::ios::binary);
      in.read(reinterpret_cast<char*>(&n), sizeof n);
      if (!in) failure = "no counts from a storming client";
      extras->stormed.push_back(n);
    }
    extras->daemon_cpu_ns = cpuTimeNs(d.pid()).value_or(0);
    auto status = daemon::adminCommand(d.socket(), shm::AdminCommand::kStatus);
    if (status && status->status == shm::ControlStatus::kOk) {
      extras->status = nlohmann::json::parse(status->json, nullptr, false);
    }
  }
  if (extras != nullptr) extras->engines.clear();
  for (const Started& w : workers) {
    if (group.stop(w.pid, ProcessGroup::in(kExitMargin)) != 0 && failure.empty()) {
      failure = "a reference worker failed";
    }
    if (extras == nullptr) continue;
    std::uint64_t counts[3] = {};
    std::ifstream in(w.stats_path, std::ios::binary);
    in.read(reinterpret_cast<char*>(counts), sizeof counts);
    if (!in && failure.empty()) failure = "no counts from a reference worker";
    extras->engines.push_back({w.endpoint, counts[0], counts[1], counts[2]});
  }
  if (d.terminate() != 0 && failure.empty()) failure = "the daemon did not stop cleanly";
  if (!failure.empty()) return failure;
  return records;
}

}  // namespace fairsched::bench
