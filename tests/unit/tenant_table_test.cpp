#include "daemon/core/tenant_table.hpp"

#include <gtest/gtest.h>
#include <malloc.h>

#include <cstdint>
#include <cstdio>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace fairsched::core {
namespace {

LimitSpec perMinute(std::uint64_t requests) {
  return LimitSpec{LimitUnit::kRequests, requests, 60 * kNsPerSec};
}

// Two tiers on one endpoint:
//   gold: weight 4, queue 500, 6000 req/min      free: weight 1, queue 50, 60 req/min
// Listed: acme (gold, own limits), beta and gamma (free, tier limits).
SchedulerSpec makeSpec() {
  SchedulerSpec s;
  s.endpoints.push_back(EndpointSpec{});
  s.endpoints.back().name = "chat";
  s.tiers.push_back(TierSpec{"gold", 0.2, 4.0, 500, 0});
  s.tiers.push_back(TierSpec{"free", 0.0, 1.0, 50, 0});
  s.tier_limits.push_back(LimitTable{{perMinute(6000)}});
  s.tier_limits.push_back(LimitTable{{perMinute(60)}});
  s.tenants.push_back(TenantSpec{"acme", 0, 8.0, 1000, LimitTable{{perMinute(100'000)}}});
  s.tenants.push_back(TenantSpec{"beta", 1, 2.0, 20, std::nullopt});
  s.tenants.push_back(TenantSpec{"gamma", 1, 0.5, 30, std::nullopt});
  s.default_tier = 1;
  return s;
}

TenantId idOf(const TenantTable& t, std::string_view name) {
  const auto id = t.find(name);
  if (!id) {
    ADD_FAILURE() << "tenant '" << name << "' not found";
    return kNoTenant;
  }
  return *id;
}

TEST(TenantTable, EmptySpecHasNoTenants) {
  const SchedulerSpec spec;
  const TenantTable t(spec);
  EXPECT_EQ(t.size(), 0u);
  EXPECT_EQ(t.capacity(), 0u);
  EXPECT_FALSE(t.find("acme").has_value());
  EXPECT_FALSE(t.valid(0));
}

TEST(TenantTable, EmptySpecCannotCreateTenants) {
  const SchedulerSpec spec;  // no tiers at all: default_tier 0 is out of range
  TenantTable t(spec);
  EXPECT_EQ(t.acquire("acme"), kNoTenant);
  EXPECT_EQ(t.acquire("acme", TierId{0}), kNoTenant);
  EXPECT_EQ(t.size(), 0u);
}

TEST(TenantTable, ListedTenantsAreFoundWithTheirPolicy) {
  const SchedulerSpec spec = makeSpec();
  const TenantTable t(spec);
  EXPECT_EQ(t.size(), 3u);

  const TenantTable::Entry& acme = t[idOf(t, "acme")];
  EXPECT_EQ(acme.name, "acme");
  EXPECT_EQ(acme.tier, 0);
  EXPECT_EQ(acme.weight, 8.0);
  EXPECT_EQ(acme.queue_limit, 1000u);
  EXPECT_TRUE(acme.listed);
  EXPECT_TRUE(acme.live);
  EXPECT_EQ(acme.refs, 0u);

  const TenantTable::Entry& beta = t[idOf(t, "beta")];
  EXPECT_EQ(beta.name, "beta");
  EXPECT_EQ(beta.tier, 1);
  EXPECT_EQ(beta.weight, 2.0);
  EXPECT_EQ(beta.queue_limit, 20u);
  EXPECT_TRUE(beta.listed);

  const TenantTable::Entry& gamma = t[idOf(t, "gamma")];
  EXPECT_EQ(gamma.tier, 1);
  EXPECT_EQ(gamma.weight, 0.5);
  EXPECT_EQ(gamma.queue_limit, 30u);
}

TEST(TenantTable, ListedTenantsGetDistinctValidIds) {
  const SchedulerSpec spec = makeSpec();
  const TenantTable t(spec);
  std::set<TenantId> ids;
  for (const char* name : {"acme", "beta", "gamma"}) {
    const TenantId id = idOf(t, name);
    EXPECT_TRUE(t.valid(id)) << name;
    EXPECT_LT(id, t.capacity()) << name;
    ids.insert(id);
  }
  EXPECT_EQ(ids.size(), 3u);
}

TEST(TenantTable, ListedTenantWithOwnLimitsUsesItsOwnTable) {
  const SchedulerSpec spec = makeSpec();
  const TenantTable t(spec);
  const TenantTable::Entry& acme = t[idOf(t, "acme")];
  ASSERT_NE(acme.limits, nullptr);
  EXPECT_EQ(*acme.limits, *spec.tenants[0].limits);
  EXPECT_NE(*acme.limits, spec.tier_limits[0]);
}

TEST(TenantTable, ListedTenantWithoutLimitsUsesItsTiersTable) {
  const SchedulerSpec spec = makeSpec();
  const TenantTable t(spec);
  const TenantTable::Entry& beta = t[idOf(t, "beta")];
  const TenantTable::Entry& gamma = t[idOf(t, "gamma")];
  ASSERT_NE(beta.limits, nullptr);
  EXPECT_EQ(*beta.limits, spec.tier_limits[1]);
  EXPECT_EQ(beta.limits, gamma.limits);  // shared per tier, not copied per tenant
}

TEST(TenantTable, LimitTablesOutliveTheSpecsCopy) {
  // "owned by the table": the tenant's limits stay readable after the
  // caller's own tables change.
  SchedulerSpec spec = makeSpec();
  const TenantTable t(spec);
  spec.tier_limits[1][0][0] = perMinute(1);
  spec.tenants[0].limits->at(0)[0] = perMinute(2);
  EXPECT_EQ(t[idOf(t, "beta")].limits->at(0).at(0), perMinute(60));
  EXPECT_EQ(t[idOf(t, "acme")].limits->at(0).at(0), perMinute(100'000));
}

TEST(TenantTable, AcquiringListedTenantReturnsItsIdAndTakesARef) {
  const SchedulerSpec spec = makeSpec();
  TenantTable t(spec);
  const TenantId id = idOf(t, "beta");
  EXPECT_EQ(t.acquire("beta"), id);
  EXPECT_EQ(t[id].refs, 1u);
  EXPECT_EQ(t.acquire("beta"), id);
  EXPECT_EQ(t[id].refs, 2u);
  EXPECT_EQ(t.size(), 3u);
}

TEST(TenantTable, ListedTenantIgnoresTierHint) {
  const SchedulerSpec spec = makeSpec();
  TenantTable t(spec);
  const TenantId id = t.acquire("beta", TierId{0});
  ASSERT_NE(id, kNoTenant);
  EXPECT_EQ(t[id].tier, 1);
  EXPECT_EQ(t[id].weight, 2.0);
  EXPECT_EQ(t[id].queue_limit, 20u);
}

TEST(TenantTable, LookupTakesAnyStringView) {
  const SchedulerSpec spec = makeSpec();
  TenantTable t(spec);
  const std::string_view longer = "acme-and-more";
  EXPECT_EQ(t.find(longer.substr(0, 4)), t.find("acme"));
  EXPECT_EQ(t.acquire(longer.substr(0, 4)), idOf(t, "acme"));
  EXPECT_FALSE(t.find("Acme").has_value());
  EXPECT_FALSE(t.find("acm").has_value());
  EXPECT_FALSE(t.find(longer).has_value());
}

TEST(TenantTable, UnlistedTenantIsUnknownUntilAcquired) {
  const SchedulerSpec spec = makeSpec();
  TenantTable t(spec);
  EXPECT_FALSE(t.find("newco").has_value());
  const TenantId id = t.acquire("newco");
  ASSERT_NE(id, kNoTenant);
  EXPECT_EQ(t.find("newco"), id);
  EXPECT_TRUE(t.valid(id));
  EXPECT_EQ(t.size(), 4u);
}

TEST(TenantTable, UnlistedTenantIsCreatedWithTierHintDefaults) {
  const SchedulerSpec spec = makeSpec();
  TenantTable t(spec);
  const TenantId id = t.acquire("newco", TierId{0});
  ASSERT_NE(id, kNoTenant);
  const TenantTable::Entry& e = t[id];
  EXPECT_EQ(e.name, "newco");
  EXPECT_EQ(e.tier, 0);
  EXPECT_EQ(e.weight, 4.0);
  EXPECT_EQ(e.queue_limit, 500u);
  ASSERT_NE(e.limits, nullptr);
  EXPECT_EQ(*e.limits, spec.tier_limits[0]);
  EXPECT_FALSE(e.listed);
  EXPECT_TRUE(e.live);
  EXPECT_EQ(e.refs, 1u);
}

TEST(TenantTable, UnlistedTenantWithoutHintGetsDefaultTier) {
  const SchedulerSpec spec = makeSpec();  // default_tier = 1
  TenantTable t(spec);
  const TenantId id = t.acquire("walk-in");
  ASSERT_NE(id, kNoTenant);
  EXPECT_EQ(t[id].tier, 1);
  EXPECT_EQ(t[id].weight, 1.0);
  EXPECT_EQ(t[id].queue_limit, 50u);
  EXPECT_EQ(*t[id].limits, spec.tier_limits[1]);
  // Shares the tier's table with the listed tenants of that tier.
  EXPECT_EQ(t[id].limits, t[idOf(t, "beta")].limits);
}

TEST(TenantTable, LastTierIsAValidHint) {
  const SchedulerSpec spec = makeSpec();
  TenantTable t(spec);
  const TenantId id = t.acquire("edge", static_cast<TierId>(spec.tiers.size() - 1));
  ASSERT_NE(id, kNoTenant);
  EXPECT_EQ(t[id].tier, spec.tiers.size() - 1);
}

TEST(TenantTable, OutOfRangeTierHintGivesNoTenant) {
  const SchedulerSpec spec = makeSpec();
  TenantTable t(spec);
  EXPECT_EQ(t.acquire("newco", static_cast<TierId>(spec.tiers.size())), kNoTenant);
  EXPECT_EQ(t.acquire("newco", std::numeric_limits<TierId>::max()), kNoTenant);
  EXPECT_FALSE(t.find("newco").has_value());
  EXPECT_EQ(t.size(), 3u);
  EXPECT_EQ(t.capacity(), 3u);  // no slot was taken
}

TEST(TenantTable, OutOfRangeDefaultTierGivesNoTenant) {
  SchedulerSpec spec = makeSpec();
  spec.default_tier = 2;
  TenantTable t(spec);
  EXPECT_EQ(t.acquire("walk-in"), kNoTenant);
  EXPECT_FALSE(t.find("walk-in").has_value());
  EXPECT_NE(t.acquire("walk-in", TierId{1}), kNoTenant);  // an explicit hint still works
}

TEST(TenantTable, UnlistedTenantIsForgottenWhenItsRefsDropToZero) {
  const SchedulerSpec spec = makeSpec();
  TenantTable t(spec);
  const TenantId id = t.acquire("newco");
  ASSERT_EQ(t.acquire("newco"), id);
  EXPECT_EQ(t[id].refs, 2u);
  t.release(id);
  EXPECT_EQ(t.find("newco"), id);
  EXPECT_TRUE(t.valid(id));
  t.release(id);
  EXPECT_FALSE(t.find("newco").has_value());
  EXPECT_FALSE(t.valid(id));
  EXPECT_EQ(t.size(), 3u);
}

TEST(TenantTable, RetainKeepsUnlistedTenantAlive) {
  const SchedulerSpec spec = makeSpec();
  TenantTable t(spec);
  const TenantId id = t.acquire("newco");
  t.retain(id);  // e.g. per-endpoint state still holds limit windows
  EXPECT_EQ(t[id].refs, 2u);
  t.release(id);
  EXPECT_TRUE(t.valid(id));
  EXPECT_EQ(t.find("newco"), id);
  t.release(id);
  EXPECT_FALSE(t.valid(id));
}

TEST(TenantTable, ForgottenTenantsIdIsReused) {
  const SchedulerSpec spec = makeSpec();
  TenantTable t(spec);
  const TenantId first = t.acquire("one-shot");
  const std::size_t capacity = t.capacity();
  t.release(first);
  const TenantId second = t.acquire("someone-else", TierId{0});
  EXPECT_EQ(second, first);
  EXPECT_EQ(t.capacity(), capacity);
  EXPECT_EQ(t[second].name, "someone-else");
  EXPECT_EQ(t[second].tier, 0);
  EXPECT_EQ(t[second].refs, 1u);
  EXPECT_FALSE(t.find("one-shot").has_value());
}

TEST(TenantTable, ForgottenTenantComesBackFresh) {
  const SchedulerSpec spec = makeSpec();
  TenantTable t(spec);
  const TenantId id = t.acquire("newco", TierId{0});
  t.release(id);
  // Unknown again, so the new hint applies.
  const TenantId again = t.acquire("newco", TierId{1});
  ASSERT_NE(again, kNoTenant);
  EXPECT_EQ(t[again].tier, 1);
  EXPECT_EQ(t[again].refs, 1u);
}

TEST(TenantTable, ListedTenantsAreNeverForgotten) {
  const SchedulerSpec spec = makeSpec();
  TenantTable t(spec);
  const TenantId id = t.acquire("acme");
  EXPECT_EQ(t.acquire("acme"), id);
  t.release(id);
  t.release(id);
  EXPECT_EQ(t[id].refs, 0u);
  EXPECT_TRUE(t.valid(id));
  EXPECT_EQ(t.find("acme"), id);
  EXPECT_EQ(t.size(), 3u);
  // Its id is not handed to anyone else.
  const TenantId other = t.acquire("newco");
  EXPECT_NE(other, id);
  EXPECT_EQ(t[id].name, "acme");
}

TEST(TenantTable, KnownUnlistedTenantKeepsItsFirstTier) {
  const SchedulerSpec spec = makeSpec();
  TenantTable t(spec);
  const TenantId id = t.acquire("newco", TierId{0});
  EXPECT_EQ(t.acquire("newco", TierId{1}), id);
  EXPECT_EQ(t.acquire("newco"), id);
  EXPECT_EQ(t[id].tier, 0);
  EXPECT_EQ(t[id].weight, 4.0);
  EXPECT_EQ(t[id].queue_limit, 500u);
  EXPECT_EQ(t[id].refs, 3u);
}

TEST(TenantTable, ManyUnlistedTenantsRecycleIds) {
  const SchedulerSpec spec = makeSpec();
  TenantTable t(spec);
  constexpr int kMany = 1'000;
  std::vector<TenantId> ids;
  for (int i = 0; i < kMany; ++i) ids.push_back(t.acquire("round1-" + std::to_string(i)));
  EXPECT_EQ(t.size(), 3u + kMany);
  const std::size_t capacity = t.capacity();
  EXPECT_EQ(capacity, 3u + kMany);
  for (TenantId id : ids) t.release(id);
  EXPECT_EQ(t.size(), 3u);
  // Several rounds of churn: the table does not grow.
  for (int round = 2; round < 6; ++round) {
    std::set<TenantId> seen;
    std::vector<TenantId> now;
    for (int i = 0; i < kMany; ++i) {
      const std::string name = "round" + std::to_string(round) + "-" + std::to_string(i);
      const TenantId id = t.acquire(name);
      ASSERT_NE(id, kNoTenant);
      ASSERT_TRUE(t.valid(id));
      ASSERT_EQ(t[id].name, name);
      seen.insert(id);
      now.push_back(id);
    }
    EXPECT_EQ(seen.size(), static_cast<std::size_t>(kMany));
    EXPECT_EQ(t.capacity(), capacity) << "round " << round;
    for (TenantId id : now) t.release(id);
  }
  EXPECT_EQ(t.size(), 3u);
  EXPECT_TRUE(t.find("acme").has_value());
}

// ---- Memory budget --------------------------------------------------------

// Bytes malloc has handed out and not taken back (arena + mmap'd chunks).
std::size_t heapInUse() {
  const struct mallinfo2 mi = mallinfo2();
  return mi.uordblks + mi.hblkhd;
}

// True when mallinfo2() sees this process's allocations (not the case under a
// sanitizer or another malloc).
bool mallinfoTracksAllocations() {
  constexpr std::size_t kProbe = 4 << 20;
  const std::size_t before = heapInUse();
  auto block = std::make_unique<char[]>(kProbe);
  block[0] = 1;
  const std::size_t during = heapInUse();
  return during >= before + kProbe;
}

TEST(TenantTable, ListedTenantCostsAtMost256BytesOfHeap) {
  if (!mallinfoTracksAllocations()) {
    GTEST_SKIP() << "mallinfo2() does not track this process's heap (sanitizer or non-glibc "
                    "malloc): cannot measure the memory budget";
  }
  constexpr std::size_t kTenants = 100'000;
  constexpr double kBudgetBytes = 256.0;
  SchedulerSpec spec = makeSpec();
  spec.tenants.clear();
  spec.tenants.reserve(kTenants);
  for (std::size_t i = 0; i < kTenants; ++i) {
    char name[16];
    std::snprintf(name, sizeof name, "org-%08zu", i);
    spec.tenants.push_back(TenantSpec{name, static_cast<TierId>(i % 2), 1.0, 100, std::nullopt});
  }

  const std::size_t before = heapInUse();
  auto table = std::make_unique<TenantTable>(spec);
  const std::size_t after = heapInUse();

  ASSERT_EQ(table->size(), kTenants);
  ASSERT_TRUE(table->find("org-00012345").has_value());
  const std::size_t grown = after > before ? after - before : 0;
  const double perTenant = static_cast<double>(grown) / static_cast<double>(kTenants);
  std::cout << "TenantTable: " << perTenant << " bytes per listed tenant (" << grown
            << " bytes for " << kTenants << "; sizeof(Entry) = " << sizeof(TenantTable::Entry)
            << ")\n";
  RecordProperty("bytes_per_tenant", std::to_string(perTenant));
  EXPECT_LE(perTenant, kBudgetBytes);
  EXPECT_GT(perTenant, 0.0);  // the measurement saw the table at all
}

}  // namespace
}  // namespace fairsched::core
