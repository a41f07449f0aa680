// Prefix routing (docs/worker.md "Prefix routing") against a real fairschedd:
// with routing = "prefix" a request goes to the worker holding its prompt's
// leading blocks — as the daemon sent them, or as the worker reports them in
// KV events — within the load bound, else to the roomiest; and the
// reference engine skips the prefill of what it holds. Workers here are
// driven by the test itself, so every choice is observed, not inferred.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include "fairsched/client.hpp"
#include "fairsched/prefix_hash.hpp"
#include "fairsched/worker.hpp"

#include "tests/support/daemon_config.hpp"
#include "tests/support/forked_daemon.hpp"
#include "tests/support/requests.hpp"
#include "tests/support/run_command.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/wait_until.hpp"
#include "worker/reference_engine.hpp"

namespace fairsched {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;

constexpr std::uint32_t kBlock = 16;

config::Config prefixConfig(const std::string& socket) {
  testing::DaemonConfigText c;
  c.socket = socket;
  c.test_event_loop = true;
  c.body =
      "[endpoints.chat]\nexecutor = \"worker\"\nmax_output_tokens = 64\n"
      "batch_timeout_ms = 60000\n"
      "[endpoints.chat.worker]\nrouting = \"prefix\"\nload_slack = 0.25\n";
  c.client_extra = "workers = [\"chat\"]\nadmin = true\n";
  return c.parsed();
}

// 64 tokens shared by every prompt of `family`, then 20 of its own: five
// whole blocks, the first four the family's.
std::vector<std::uint32_t> promptOf(std::uint32_t family, std::uint32_t own) {
  std::vector<std::uint32_t> p;
  for (std::uint32_t i = 0; i < 4 * kBlock; ++i) p.push_back(family * 1000 + i);
  for (std::uint32_t i = 0; i < 20; ++i) p.push_back(900000 + own * 100 + i);
  return p;
}

json status(const std::string& socket) {
  std::string out;
  EXPECT_EQ(testing::runFairschedctl("--socket " + socket + " status --json", &out), 0) << out;
  return json::parse(out, nullptr, false);
}

// The status row of the worker named `name` (null when not attached).
json rowOf(const std::string& socket, const std::string& name) {
  const json st = status(socket);
  if (!st.is_object() || !st.contains("workers")) return nullptr;
  for (const json& w : st["workers"]) {
    if (w.value("name", "") == name) return w;
  }
  return nullptr;
}

Worker attach(const std::string& socket, const std::string& name) {
  WorkerOptions o;
  o.socket_path = socket;
  o.endpoint = "chat";
  o.worker_name = name;
  Result<Worker> w = Worker::connect(o);
  EXPECT_TRUE(w) << w.error().toString();
  return std::move(*w);
}

// States `seqs` free sequences and `kv` free tokens, and waits until the
// daemon has read it (assignments it handed out before are seen).
::testing::AssertionResult state(const std::string& socket, Worker& w, const std::string& name,
                                 std::uint32_t seqs, std::uint64_t kv) {
  if (!w.setCapacity(seqs, kv)) return ::testing::AssertionFailure() << "setCapacity";
  return testing::waitUntil(
      [&] {
        const json r = rowOf(socket, name);
        return r.is_object() && r.value("stated_free_sequences", 0u) == seqs &&
               r.value("stated_free_kv_tokens", std::uint64_t{0}) == kv;
      },
      20s, name + " states " + std::to_string(seqs) + " sequences", 5ms);
}

Result<Client> connectTo(const std::string& socket) {
  ClientOptions o;
  o.socket_path = socket;
  return Client::connect(o);
}

// Which of `a` and `b` was handed the next assignment (0 or 1), and its id.
struct Landed {
  int worker = -1;
  std::uint64_t id = 0;
};
Landed whereItLands(Worker& a, Worker& b) {
  Landed out;
  std::vector<WorkItem> items;
  EXPECT_TRUE(testing::waitUntil(
      [&] {
        for (int k = 0; k < 2 && out.worker < 0; ++k) {
          items.clear();
          (k == 0 ? a : b).poll(items);
          for (const WorkItem& it : items) {
            if (it.kind != WorkItem::Kind::kAssign) continue;
            EXPECT_LT(out.worker, 0) << "two assignments for one request";
            out = {k, it.assignment.id};
          }
        }
        return out.worker >= 0;
      },
      20s, "the request assigned to a worker", 1ms));
  return out;
}

// Waits for the one completion of the request the client submitted last.
void awaitCompletion(Client& client) {
  std::vector<Completion> got;
  ASSERT_TRUE(testing::waitUntil(
      [&] {
        client.poll(got);
        return !got.empty();
      },
      20s, "the completion", 1ms));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, Status::kOk);
}

