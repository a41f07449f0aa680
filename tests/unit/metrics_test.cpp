#include "daemon/metrics/metrics.hpp"

#include <gtest/gtest.h>
#include <prometheus/metric_family.h>

#include <atomic>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <variant>

#include "daemon/config/scheduler_setup.hpp"
#include "daemon/core/scheduler.hpp"
#include "daemon/server/server.hpp"

namespace fairsched::daemon {
namespace {

using Labels = std::map<std::string, std::string>;

config::Config makeConfig(std::uint32_t max_tenant_series, const std::string& tenants) {
  const std::string text = "[metrics]\nmax_tenant_series = " + std::to_string(max_tenant_series) +
                           "\n[[tiers]]\nname = \"paid\"\n"
                           "[endpoints.chat]\nmax_batch_requests = 4\n"
                           "[endpoints.embed]\nkind = \"batch\"\n" +
                           tenants;
  auto parsed = config::parseConfig(text, "test");
  if (auto* err = parsed.errorOrNull()) ADD_FAILURE() << err->toString();
  return parsed.value();
}

const std::string kTwoListed = "[tenants.acme]\ntier = \"paid\"\n[tenants.globex]\n";

struct Fixture {
  explicit Fixture(config::Config c) : cfg(std::move(c)), sched(config::buildSchedulerSpec(cfg)) {
    auto m = Metrics::create(cfg, sched);
    if (!m) {
      ADD_FAILURE() << m.error().message;
      return;
    }
    metrics = std::move(m).value();
  }
  TenantId open(const std::string& name) {
    const TenantId id = sched.tenants().acquire(name);
    metrics->tenantOpened(id, name);
    return id;
  }
  void publish(TimeNs now = 0) { metrics->publish(now, sched, stats, 1); }

