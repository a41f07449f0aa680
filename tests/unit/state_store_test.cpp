// The daemon's state across a restart (daemon/server/state_store.hpp): limit
// windows, fairness service and cost estimates written and read back with
// the time that passed applied; a changed config keeping what still applies;
// every kind of bad file set aside with the daemon starting clean; 100,000
// tenants written in bounded slices and restored.
#include "daemon/server/state_store.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "daemon/config/scheduler_setup.hpp"
#include "tests/support/daemon_config.hpp"
#include "tests/support/temp_dir_test.hpp"

namespace fairsched::daemon {
namespace {

using core::Scheduler;

constexpr TimeNs kHour = 3600 * kNsPerSec;
constexpr TimeNs kDay = 24 * kHour;

std::string configText(const std::string& limits, const std::string& endpoint = "chat",
                       const std::string& fairness = "drr") {
  testing::DaemonConfigText c;
  c.tiers = {"paid", "trial"};
  c.body = "[endpoints." + endpoint +
           "]\nmax_batch_requests = 64\nmax_batch_tokens = 65536\nmax_output_tokens = 64\n"
           "cost = \"adaptive\"\nfairness = \"" +
           fairness + "\"\nlimits = [" + limits + "]\n";
  return c.text();
}

core::SchedulerSpec specOf(const std::string& text) {
  auto parsed = config::parseConfig(text, "test");
  if (auto* err = parsed.errorOrNull()) throw std::invalid_argument(err->toString());
  return config::buildSchedulerSpec(parsed.value());
}

// Admits `n` one-token requests of tenant `name` (tier hint `tier`) at `now`,
// completing each at once; how many were admitted.
int admit(Scheduler& s, const std::string& name, int n, TimeNs now, TierId tier = 0) {
  const TenantId t = s.tenants().acquire(name, tier);
  int ok = 0;
  std::vector<core::Done> done;
  core::Batch batch;
  for (int i = 0; i < n; ++i) {
    core::Request r;
    r.id = static_cast<std::uint64_t>(i) + 1;
    r.tenant = t;
    r.input_tokens = 1;
    r.max_output_tokens = 4;
    const core::Admission a = s.submit(r, now);
    if (a.status != Status::kOk) continue;
    ++ok;
    if (!s.nextBatch(0, now, batch, done, true)) ADD_FAILURE() << "request " << i << " not taken";
    for (const core::Dispatched& d : batch.requests) s.complete(d.handle, 2, now);
  }
  s.tenants().release(t);
  return ok;
}

std::uint64_t used(Scheduler& s, const std::string& name, TimeNs now, std::size_t limit = 0) {
  const auto t = s.tenants().find(name);
  if (!t) return 0;
  const auto u = s.limitUsage(*t, 0, now);
  return limit < u.size() ? u[limit].used : 0;
}

// The whole state of `s` as a file stamped `at`.
std::string encode(const Scheduler& s, TimeNs now, const StateClock& at) {
  StateEncoder enc(s);
  enc.begin();
  for (EndpointId e = 0; e < s.spec().endpoints.size(); ++e) {
    enc.endpoint(e);
    std::size_t cursor = 0;
    while (!const_cast<Scheduler&>(s).saveStates(e, cursor, 1000, now, enc)) {
    }
  }
  return enc.finish(at);
}

StateClock clockAt(TimeNs mono, TimeNs wall = 1'800'000'000 * kNsPerSec,
                   std::string boot = "boot-a") {
  return StateClock{wall, mono, std::move(boot)};
}

TEST(StateRestore, ADayOfQuotaSurvivesARestartAndAgesWithTheTimeThatPassed) {
  Scheduler before(specOf(configText("\"1000 requests/day\"")));
  const TimeNs t0 = 50 * kDay;  // the old run's clock
  ASSERT_EQ(admit(before, "org-1", 600, t0), 600);
  const std::string file = encode(before, t0, clockAt(t0));

  // The next run's clock starts near zero (a reboot), 2 h of wall clock later.
  Scheduler after(specOf(configText("\"1000 requests/day\"")));
  const TimeNs t1 = 5 * kNsPerSec;
  auto r =
      restoreState(file, after, clockAt(t1, 1'800'000'000 * kNsPerSec + 2 * kHour, "boot-b"), t1);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->states, 1u);
  EXPECT_EQ(r->elapsed, 2 * kHour) << "across boots the wall clock says how long";
  EXPECT_EQ(used(after, "org-1", t1), 600u);
  EXPECT_EQ(admit(after, "org-1", 500, t1), 400) << "the day's 1000 are 600 used";
  // A day after the admissions (22 h into this run) the window is empty again.
  EXPECT_EQ(admit(after, "org-1", 10, t1 + kDay - 2 * kHour + kNsPerSec), 10);
}

TEST(StateRestore, WithinOneBootTheMonotonicClockSaysHowLongTheDaemonWasDown) {
  Scheduler before(specOf(configText("\"100 requests/minute\"")));
  const TimeNs t0 = 10 * kHour;
  ASSERT_EQ(admit(before, "a", 100, t0), 100);
  const std::string file = encode(before, t0, clockAt(t0));
  // 30 s later by the monotonic clock; the wall clock jumped back a day (NTP).
  Scheduler after(specOf(configText("\"100 requests/minute\"")));
  auto r = restoreState(file, after, clockAt(t0 + 30 * kNsPerSec, 0), t0 + 30 * kNsPerSec);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->elapsed, 30 * kNsPerSec);
  EXPECT_EQ(admit(after, "a", 1, t0 + 30 * kNsPerSec), 0) << "the minute is not over";
  EXPECT_EQ(admit(after, "a", 100, t0 + 61 * kNsPerSec), 100) << "the minute is over";
}

TEST(StateRestore, StateOlderThanEveryWindowRestoresNothingToCount) {
  Scheduler before(specOf(configText("\"10 requests/hour\"")));
  ASSERT_EQ(admit(before, "a", 10, kHour), 10);
  const std::string file = encode(before, kHour, clockAt(kHour));
  Scheduler after(specOf(configText("\"10 requests/hour\"")));
  auto r = restoreState(file, after, clockAt(kHour + 2 * kHour), kNsPerSec);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(admit(after, "a", 10, kNsPerSec), 10);
}

TEST(StateRestore, AChangedConfigKeepsWhatStillAppliesAndDropsTheRest) {
  Scheduler before(specOf(configText("\"1000 requests/day\", \"1M tokens/hour\"")));
  ASSERT_EQ(admit(before, "a", 300, kDay), 300);
  const std::string file = encode(before, kDay, clockAt(kDay));

  // The day's amount shrank (usage kept), the hourly token limit became a
  // minute one (a different limit: starts empty).
  Scheduler after(specOf(configText("\"500 requests/day\", \"1M tokens/minute\"")));
  auto r = restoreState(file, after, clockAt(kDay), kDay);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(used(after, "a", kDay, 0), 300u) << "a changed amount keeps the usage";
  EXPECT_EQ(used(after, "a", kDay, 1), 0u) << "a limit the config no longer has is dropped";
  EXPECT_EQ(admit(after, "a", 300, kDay), 200);

  // An endpoint the config no longer has: its states are dropped.
  Scheduler renamed(specOf(configText("\"1000 requests/day\"", "generate")));
  auto r2 = restoreState(file, renamed, clockAt(kDay), kDay);
  ASSERT_TRUE(r2.ok()) << r2.error();
  EXPECT_EQ(r2->states, 0u);
  EXPECT_EQ(r2->dropped, 1u);
  EXPECT_EQ(admit(renamed, "a", 1000, kDay), 1000);
}

TEST(StateRestore, TheCostEstimateTierAndFairnessServiceComeBack) {
  const std::string text = configText("\"1000 requests/day\"", "chat", "recent");
  Scheduler before(specOf(text));
  ASSERT_EQ(admit(before, "t", 20, kHour, 1), 20);  // tier "trial"
  const TenantId bt = *before.tenants().find("t");
  const auto was = before.view(bt, 0, kHour);
  ASSERT_TRUE(was);
  ASSERT_GE(was->expected_output, 0.0);
  const std::string file = encode(before, kHour, clockAt(kHour));

  Scheduler after(specOf(text));
  auto r = restoreState(file, after, clockAt(kHour), 7 * kNsPerSec);
  ASSERT_TRUE(r.ok()) << r.error();
  const auto t = after.tenants().find("t");
  ASSERT_TRUE(t);
  EXPECT_EQ(after.tenants()[*t].tier, 1) << "an unlisted tenant keeps its tier";
  const auto is = after.view(*t, 0, 7 * kNsPerSec);
  ASSERT_TRUE(is);
  EXPECT_DOUBLE_EQ(is->expected_output, was->expected_output);
}

// Files a test crafts: a valid one with its payload changed and the
// checksum made right again, so the structural checks are what refuse it.
std::string withPayload(std::string file, std::size_t at, const std::string& bytes) {
  file.replace(at, bytes.size(), bytes);
  const std::uint64_t payload = file.size() - kStateHeaderBytes;
  const std::uint64_t sum =
      stateChecksum(std::span<const char>(file.data() + kStateHeaderBytes, payload));
  std::memcpy(file.data() + 16, &payload, 8);
  std::memcpy(file.data() + 24, &sum, 8);
  return file;
}

TEST(StateFile, EveryKindOfBadFileIsRefusedWithWhatIsWrong) {
  Scheduler s(specOf(configText("\"1000 requests/day\"")));
  ASSERT_EQ(admit(s, "org-1", 5, kHour), 5);
  const std::string good = encode(s, kHour, clockAt(kHour));
  StateClock saved;
  ASSERT_EQ(decodeState(good, saved, nullptr), std::nullopt);
  auto refused = [&](const std::string& bytes) {
    StateClock c;
    const auto err = decodeState(bytes, c, nullptr);
    return err.value_or("(accepted)");
  };
  EXPECT_EQ(refused(""), "shorter than a state file's header");
  EXPECT_EQ(refused(std::string(200, 'x')), "not a fairschedd state file");
  EXPECT_NE(refused(good.substr(0, good.size() - 3)).find("truncated"), std::string::npos);
  std::string torn = good;
  torn[kStateHeaderBytes + 5] ^= 0x40;
  EXPECT_NE(refused(torn).find("checksum mismatch"), std::string::npos);
  std::string older = good;
  const std::uint32_t v0 = 0;
  std::memcpy(older.data() + 8, &v0, 4);
  EXPECT_EQ(refused(older), "state file version 0; this fairschedd reads version 1");
  std::string before_1970 = withPayload(good, kStateHeaderBytes, good.substr(kStateHeaderBytes, 1));
  const std::int64_t minus = INT64_MIN;
  std::memcpy(before_1970.data() + 32, &minus, 8);
  EXPECT_EQ(refused(before_1970), "a clock before 1970 or before boot");
  std::string swapped = good;
  const std::uint32_t other_order = 0x0D0C0B0A;
  std::memcpy(swapped.data() + 12, &other_order, 4);
  EXPECT_EQ(refused(swapped), "written on a machine of another byte order");

  // Layout after the header: 'E', len 4, "chat", f64 rate, 'T', len 5, "org-1", ...
  const std::size_t endpoint = kStateHeaderBytes;
  const std::size_t tenant = endpoint + 1 + 1 + 4 + 8;
  const std::size_t tenant_name = tenant + 2;
  EXPECT_NE(refused(withPayload(good, endpoint, "X")).find("an unknown record"), std::string::npos);
  EXPECT_NE(refused(withPayload(good, tenant_name, "or\ng")).find("not a valid name"),
            std::string::npos);
  ASSERT_EQ(good[endpoint], 'E');
  ASSERT_EQ(good[tenant], 'T');
  EXPECT_NE(refused(withPayload(good, endpoint + 2, "c\nat")).find("not a valid name"),
            std::string::npos);
  // The tenant's record: name, tier "paid", expected output, service, limits.
  const std::size_t limits = tenant_name + 5 + 1 + 4 + 8 + 8;
  EXPECT_NE(refused(withPayload(good, limits, std::string(1, '\xff'))).find("more limits"),
            std::string::npos);
  const std::size_t buckets = limits + 1 + 1 + 8;
  EXPECT_NE(refused(withPayload(good, buckets, std::string(1, '\x40'))).find("more buckets"),
            std::string::npos);
  const double nan = std::nan("");
  std::string nan_bytes(8, '\0');
  std::memcpy(nan_bytes.data(), &nan, 8);
  EXPECT_NE(refused(withPayload(good, endpoint + 6, nan_bytes)).find("rate out of range"),
            std::string::npos);
  const std::int64_t negative = -5;
  std::string neg(8, '\0');
  std::memcpy(neg.data(), &negative, 8);
  EXPECT_NE(refused(withPayload(good, buckets + 1 + 8, neg)).find("age out of range"),
            std::string::npos);
}

class StateStoreDir : public testing::TempDirTest {
 protected:
  StateStoreDir() : TempDirTest("fairsched-state") {}
  std::string file() const { return dir_ + "/fairschedd.state"; }
  std::vector<std::string> setAside() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(dir_)) {
      const std::string n = e.path().filename().string();
      if (n.rfind("fairschedd.state.bad-", 0) == 0) out.push_back(n);
    }
    return out;
  }
};

TEST_F(StateStoreDir, SavesAtStopAndTheNextStartRestores) {
  const std::string text = configText("\"1000 requests/day\"");
  {
    Scheduler s(specOf(text));
    StateStore store;
    store.open(dir_, 5 * kNsPerSec, s, kHour);
    EXPECT_EQ(store.status(0).restored_from, "no state file: started clean");
    ASSERT_EQ(admit(s, "org-1", 600, kHour), 600);
    store.saveNow(s, kHour);
    EXPECT_EQ(store.status(0).problem, "");
    EXPECT_EQ(store.status(0).states, 1u);
  }
  struct stat st {};
  ASSERT_EQ(stat(file().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  Scheduler s(specOf(text));
  StateStore store;
  store.open(dir_, 5 * kNsPerSec, s, kHour);
  EXPECT_EQ(store.status(0).restored_from, "restored 1 tenant states");
  EXPECT_EQ(admit(s, "org-1", 500, kHour), 400);
}

TEST_F(StateStoreDir, ACorruptFileIsSetAsideNamedAndTheDaemonStartsClean) {
  const std::string text = configText("\"1000 requests/day\"");
  for (const std::string& bad : {std::string("garbage"), std::string(100, '\0')}) {
    std::ofstream(file(), std::ios::binary) << bad;
    Scheduler s(specOf(text));
    StateStore store;
    store.open(dir_, 5 * kNsPerSec, s, kHour);
    EXPECT_TRUE(store.enabled());
    EXPECT_NE(store.status(0).restored_from.find("set aside"), std::string::npos)
        << store.status(0).restored_from;
    EXPECT_FALSE(std::filesystem::exists(file()));
    ASSERT_EQ(setAside().size(), 1u);
    std::ifstream in(dir_ + "/" + setAside()[0], std::ios::binary);
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), bad) << "kept as it was";
    std::filesystem::remove(dir_ + "/" + setAside()[0]);
    EXPECT_EQ(admit(s, "org-1", 1000, kHour), 1000) << "clean";
  }
}

TEST_F(StateStoreDir, ASecondDaemonOnTheSameDirectoryKeepsNoState) {
  Scheduler a(specOf(configText("\"1000 requests/day\"")));
  Scheduler b(specOf(configText("\"1000 requests/day\"")));
  StateStore first, second;
  first.open(dir_, kNsPerSec, a, kHour);
  second.open(dir_, kNsPerSec, b, kHour);
  EXPECT_TRUE(first.enabled());
  EXPECT_FALSE(second.enabled());
  EXPECT_NE(second.status(0).problem.find("in use by another fairschedd"), std::string::npos)
      << second.status(0).problem;
}

TEST_F(StateStoreDir, ADirectoryThatCannotBeMadeKeepsNoStateAndSaysWhy) {
  Scheduler s(specOf(configText("\"1000 requests/day\"")));
  StateStore store;
  std::ofstream(dir_ + "/file") << "x";
  store.open(dir_ + "/file/state", kNsPerSec, s, kHour);
  EXPECT_FALSE(store.enabled());
  EXPECT_NE(store.status(0).problem.find("cannot create"), std::string::npos)
      << store.status(0).problem;
  store.saveNow(s, kHour);  // nothing, and no crash
}

// 100,000 tenants each with a day's usage: the loop's slices stay small and
// everything comes back. Prints the figures (docs/benchmarks.md has them).
TEST_F(StateStoreDir, AHundredThousandTenantsAreWrittenInBoundedSlicesAndRestored) {
  constexpr int kTenants = 100'000;
  const std::string text = configText("\"1000 requests/day\", \"1M tokens/hour\"");
  Scheduler s(specOf(text));
  auto store_owner = std::make_unique<StateStore>();
  StateStore& store = *store_owner;
  store.open(dir_, kNsPerSec, s, kHour);
  for (int i = 0; i < kTenants; ++i) admit(s, "org-" + std::to_string(i), 1 + i % 3, kHour);
  // A snapshot as the loop takes it: one slice per tick.
  std::uint64_t activity = 1;
  int ticks = 0;
  const auto t0 = std::chrono::steady_clock::now();
  do {
    store.tick(s, kHour + kNsPerSec, activity);
    ++ticks;
  } while (store.dueAt(kHour + kNsPerSec, activity) == kHour + kNsPerSec && ticks < 1000);
  while (store.status(0).writes == 0 && store.status(0).failures == 0 &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60)) {
    store.tick(s, kHour + kNsPerSec, activity);
  }
  const StateStore::Status st = store.status(0);
  ASSERT_EQ(st.writes, 1u) << st.problem;
  EXPECT_EQ(st.states, static_cast<std::size_t>(kTenants));
  EXPECT_GE(ticks, kTenants / static_cast<int>(StateStore::kStatesPerPass))
      << "one slice per loop pass";
  std::printf("100000 tenants: %zu bytes, %d slices, longest slice %.2f ms, all slices %.1f ms\n",
              st.bytes, ticks, static_cast<double>(st.slice_max_ns) / 1e6,
              static_cast<double>(st.snapshot_ns) / 1e6);

  store_owner.reset();  // the daemon stopped: its lock is released
  Scheduler again(specOf(text));
  StateStore reopened;
  const auto r0 = std::chrono::steady_clock::now();
  reopened.open(dir_, kNsPerSec, again, kHour + 2 * kNsPerSec);
  const double restore_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - r0).count();
  std::printf("restored in %.1f ms\n", restore_ms);
  EXPECT_EQ(reopened.status(0).states, static_cast<std::size_t>(kTenants));
  for (int i : {0, 1, 2, 77'777, kTenants - 1}) {
    EXPECT_EQ(used(again, "org-" + std::to_string(i), kHour + 2 * kNsPerSec),
              static_cast<std::uint64_t>(1 + i % 3))
        << "tenant " << i;
  }
}

}  // namespace
}  // namespace fairsched::daemon