class PrefixRouting : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(tmp_.path().empty()) << "no temporary directory"; }
  std::string socket() const { return tmp_.path() + "/fairsched.sock"; }
  testing::TempDir tmp_{"fairsched-prefix"};
};

TEST_F(PrefixRouting, ARequestGoesWhereItsPrefixWasSentWithinTheLoadBoundNotToTheRoomiest) {
  auto d = daemon::ForkedDaemon::start(prefixConfig(socket()));
  ASSERT_TRUE(d.ok()) << d.error().message;
  Worker w[2] = {attach(socket(), "one"), attach(socket(), "two")};
  const char* names[2] = {"one", "two"};
  ASSERT_TRUE(state(socket(), w[0], names[0], 4, 1 << 20));
  ASSERT_TRUE(state(socket(), w[1], names[1], 4, 1 << 20));
  auto client = connectTo(socket());
  ASSERT_TRUE(client) << client.error().toString();
  auto tenant = client->openTenant("acme");
  ASSERT_TRUE(tenant);

  // The first of family 7 goes to one of them (nothing is cached yet).
  const auto first = promptOf(7, 1);
  ASSERT_TRUE(client->submit(testing::makeRequest(*tenant, first, 8)));
  const Landed l1 = whereItLands(w[0], w[1]);
  ASSERT_GE(l1.worker, 0);
  const int holder = l1.worker, other = 1 - l1.worker;
  ASSERT_TRUE(w[holder].finish(l1.id, Status::kOk, 0));
  awaitCompletion(*client);

  // The other is now far roomier: "roomiest" would send the next there.
  ASSERT_TRUE(state(socket(), w[holder], names[holder], 4, 1 << 20));
  ASSERT_TRUE(state(socket(), w[other], names[other], 16, 1 << 22));
  std::vector<std::uint32_t> family[3] = {promptOf(7, 2), promptOf(7, 3), promptOf(7, 4)};
  ASSERT_TRUE(client->submit(testing::makeRequest(*tenant, family[0], 8)));
  const Landed l2 = whereItLands(w[0], w[1]);
  EXPECT_EQ(l2.worker, holder) << "the family's second request went to the roomiest";
  json row = rowOf(socket(), names[holder]);
  ASSERT_TRUE(row.is_object());
  EXPECT_EQ(row["prefix_cache"]["source"], "sent") << row.dump();
  EXPECT_EQ(row["prefix_cache"]["hit_blocks"], 4) << row.dump();  // the family's four blocks
  EXPECT_EQ(row["prefix_cache"]["blocks"], 6) << row.dump();      // 4 shared + 1 + 1 of their own

  // The bound, slack 0.25 over two workers: with one running on the holder
  // (of 1 in all) it may take a second (ceil(1.25 × 2 / 2) = 2)…
  ASSERT_TRUE(client->submit(testing::makeRequest(*tenant, family[1], 8)));
  EXPECT_EQ(whereItLands(w[0], w[1]).worker, holder);
  // …but not a third (ceil(1.25 × 3 / 2) = 2): that one goes to the roomiest.
  ASSERT_TRUE(client->submit(testing::makeRequest(*tenant, family[2], 8)));
  EXPECT_EQ(whereItLands(w[0], w[1]).worker, other)
      << "affinity took a worker past (1 + slack) x the mean load";
  { const Client gone = std::move(*client); }  // hangs up: what runs is aborted
  for (Worker& x : w) x.shutdown();
  EXPECT_EQ(d.value().terminate(), 0);
}