  config::Config cfg;
  core::Scheduler sched;
  ServerStats stats;
  std::unique_ptr<Metrics> metrics;
};

bool matches(const prometheus::ClientMetric& m, const Labels& want) {
  std::size_t found = 0;
  for (const auto& l : m.label) {
    const auto it = want.find(l.name);
    if (it == want.end()) continue;
    if (it->second != l.value) return false;
    ++found;
  }
  return found == want.size();
}

// The value of the one metric of `family` with `labels`; -1 when absent.
double valueOf(const std::vector<prometheus::MetricFamily>& families, const std::string& family,
               const Labels& labels) {
  for (const auto& f : families) {
    if (f.name != family) continue;
    for (const auto& m : f.metric) {
      if (!matches(m, labels)) continue;
      if (f.type == prometheus::MetricType::Counter) return m.counter.value;
      if (f.type == prometheus::MetricType::Histogram)
        return static_cast<double>(m.histogram.sample_count);
      return m.gauge.value;
    }
  }
  return -1;
}

std::set<std::string> tenantLabels(const std::vector<prometheus::MetricFamily>& families) {
  std::set<std::string> out;
  for (const auto& f : families) {
    for (const auto& m : f.metric) {
      for (const auto& l : m.label) {
        if (l.name == "tenant") out.insert(l.value);
      }
    }
  }
  return out;
}

TEST(LatencyHistogram, BoundsAreInclusiveAndOverflowGoesToInf) {
  LatencyHistogram h;
  h.observe(100'000);  // exactly the first bound (100 µs)
  h.observe(100'001);
  h.observe(20 * kNsPerSec);
  h.observe(-5);  // clock oddities count as zero
  EXPECT_EQ(h.buckets[0], 2u);
  EXPECT_EQ(h.buckets[1], 1u);
  EXPECT_EQ(h.buckets[kLatencyBucketCount - 1], 1u);
  EXPECT_EQ(h.count, 4u);
  EXPECT_EQ(h.sum_ns, 100'000u + 100'001u + 20u * kNsPerSec);
}

TEST(Metrics, HundredThousandTenantsFoldIntoBoundedLabels) {
  Fixture fx(makeConfig(10, kTwoListed));
  constexpr int kTenants = 100'000;
  const TenantId acme = fx.open("acme");
  fx.metrics->admitted(acme, 0);
  for (int i = 0; i < kTenants; ++i) {
    const TenantId t = fx.open("org-" + std::to_string(i));
    fx.metrics->admitted(t, 0);
    if (i % 2 == 1) fx.metrics->rejected(t, 1, Status::kRateLimited);
  }
  fx.publish();
  const auto families = fx.metrics->collect();

  const std::set<std::string> labels = tenantLabels(families);
  // acme, globex (listed; globex holds no state, so it shows nowhere), the
  // first 10 unlisted tenants, and __other__.
  EXPECT_EQ(labels.size(), 1u + 10u + 1u);
  EXPECT_TRUE(labels.contains("acme"));
  EXPECT_TRUE(labels.contains("org-0"));
  EXPECT_TRUE(labels.contains("org-9"));
  EXPECT_FALSE(labels.contains("org-10"));
  EXPECT_TRUE(labels.contains(std::string(kOtherTenant)));

  EXPECT_EQ(valueOf(families, "fairsched_requests_admitted_total",
                    {{"tenant", "__other__"}, {"endpoint", "chat"}}),
            kTenants - 10);
  EXPECT_EQ(valueOf(families, "fairsched_requests_rejected_total",
                    {{"tenant", "__other__"}, {"endpoint", "embed"}, {"reason", "RATE_LIMITED"}}),
            (kTenants - 10) / 2);
  EXPECT_EQ(valueOf(families, "fairsched_requests_submitted_total",
                    {{"tenant", "org-1"}, {"endpoint", "chat"}}),
            1);
  EXPECT_EQ(valueOf(families, "fairsched_metrics_tenant_labels", {{"kind", "unlisted"}}), 10);
  EXPECT_EQ(valueOf(families, "fairsched_metrics_tenant_labels", {{"kind", "listed"}}), 2);

  // Every label set of a per-tenant family is within the documented bound:
  // (listed + max_tenant_series + 1) x (endpoints + 1).
  const std::size_t bound = (2 + 10 + 1) * (2 + 1);
  for (const auto& f : families) {
    if (f.name == "fairsched_requests_submitted_total") {
      EXPECT_LE(f.metric.size(), bound);
    }
  }
}

TEST(Metrics, ScrapesSeeTheLastPublishOnly) {
  Fixture fx(makeConfig(100, kTwoListed));
  const TenantId acme = fx.open("acme");
  fx.metrics->admitted(acme, 0);
  EXPECT_EQ(valueOf(fx.metrics->collect(), "fairsched_requests_admitted_total",
                    {{"tenant", "acme"}, {"endpoint", "chat"}}),
            -1);
  EXPECT_EQ(fx.metrics->publishDueAt(), 0);  // changed, never published: due at once
  fx.metrics->tick(5, fx.sched, fx.stats, 1);
  EXPECT_EQ(fx.metrics->publishDueAt(), kNever);  // nothing changed since
  EXPECT_EQ(valueOf(fx.metrics->collect(), "fairsched_requests_admitted_total",
                    {{"tenant", "acme"}, {"endpoint", "chat"}}),
            1);

  fx.metrics->admitted(acme, 0);
  fx.metrics->tick(6, fx.sched, fx.stats, 1);  // not due yet
  EXPECT_EQ(fx.metrics->publishDueAt(), 5 + kPublishInterval);
  EXPECT_EQ(valueOf(fx.metrics->collect(), "fairsched_requests_admitted_total",
                    {{"tenant", "acme"}, {"endpoint", "chat"}}),
            1);
  fx.metrics->tick(5 + kPublishInterval, fx.sched, fx.stats, 1);
  const auto families = fx.metrics->collect();
  EXPECT_EQ(valueOf(families, "fairsched_requests_admitted_total",
                    {{"tenant", "acme"}, {"endpoint", "chat"}}),
            2);
  EXPECT_EQ(valueOf(families, "fairsched_loop_iterations_total", {}), 3);
  EXPECT_EQ(valueOf(families, "fairsched_tenant_clients", {{"tenant", "acme"}}), 1);
}

TEST(Metrics, CompletionsFeedStatusTokensAndHistograms) {
  Fixture fx(makeConfig(100, kTwoListed));
  const TenantId acme = fx.open("acme");
  fx.metrics->admitted(acme, 0);
  fx.metrics->admitted(acme, 0);
  fx.metrics->completed(acme, 0, Status::kOk, 1'000, 501'000, 2'501'000, 40);
  fx.metrics->ended(acme, 0, Status::kDeadlineExceeded);
  fx.metrics->rejected(acme, 7, Status::kInvalid);  // endpoint id the daemon lacks
  fx.publish();
  const auto f = fx.metrics->collect();
  const Labels chat{{"tenant", "acme"}, {"endpoint", "chat"}};
  EXPECT_EQ(valueOf(f, "fairsched_requests_completed_total",
                    {{"tenant", "acme"}, {"endpoint", "chat"}, {"status", "OK"}}),
            1);
  EXPECT_EQ(valueOf(f, "fairsched_requests_completed_total",
                    {{"tenant", "acme"}, {"endpoint", "chat"}, {"status", "DEADLINE_EXCEEDED"}}),
            1);
  EXPECT_EQ(valueOf(f, "fairsched_tokens_served_total", chat), 40);
  EXPECT_EQ(valueOf(f, "fairsched_queue_wait_seconds", chat), 1);
  EXPECT_EQ(valueOf(f, "fairsched_end_to_end_seconds", chat), 1);
  EXPECT_EQ(valueOf(f, "fairsched_requests_rejected_total",
                    {{"tenant", "acme"}, {"endpoint", "__unknown__"}, {"reason", "INVALID"}}),
            1);
  for (const auto& fam : f) {
    if (fam.name != "fairsched_service_seconds") continue;
    ASSERT_EQ(fam.metric.size(), 2u);  // chat, and __unknown__ for the INVALID one
    ASSERT_TRUE(matches(fam.metric[0], chat));
    const auto& h = fam.metric[0].histogram;
    EXPECT_DOUBLE_EQ(h.sample_sum, 0.002);
    // 2 ms lands in the 2.5 ms bucket; cumulative counts from there on.
    for (const auto& b : h.bucket) EXPECT_EQ(b.cumulative_count, b.upper_bound >= 0.0025 ? 1u : 0u);
  }
}

TEST(Metrics, GaugesAreReadFromTheScheduler) {
  Fixture fx(makeConfig(0, kTwoListed));
  const TenantId acme = fx.open("acme");
  const TenantId stranger = fx.open("stranger");  // folded: max_tenant_series = 0
  for (const TenantId t : {acme, acme, stranger}) {
    core::Request r;
    r.tenant = t;
    r.input_tokens = 1;
    r.max_output_tokens = 1;
    ASSERT_EQ(fx.sched.submit(r, 0).status, Status::kOk);
  }
  fx.publish();
  const auto f = fx.metrics->collect();
  EXPECT_EQ(valueOf(f, "fairsched_tenant_queue_depth", {{"tenant", "acme"}, {"endpoint", "chat"}}),
            2);
  EXPECT_EQ(
      valueOf(f, "fairsched_tenant_queue_depth", {{"tenant", "__other__"}, {"endpoint", "chat"}}),
      1);
  EXPECT_EQ(valueOf(f, "fairsched_queue_depth", {{"endpoint", "chat"}}), 3);
  EXPECT_GE(valueOf(f, "fairsched_tenant_deficit", {{"tenant", "acme"}, {"endpoint", "chat"}}), 0);
  EXPECT_EQ(valueOf(f, "fairsched_tenant_deficit", {{"tenant", "__other__"}, {"endpoint", "chat"}}),
            -1);
  EXPECT_EQ(valueOf(f, "fairsched_tenants", {}), 3);  // acme, globex, stranger

  fx.metrics->tenantClosed(acme);
  fx.publish();
  EXPECT_EQ(valueOf(fx.metrics->collect(), "fairsched_tenant_clients", {{"tenant", "acme"}}), -1);
}

TEST(Metrics, RemapListsNewTenantsAndKeepsEverySum) {
  Fixture fx(makeConfig(0, kTwoListed));
  const TenantId acme = fx.open("acme");
  const TenantId newco = fx.open("newco");  // folded into __other__
  for (int i = 0; i < 5; ++i) fx.metrics->admitted(acme, 0);
  for (int i = 0; i < 3; ++i) fx.metrics->admitted(newco, 0);

  // The reload lists newco and drops acme, still with no unlisted labels.
  const config::Config next = makeConfig(0, "[tenants.newco]\n");
  core::Scheduler sched(config::buildSchedulerSpec(next));
  const TenantId newco2 = *sched.tenants().find("newco");
  fx.metrics->remapTenants(next, sched);
  fx.metrics->admitted(newco2, 0);
  fx.metrics->publish(0, sched, fx.stats, 1);
  const auto f = fx.metrics->collect();
  EXPECT_EQ(
      valueOf(f, "fairsched_requests_admitted_total", {{"tenant", "newco"}, {"endpoint", "chat"}}),
      1);
  // acme's 5 and newco's 3 from before the reload.
  EXPECT_EQ(valueOf(f, "fairsched_requests_admitted_total",
                    {{"tenant", "__other__"}, {"endpoint", "chat"}}),
            8);
  EXPECT_EQ(
      valueOf(f, "fairsched_requests_admitted_total", {{"tenant", "acme"}, {"endpoint", "chat"}}),
      -1);
}

TEST(Metrics, OpenRingsFollowTheirTenantToANewLabelOnRemap) {
  Fixture fx(makeConfig(0, ""));  // no unlisted labels: newco folds into __other__
  const TenantId newco = fx.open("newco");
  fx.publish();
  EXPECT_EQ(valueOf(fx.metrics->collect(), "fairsched_tenant_clients", {{"tenant", "__other__"}}),
            1);
  const config::Config next = makeConfig(0, "[tenants.newco]\n");  // the reload lists it
  ASSERT_EQ(fx.sched.reconfigure(config::buildSchedulerSpec(next)), std::nullopt);
  fx.metrics->remapTenants(next, fx.sched);
  fx.publish();
  auto f = fx.metrics->collect();
  EXPECT_EQ(valueOf(f, "fairsched_tenant_clients", {{"tenant", "newco"}}), 1);
  EXPECT_EQ(valueOf(f, "fairsched_tenant_clients", {{"tenant", "__other__"}}), 0);
  fx.metrics->tenantClosed(newco);
  fx.publish();
  f = fx.metrics->collect();  // 0, or no series at all
  EXPECT_LE(valueOf(f, "fairsched_tenant_clients", {{"tenant", "newco"}}), 0);
  EXPECT_LE(valueOf(f, "fairsched_tenant_clients", {{"tenant", "__other__"}}), 0);
}

TEST(Metrics, RemapKeepsUnlabelledTenantsInFirstComeOrderWithinTheBudget) {
  Fixture fx(makeConfig(2, ""));
  const TenantId a = fx.open("a");
  const TenantId b = fx.open("b");
  fx.metrics->admitted(a, 0);
  fx.metrics->admitted(b, 0);
  const config::Config next = makeConfig(1, "");
  fx.metrics->remapTenants(next, fx.sched);
  fx.metrics->admitted(a, 0);
  fx.metrics->admitted(b, 0);
  fx.publish();
  const auto f = fx.metrics->collect();
  EXPECT_EQ(
      valueOf(f, "fairsched_requests_admitted_total", {{"tenant", "a"}, {"endpoint", "chat"}}), 2);
  EXPECT_EQ(
      valueOf(f, "fairsched_requests_admitted_total", {{"tenant", "b"}, {"endpoint", "chat"}}), -1);
  EXPECT_EQ(valueOf(f, "fairsched_requests_admitted_total",
                    {{"tenant", "__other__"}, {"endpoint", "chat"}}),
            2);
}

// The loop thread counts and publishes while another thread scrapes; run
// under TSan this is the handoff's race check.
TEST(Metrics, ScrapingWhilePublishingIsRaceFree) {
  Fixture fx(makeConfig(100, kTwoListed));
  const TenantId acme = fx.open("acme");
  std::atomic<bool> stop{false};
  std::thread scraper([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      const auto f = fx.metrics->collect();
      const double v = valueOf(f, "fairsched_requests_admitted_total",
                               {{"tenant", "acme"}, {"endpoint", "chat"}});
      ASSERT_TRUE(v == -1 || v >= 1);
    }
  });
  for (int i = 0; i < 20'000; ++i) {
    fx.metrics->admitted(acme, 0);
    if (i % 100 == 0) fx.open("t" + std::to_string(i));  // grows the series now and then
    if (i % 50 == 0) fx.publish();
  }
  fx.publish();
  stop = true;
  scraper.join();
  EXPECT_EQ(valueOf(fx.metrics->collect(), "fairsched_requests_admitted_total",
                    {{"tenant", "acme"}, {"endpoint", "chat"}}),
            20'000);
}

}  // namespace
}  // namespace fairsched::daemon
