// rate-limit: a real fairschedd and one client process per tenant, each with
// several threads offering requests well above its limit and retrying through
// the library's runWithRetry (over Client::submitAndWait):
//  - R: "40 requests/5s"; T: "8000 tokens/5s" (token limits reserve input +
//    max output). Checked: the admitted cost (successful attempts, by their
//    submit time, ~ admission time) never exceeds the limit in ANY window of
//    the limit's length (sliding check over every admitted request).
//  - the retry delays: every wait between attempts against the retry_after
//    it follows; full jitter spreads them over [retry_after, retry_after + cap).
//  - C: "1 requests/2s" under a flood: nearly every attempt is rejected; once
//    the retry budget is drained, retries stay ~10% of first attempts.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "bench/process_run.hpp"
#include "bench/property_report.hpp"
#include "bench/property_scenarios.hpp"
#include "bench/stats.hpp"
#include "fairsched/client.hpp"
#include "fairsched/retry.hpp"
#include "tests/support/forked_daemon.hpp"
#include "tests/support/process_group.hpp"

namespace fairsched::bench {

using testing::ProcessGroup;

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr std::uint32_t kInput = 100;
constexpr std::uint32_t kOutput = 100;  // T's requests reserve 200 tokens each
constexpr auto kJitterCap = 250ms;      // base_backoff = max_backoff: a constant window

struct LimitSetup {
  std::string tenant;
  std::string limit;  // the limit string in the config
  std::string unit;   // "requests" or "tokens"
  double amount = 0;
  double window_s = 0;
  int threads = 0;
  std::chrono::milliseconds gap{0};  // between one thread's new requests
  std::chrono::milliseconds duration{0};
  std::chrono::nanoseconds jitter_cap{0};
  int max_attempts = 0;
};

const std::vector<LimitSetup>& setups(bool quick) {
  static const std::vector<LimitSetup> full = {
      {"R", "40 requests/5s", "requests", 40, 5, 8, 100ms, 12000ms, kJitterCap, 6},
      {"T", "8000 tokens/5s", "tokens", 8000, 5, 8, 100ms, 12000ms, kJitterCap, 6},
      {"C", "1 requests/1s", "requests", 1, 1, 16, 5ms, 12000ms, 50ms, 2},
  };
  static const std::vector<LimitSetup> small = {
      {"R", "40 requests/5s", "requests", 40, 5, 8, 100ms, 6000ms, kJitterCap, 6},
      {"T", "8000 tokens/5s", "tokens", 8000, 5, 8, 100ms, 6000ms, kJitterCap, 6},
      {"C", "1 requests/1s", "requests", 1, 1, 16, 5ms, 6000ms, 50ms, 2},
  };
  return quick ? small : full;
}

std::string configText(const std::vector<LimitSetup>& s) {
  std::string t = paidTierToml() + chatEndpointToml("tokens", 8192, 1024);
  for (const LimitSetup& l : s) {
    t += "\n[tenants." + l.tenant + "]\ntier = \"paid\"\n[tenants." + l.tenant +
         ".limits]\nchat = [\"" + l.limit + "\"]\n";
  }
  return t;
}

// Records every sleep of the retry loop with the retry_after it follows.
class RecordingEnv : public RetryEnv {
 public:
  explicit RecordingEnv(std::uint64_t seed) : inner_(seed) {}
  Clock::time_point now() override { return inner_.now(); }
  void sleepFor(std::chrono::nanoseconds d) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      sleeps.push_back({static_cast<double>(last_retry_after().count()) / 1e6,
                        static_cast<double>(d.count()) / 1e6});
    }
    inner_.sleepFor(d);
  }
  double random() override { return inner_.random(); }
  static std::chrono::nanoseconds& last_retry_after() {
    thread_local std::chrono::nanoseconds v{0};
    return v;
  }
  std::mutex mu_;
  std::vector<std::array<double, 2>> sleeps;  // [retry_after_ms, slept_ms]

 private:
  SystemRetryEnv inner_;
};