TEST_F(PrefixRouting, KvEventsAreWhatTheDaemonRoutesByAndANewWorkerInheritsNothing) {
  auto d = daemon::ForkedDaemon::start(prefixConfig(socket()));
  ASSERT_TRUE(d.ok()) << d.error().message;
  Worker w[2] = {attach(socket(), "one"), attach(socket(), "two")};
  const char* names[2] = {"one", "two"};
  // "two" was never sent family 5, but says it holds it; "one" is roomier.
  const std::vector<std::uint64_t> held = prefixBlockHashes(promptOf(5, 0), kBlock);
  ASSERT_EQ(held.size(), 5u);
  ASSERT_TRUE(w[1].blocksStored(held));
  ASSERT_TRUE(state(socket(), w[0], names[0], 16, 1 << 22));
  ASSERT_TRUE(state(socket(), w[1], names[1], 4, 1 << 20));
  json row = rowOf(socket(), "two");
  EXPECT_EQ(row["prefix_cache"]["source"], "events") << row.dump();
  EXPECT_EQ(row["prefix_cache"]["blocks"], 5) << row.dump();

  auto client = connectTo(socket());
  ASSERT_TRUE(client) << client.error().toString();
  auto tenant = client->openTenant("acme");
  ASSERT_TRUE(tenant);
  const auto p1 = promptOf(5, 1);
  ASSERT_TRUE(client->submit(testing::makeRequest(*tenant, p1, 8)));
  const Landed l1 = whereItLands(w[0], w[1]);
  EXPECT_EQ(l1.worker, 1) << "the worker that reported the prefix did not get it";
  ASSERT_TRUE(w[l1.worker].finish(l1.id, Status::kOk, 0));
  awaitCompletion(*client);
  // A worker that reports events is not credited with what it was sent.
  row = rowOf(socket(), "two");
  EXPECT_EQ(row["prefix_cache"]["blocks"], 5) << row.dump();
  EXPECT_EQ(row["prefix_cache"]["hit_blocks"], 4) << row.dump();

  // It evicts the family's first block: the rest is unreachable, so the
  // next goes to the roomiest.
  ASSERT_TRUE(w[1].blocksRemoved(std::span<const std::uint64_t>(held).first(1)));
  // Read before the next request is submitted (another ring: no order between them).
  ASSERT_TRUE(
      testing::waitUntil([&] { return rowOf(socket(), "two")["prefix_cache"]["blocks"] == 4; }, 20s,
                         "the removal read", 5ms));
  const auto p2 = promptOf(5, 2);
  ASSERT_TRUE(client->submit(testing::makeRequest(*tenant, p2, 8)));
  const Landed l2 = whereItLands(w[0], w[1]);
  EXPECT_EQ(l2.worker, 0);
  ASSERT_TRUE(w[l2.worker].finish(l2.id, Status::kOk, 0));
  awaitCompletion(*client);

  ASSERT_TRUE(w[1].cacheCleared());
  ASSERT_TRUE(
      testing::waitUntil([&] { return rowOf(socket(), "two")["prefix_cache"]["blocks"] == 0; }, 20s,
                         "the cache cleared", 5ms));
  // "one" holds family 5 as sent; a worker attached after it goes holds
  // nothing of it.
  w[0].shutdown();
  ASSERT_TRUE(testing::waitUntil([&] { return rowOf(socket(), "one").is_null(); }, 20s,
                                 "one detached", 5ms));
  Worker three = attach(socket(), "three");
  ASSERT_TRUE(state(socket(), three, "three", 4, 1 << 20));
  EXPECT_EQ(rowOf(socket(), "three")["prefix_cache"]["blocks"], 0);
  three.shutdown();
  w[1].shutdown();
  EXPECT_EQ(d.value().terminate(), 0);
}

TEST_F(PrefixRouting, AReloadResizesWhatTheDaemonRemembersOfAttachedWorkersCaches) {
  const std::string path = tmp_.path() + "/fairsched.toml";
  auto write = [&](const std::string& worker_keys) {
    testing::DaemonConfigText c;
    c.socket = socket();
    c.test_event_loop = true;  // the loop under test, in the file a reload reads too
    c.body =
        "[endpoints.chat]\nexecutor = \"worker\"\nmax_output_tokens = 64\n"
        "[endpoints.chat.worker]\nrouting = \"prefix\"\n" +
        worker_keys;
    c.client_extra = "workers = [\"chat\"]\nadmin = true\n";
    std::ofstream(path + ".new") << c.text();
    std::filesystem::rename(path + ".new", path);
  };
  write("cache_blocks = 64\n");
  auto loaded = config::loadConfigFile(path);
  ASSERT_TRUE(loaded.ok()) << loaded.error().toString();
  auto d = daemon::ForkedDaemon::start(loaded.value());
  ASSERT_TRUE(d.ok()) << d.error().message;
  Worker w = attach(socket(), "one");
  ASSERT_TRUE(state(socket(), w, "one", 4, 1 << 20));
  // 3 families of 5 blocks each: 15 held of 64.
  for (std::uint32_t f = 1; f <= 3; ++f) {
    ASSERT_TRUE(w.blocksStored(prefixBlockHashes(promptOf(f, 0), kBlock)));
  }
  ASSERT_TRUE(
      testing::waitUntil([&] { return rowOf(socket(), "one")["prefix_cache"]["blocks"] == 15; },
                         20s, "the blocks stored", 5ms));
  EXPECT_EQ(rowOf(socket(), "one")["prefix_cache"]["capacity_blocks"], 64);

  std::string out;
  write("cache_blocks = 8\n");
  ASSERT_EQ(testing::runFairschedctl("--socket " + socket() + " reload", &out), 0) << out;
  json row = rowOf(socket(), "one");
  EXPECT_EQ(row["prefix_cache"]["capacity_blocks"], 8) << row.dump();
  EXPECT_EQ(row["prefix_cache"]["blocks"], 8) << "the least recently used beyond it forgotten";

  // The block size is what every remembered hash means: restart-only.
  write("cache_blocks = 8\nprefix_block_tokens = 32\n");
  EXPECT_EQ(testing::runFairschedctl("--socket " + socket() + " reload", &out), 1) << out;
  EXPECT_NE(out.find("endpoints.chat.worker.prefix_block_tokens"), std::string::npos) << out;
  EXPECT_EQ(rowOf(socket(), "one")["prefix_cache"]["capacity_blocks"], 8);
  w.shutdown();
  EXPECT_EQ(d.value().terminate(), 0);
}