// One tenant's client process: `threads` threads, each starting a new request
// every `gap` until `duration` after `start`, through runWithRetry. Writes a
// JSON document with every attempt, request and sleep to `out_path`.
int tenantProcess(const std::string& socket, const LimitSetup& s, Clock::time_point start,
                  std::uint64_t seed, const std::string& out_path) {
  ClientOptions opts;
  opts.socket_path = socket;
  opts.client_name = "bench-" + s.tenant;
  auto client = Client::connect(opts);
  if (!client) return 1;
  auto handle = client->openTenant(s.tenant);
  if (!handle) return 1;
  RetryPolicy policy;
  policy.max_attempts = s.max_attempts;
  policy.base_backoff = s.jitter_cap;
  policy.max_backoff = s.jitter_cap;
  policy.max_retry_after = 30s;
  policy.attempt_timeout = 5s;
  RetryBudget budget;  // 10% of first attempts, 10 tokens to start
  RecordingEnv env(seed);
  std::mutex mu;
  nlohmann::json attempts =
      nlohmann::json::array();  // [submit_ms, done_ms, status, retry_after_ms, cost, attempt]
  nlohmann::json requests =
      nlohmann::json::array();  // [first_ms, end_ms, final status or -1, attempts, stop]
  auto ms = [&](Clock::time_point t) { return static_cast<double>((t - start).count()) / 1e6; };
  std::this_thread::sleep_until(start);
  const auto end = start + s.duration;
  std::vector<std::thread> threads;
  for (int i = 0; i < s.threads; ++i) {
    threads.emplace_back([&, i] {
      std::vector<std::uint32_t> prompt(kInput, static_cast<std::uint32_t>(i));
      auto next = start + s.gap * i / s.threads;
      while (Clock::now() < end) {
        std::this_thread::sleep_until(next);
        next += s.gap;
        SubmitRequest r;
        r.tenant = *handle;
        r.endpoint = "chat";
        r.prompt = prompt;
        r.max_output_tokens = kOutput;
        const auto first = Clock::now();
        auto attempt = [&](int n) -> Result<Completion> {
          const auto t0 = Clock::now();
          auto c = client->submitAndWait(r, policy.attempt_timeout);
          const auto t1 = Clock::now();
          RecordingEnv::last_retry_after() = c ? c->retry_after : 0ns;
          std::lock_guard<std::mutex> lock(mu);
          attempts.push_back({ms(t0), ms(t1), c ? static_cast<int>(c->status) : -1,
                              c ? static_cast<double>(c->retry_after.count()) / 1e6 : 0.0,
                              kInput + kOutput, n});
          return c;
        };
        RetryOutcome out = runWithRetry(attempt, policy, budget, env);
        std::lock_guard<std::mutex> lock(mu);
        requests.push_back({ms(first), ms(Clock::now()),
                            out.last ? static_cast<int>(out.last->status) : -1, out.attempts,
                            std::string(toString(out.stop))});
      }
    });
  }
  for (auto& t : threads) t.join();
  nlohmann::json doc;
  doc["attempts"] = std::move(attempts);
  doc["requests"] = std::move(requests);
  doc["sleeps"] = env.sleeps;
  std::ofstream f(out_path);
  f << doc.dump();
  return f ? 0 : 1;
}

}  // namespace