// A proxy that keeps the body itself (counts only) passes the prefix it
// computed; the worker gets the request as sent, without the hashes.
TEST_F(PrefixRouting, ARequestCarryingItsPrefixIsPlacedByItAndItsWorkerGetsItAsSent) {
  auto d = daemon::ForkedDaemon::start(prefixConfig(socket()));
  ASSERT_TRUE(d.ok()) << d.error().message;
  Worker w[2] = {attach(socket(), "one"), attach(socket(), "two")};
  const char* names[2] = {"one", "two"};
  const std::vector<std::uint64_t> chain = prefixBlockHashes(promptOf(9, 0), kBlock);
  ASSERT_TRUE(w[1].blocksStored(std::span<const std::uint64_t>(chain).first(4)));
  ASSERT_TRUE(state(socket(), w[0], names[0], 16, 1 << 22));
  ASSERT_TRUE(state(socket(), w[1], names[1], 4, 1 << 20));
  auto client = connectTo(socket());
  ASSERT_TRUE(client) << client.error().toString();
  auto tenant = client->openTenant("acme");
  ASSERT_TRUE(tenant);
  const std::string params = "body=request-17";
  SubmitRequest counted = testing::makeRequest(*tenant, {}, 8);
  counted.prompt_token_count = 84;
  counted.prefix = chain;
  counted.params = std::as_bytes(std::span<const char>(params.data(), params.size()));
  ASSERT_TRUE(client->submit(counted));
  std::vector<WorkItem> items;
  ASSERT_TRUE(testing::waitUntil(
      [&] {
        w[1].poll(items);
        return !items.empty();
      },
      20s, "the counted request on the worker holding its prefix", 1ms));
  ASSERT_EQ(items[0].kind, WorkItem::Kind::kAssign);
  const Assignment& a = items[0].assignment;
  EXPECT_TRUE(a.counts_only);
  EXPECT_EQ(a.prompt_tokens, 84u);
  EXPECT_TRUE(a.prompt.empty());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(a.params.data()), a.params.size()), params);
  ASSERT_TRUE(w[1].finish(a.id, Status::kOk, 0));
  awaitCompletion(*client);
  EXPECT_EQ(rowOf(socket(), "two")["prefix_cache"]["hit_blocks"], 4);

  // Ids and a prefix of its own: the prefix given is the one used (none of
  // it is held), and the ids and parameters reach the worker unchanged.
  const auto ids = promptOf(9, 1);
  SubmitRequest both = testing::makeRequest(*tenant, ids, 8);
  const std::vector<std::uint64_t> none_held = {1, 2, 3};
  both.prefix = none_held;
  both.params = counted.params;
  ASSERT_TRUE(client->submit(both));
  items.clear();
  ASSERT_TRUE(testing::waitUntil(
      [&] {
        w[0].poll(items);
        return !items.empty();
      },
      20s, "the request on the roomiest (nothing of its prefix is held)", 1ms));
  EXPECT_EQ(items[0].assignment.prompt, ids);
  EXPECT_EQ(items[0].assignment.params, a.params);
  EXPECT_EQ(rowOf(socket(), "one")["prefix_cache"]["assigned_blocks"], 3);
  { const Client gone = std::move(*client); }
  for (Worker& x : w) x.shutdown();
  EXPECT_EQ(d.value().terminate(), 0);
}

TEST_F(PrefixRouting, TheReferenceEngineSkipsTheCachedPrefixAndReportsItsBlocks) {
  auto d = daemon::ForkedDaemon::start(prefixConfig(socket()));
  ASSERT_TRUE(d.ok()) << d.error().message;
  Worker worker = attach(socket(), "ref");
  reference::EngineModel m;
  m.max_sequences = 8;
  m.kv_tokens = 1 << 20;
  m.step_us = 50;
  m.prefill_token_us = 0;
  m.decode_token_us = 1;
  m.cache_blocks = 64;
  m.block_tokens = kBlock;
  reference::ReferenceEngine engine(worker, m);
  std::atomic<bool> stop{false};
  std::thread runner([&] { (void)engine.run(stop); });

  auto client = connectTo(socket());
  ASSERT_TRUE(client) << client.error().toString();
  auto tenant = client->openTenant("acme");
  ASSERT_TRUE(tenant);
  const auto a1 = promptOf(3, 1), a2 = promptOf(3, 2);
  ASSERT_TRUE(client->submit(testing::makeRequest(*tenant, a1, 4)));
  awaitCompletion(*client);
  ASSERT_TRUE(client->submit(testing::makeRequest(*tenant, a2, 4)));
  awaitCompletion(*client);
  // Its events reach the daemon: the first prompt's five blocks, then the
  // second's own.
  ASSERT_TRUE(
      testing::waitUntil([&] { return rowOf(socket(), "ref")["prefix_cache"]["blocks"] == 6; }, 20s,
                         "six blocks reported", 5ms));
  stop = true;
  runner.join();
  EXPECT_EQ(engine.stats().prompt_tokens, a1.size() + a2.size());
  EXPECT_EQ(engine.stats().cached_tokens, 4u * kBlock);  // the family's blocks, not prefilled
  const json row = rowOf(socket(), "ref");
  EXPECT_EQ(row["prefix_cache"]["source"], "events") << row.dump();
  EXPECT_EQ(row["prefix_cache"]["hit_blocks"], 4) << row.dump();
  EXPECT_EQ(row["prefix_cache"]["kv_events"], 2) << row.dump();
  worker.shutdown();
  EXPECT_EQ(d.value().terminate(), 0);
}

}  // namespace
}  // namespace fairsched