ScenarioResult runRateLimit(const ScenarioOptions& options) {
  TempDir tmp("fairsched-rate-limit");
  if (tmp.path().empty()) return ScenarioError{"mkdtemp failed"};
  const auto& s = setups(options.quick);
  auto parsed = config::parseConfig(configText(s), "<rate-limit>");
  if (auto* err = parsed.errorOrNull()) return ScenarioError{err->toString()};
  config::Config cfg = parsed.value();
  prepareBenchConfig(cfg, tmp.path());

  auto started = daemon::ForkedDaemon::start(cfg);
  if (!started) return ScenarioError{started.error().message};
  daemon::ForkedDaemon& d = started.value();
  const auto start = Clock::now() + 300ms;
  ProcessGroup group;
  std::vector<std::pair<pid_t, std::string>> children;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const std::string path = tmp.path() + "/rl-" + s[i].tenant + ".json";
    const pid_t pid = group.spawn(
        [&] { return tenantProcess(d.socket(), s[i], start, options.seed * 1000 + i, path); });
    children.push_back({pid, path});
  }
  std::string failure;
  std::vector<nlohmann::json> docs;
  for (std::size_t i = 0; i < children.size(); ++i) {
    // Its last requests may still retry (each attempt bounded) after the run.
    if (group.wait(children[i].first, start + s[i].duration + 300s) != 0)
      failure = "client process " + s[i].tenant + " failed";
    std::ifstream in(children[i].second);
    nlohmann::json doc = nlohmann::json::parse(in, nullptr, false);
    if (doc.is_discarded()) failure = "no records from " + s[i].tenant;
    docs.push_back(std::move(doc));
  }
  if (d.terminate() != 0 && failure.empty()) failure = "the daemon did not stop cleanly";
  if (!failure.empty()) return ScenarioError{failure};

  TenantRecords records;
  std::map<std::string, TenantInfo> info;
  std::vector<PropertyCheck> checks;
  nlohmann::json limits = nlohmann::json::object();
  nlohmann::json retry = nlohmann::json::object();
  nlohmann::json series = nlohmann::json::object();
  const int ok = static_cast<int>(Status::kOk);
  const int limited = static_cast<int>(Status::kRateLimited);
  for (std::size_t i = 0; i < s.size(); ++i) {
    const LimitSetup& l = s[i];
    const nlohmann::json& doc = docs[i];
    info[l.tenant] = {"paid", 1.0};
    // Per request: arrival = first attempt, completion = the last one's.
    auto& recs = records[l.tenant];
    for (const auto& r : doc["requests"]) {
      RequestRecord rec;
      rec.arrival = static_cast<TimeNs>(r[0].get<double>() * 1e6);
      const int st = r[2].get<int>();
      if (st >= 0) {
        rec.completion = static_cast<TimeNs>(r[1].get<double>() * 1e6);
        rec.status = static_cast<Status>(st);
        if (st == ok) rec.tokens = kInput + kOutput;
      }
      recs.push_back(rec);
    }
    // Admissions: successful attempts at their submit time.
    std::vector<std::pair<double, double>> adm;
    std::uint64_t first = 0, retries = 0, lost_attempts = 0, rejected = 0;
    for (const auto& a : doc["attempts"]) {
      (a[5].get<int>() == 1 ? first : retries) += 1;
      if (a[2].get<int>() < 0) ++lost_attempts;
      if (a[2].get<int>() == limited) ++rejected;
      if (a[2].get<int>() == ok)
        adm.push_back({a[0].get<double>(), l.unit == "tokens" ? a[4].get<double>() : 1.0});
    }
    std::sort(adm.begin(), adm.end());
    nlohmann::json pts = nlohmann::json::array();
    for (const auto& [t, c] : adm) pts.push_back({t, c});
    series[l.tenant] = pts;
    const double worst = maxInWindow(adm, l.window_s * 1000);
    double admitted = 0;
    for (const auto& p : adm) admitted += p.second;
    const double duration_s = static_cast<double>(l.duration.count()) / 1000;
    limits[l.tenant] = {{"limit", l.limit},
                        {"unit", l.unit},
                        {"amount", l.amount},
                        {"window_s", l.window_s},
                        {"offered_per_s", l.threads * 1000.0 / static_cast<double>(l.gap.count())},
                        {"admitted", admitted},
                        {"max_in_any_window", worst},
                        {"first_attempts", first},
                        {"retries", retries},
                        {"rate_limited_attempts", rejected},
                        {"attempts_without_completion", lost_attempts}};
    checks.push_back(
        {l.tenant + ": most " + l.unit + " admitted in any " +
             std::to_string(static_cast<int>(l.window_s)) + " s window (" + l.limit + ")",
         "<= " + std::to_string(static_cast<long>(l.amount)), worst, l.unit, worst <= l.amount});
    checks.push_back({l.tenant + ": attempts without a completion", "0",
                      static_cast<double>(lost_attempts), "", lost_attempts == 0});
    (void)duration_s;

    // Retry delays relative to retry_after.
    std::vector<double> jitter, waits, ra;
    for (const auto& sl : doc["sleeps"]) {
      ra.push_back(sl[0].get<double>());
      waits.push_back(sl[1].get<double>());
      jitter.push_back(sl[1].get<double>() - sl[0].get<double>());
    }
    const double cap = static_cast<double>(l.jitter_cap.count()) / 1e6;
    nlohmann::json rj = {
        {"sleeps", jitter.size()},
        {"jitter_cap_ms", cap},
        {"retry_after_ms",
         {{"min", percentile(ra, 0)}, {"p50", percentile(ra, 50)}, {"max", percentile(ra, 100)}}},
        {"wait_ms",
         {{"min", percentile(waits, 0)},
          {"p50", percentile(waits, 50)},
          {"p90", percentile(waits, 90)},
          {"max", percentile(waits, 100)}}},
        {"wait_minus_retry_after_ms",
         {{"min", percentile(jitter, 0)},
          {"p10", percentile(jitter, 10)},
          {"p50", percentile(jitter, 50)},
          {"p90", percentile(jitter, 90)},
          {"max", percentile(jitter, 100)}}}};
    if (l.tenant != "C") {
      const bool in_range =
          !jitter.empty() && percentile(jitter, 0) >= 0 && percentile(jitter, 100) < cap;
      const bool spread = !jitter.empty() && percentile(jitter, 10) < 0.25 * cap &&
                          percentile(jitter, 90) > 0.75 * cap;
      checks.push_back({l.tenant + ": waits in [retry_after, retry_after + cap) and spread (p10 < "
                                   "cap/4, p90 > 3cap/4); value = p50 of wait - retry_after",
                        "0.." + std::to_string(static_cast<int>(cap)) + " ms",
                        percentile(jitter, 50), "ms", in_range && spread});
    } else {
      // Budget: from the first request stopped for want of a token on.
      double drained_at = -1;
      for (const auto& r : doc["requests"]) {
        if (r[4].get<std::string>() == toString(RetryStop::kBudgetExhausted)) {
          const double t = r[1].get<double>();
          if (drained_at < 0 || t < drained_at) drained_at = t;
        }
      }
      std::uint64_t first_after = 0, retries_after = 0;
      for (const auto& a : doc["attempts"]) {
        if (drained_at < 0 || a[0].get<double>() < drained_at) continue;
        (a[5].get<int>() == 1 ? first_after : retries_after) += 1;
      }
      const double ratio =
          first_after ? static_cast<double>(retries_after) / static_cast<double>(first_after) : 1.0;
      rj["budget"] = {
          {"drained_at_ms", drained_at},
          {"first_attempts", first},
          {"retries", retries},
          {"rejected_fraction",
           first + retries ? static_cast<double>(rejected) / static_cast<double>(first + retries)
                           : 0.0},
          {"first_attempts_after_drain", first_after},
          {"retries_after_drain", retries_after},
          {"retry_ratio_after_drain", ratio}};
      // Retries granted just before the drain may start after it: one per thread.
      const double slack =
          first_after ? static_cast<double>(l.threads) / static_cast<double>(first_after) : 1.0;
      rj["budget"]["in_flight_slack"] = slack;
      char target[80];
      std::snprintf(target, sizeof target, "<= 0.1 + %.3f (threads in flight / first attempts)",
                    slack);
      checks.push_back({"C: retries per first attempt once the budget is drained", target, ratio,
                        "", drained_at >= 0 && ratio <= 0.1 + slack});
      checks.push_back(
          {"C: retries overall vs 0.1 x first attempts + 10 + threads",
           "<= " +
               std::to_string(static_cast<long>(0.1 * static_cast<double>(first) + 10 + l.threads)),
           static_cast<double>(retries), "",
           static_cast<double>(retries) <= 0.1 * static_cast<double>(first) + 10 + l.threads});
    }
    retry[l.tenant] = rj;
  }

  nlohmann::json runs = nlohmann::json::array();
  runs.push_back(runJson(Policy::kFair, "limited", records, info));
  std::string title =
      "rate-limit: a real fairschedd and 3 client processes (8, 8, 16 threads), retrying with "
      "runWithRetry.\n"
      "R: 40 requests/5s, T: 8000 tokens/5s (200-token requests), each offered 80 requests/s; "
      "C: 1 requests/1s flooded by 16 threads (max 2 attempts).\n"
      "Admissions = successful attempts by submit time; rejected = RATE_LIMITED after the "
      "last attempt.";
  ScenarioReport report =
      propertyReport("rate-limit", runs, checks, title,
                     {{"limits", limits}, {"retry", retry}, {"series", series}});
  char line[400];
  report.table +=
      "\nlimit       tenant  admitted  max_in_any_window  first_att  retries  "
      "wait-retry_after ms: min / p10 / p50 / p90 / max  (cap)\n";
  for (const LimitSetup& l : s) {
    const auto& lj = limits[l.tenant];
    const auto& j = retry[l.tenant]["wait_minus_retry_after_ms"];
    std::snprintf(line, sizeof line,
                  "%-16s %-4s %8.0f %18.0f %10llu %8llu   %6.1f / %6.1f / %6.1f / %6.1f / %6.1f  "
                  "(%.0f)\n",
                  l.limit.c_str(), l.tenant.c_str(), lj["admitted"].get<double>(),
                  lj["max_in_any_window"].get<double>(),
                  lj["first_attempts"].get<unsigned long long>(),
                  lj["retries"].get<unsigned long long>(), j["min"].get<double>(),
                  j["p10"].get<double>(), j["p50"].get<double>(), j["p90"].get<double>(),
                  j["max"].get<double>(), retry[l.tenant]["jitter_cap_ms"].get<double>());
    report.table += line;
  }
  const auto& b = retry["C"]["budget"];
  std::snprintf(line, sizeof line,
                "budget (C): drained at %.0f ms; after: %llu first attempts, %llu retries "
                "(ratio %.3f); rejected fraction overall %.3f\n",
                b["drained_at_ms"].get<double>(),
                b["first_attempts_after_drain"].get<unsigned long long>(),
                b["retries_after_drain"].get<unsigned long long>(),
                b["retry_ratio_after_drain"].get<double>(), b["rejected_fraction"].get<double>());
  report.table += line;
  return report;
}

}  // namespace fairsched::bench
