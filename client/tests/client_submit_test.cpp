// Submitting and completing through the real rings: the round trip, local
// validation, a full ring, many producer threads, wait() timeouts, and the
// doorbell protocol in both directions.
#include <poll.h>

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "client_test_util.hpp"
#include "tests/support/requests.hpp"

namespace fairsched::testing {
namespace {

SubmitRequest chatRequest(Tenant t, std::span<const std::uint32_t> prompt, std::uint64_t tag) {
  return makeRequest(t, prompt, 5, tag);
}

bool fdReadable(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN) != 0;
}

TEST(ClientSubmit, RoundTripDeliversTheDaemonsCompletion) {
  FakeDaemon fake;
  std::mutex mu;
  std::vector<shm::SubmissionSlot> seen;
  fake.setResponder([&](const shm::SubmissionSlot& s, std::span<const std::uint32_t> p) {
    std::lock_guard lk(mu);
    seen.push_back(s);
    return okCompletion(s, p);
  });
  fake.start();
  Client client = mustConnect(optionsFor(fake));
  const Tenant acme = mustOpen(client, "acme");

  const std::vector<std::uint32_t> prompt{11, 22, 33};
  SubmitRequest req = chatRequest(acme, prompt, 77);
  req.priority = 3;
  const auto deadline = Clock::now() + 10s;
  req.deadline = deadline;
  Result<RequestId> id = client.submit(req);
  ASSERT_TRUE(id) << id.error().toString();
  EXPECT_NE(*id, 0u);

  const std::vector<Completion> got = collect(client, 1);
  ASSERT_EQ(got.size(), 1u);
  const Completion& c = got[0];
  EXPECT_EQ(c.request_id, *id);
  EXPECT_EQ(c.tag, 77u);
  EXPECT_EQ(c.status, Status::kOk);
  EXPECT_EQ(c.output_tokens, 5u);
  EXPECT_EQ(c.checksum, promptChecksum(prompt));
  EXPECT_EQ(c.queue_wait, 1000ns);
  EXPECT_EQ(c.service, 2000ns);
  EXPECT_FALSE(c.local);

  std::lock_guard lk(mu);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].request_id, *id);
  EXPECT_EQ(seen[0].tag, 77u);
  EXPECT_EQ(seen[0].endpoint, 7);  // "chat" resolved to the HelloReply's id
  EXPECT_EQ(seen[0].priority, 3);
  EXPECT_EQ(seen[0].max_output_tokens, 5u);
  EXPECT_EQ(seen[0].prompt_tokens, 3u);
  EXPECT_EQ(
      seen[0].deadline_ns,
      std::chrono::duration_cast<std::chrono::nanoseconds>(deadline.time_since_epoch()).count());
  EXPECT_EQ(client.outstanding(), 0u);
  EXPECT_EQ(client.stats().submitted, 1u);
  EXPECT_EQ(client.stats().completed, 1u);
}

TEST(ClientSubmit, TimeoutBecomesAnAbsoluteDeadlineAndTheEarlierOneWins) {
  FakeDaemon fake;
  std::atomic<std::int64_t> deadline_ns{0};
  fake.setResponder([&](const shm::SubmissionSlot& s, std::span<const std::uint32_t> p) {
    deadline_ns = s.deadline_ns;
    return okCompletion(s, p);
  });
  fake.start();
  Client client = mustConnect(optionsFor(fake));
  const Tenant t = mustOpen(client, "acme");
  SubmitRequest req = chatRequest(t, {}, 1);
  req.deadline = Clock::now() + 1h;
  req.timeout = 2s;
  const auto before = Clock::now();
  ASSERT_TRUE(client.submit(req));
  ASSERT_EQ(collect(client, 1).size(), 1u);
  const auto expected = before + 2s;
  const std::int64_t want =
      std::chrono::duration_cast<std::chrono::nanoseconds>(expected.time_since_epoch()).count();
  EXPECT_GE(deadline_ns.load(), want);
  EXPECT_LT(deadline_ns.load(), want + std::int64_t{1'000'000'000});
}

TEST(ClientSubmit, UnknownEndpointIsAnErrorAndNothingIsSent) {
  FakeDaemon fake;
  Client client = startAndConnect(fake);
  const Tenant t = mustOpen(client, "acme");
  SubmitRequest req = chatRequest(t, {}, 1);
  req.endpoint = "completions";
  Result<RequestId> r = client.submit(req);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.code(), ErrorCode::kUnknownEndpoint);
  EXPECT_EQ(client.outstanding(), 0u);
}

TEST(ClientSubmit, HandlesNotFromOpenTenantAreUnknownTenant) {
  FakeDaemon fake;
  Client client = startAndConnect(fake);
  EXPECT_EQ(client.submit(chatRequest(Tenant{}, {}, 1)).code(), ErrorCode::kUnknownTenant);
  EXPECT_EQ(client.submit(chatRequest(Tenant{0}, {}, 1)).code(), ErrorCode::kUnknownTenant);
  mustOpen(client, "acme");
  EXPECT_EQ(client.submit(chatRequest(Tenant{1}, {}, 1)).code(), ErrorCode::kUnknownTenant);
}

TEST(ClientSubmit, PromptLargerThanASlotIsPromptTooLarge) {
  FakeDaemon fake;  // 64 tokens per slot
  fake.start();
  Client client = mustConnect(optionsFor(fake));
  const Tenant t = mustOpen(client, "acme");
  const std::vector<std::uint32_t> fits(64, 1), too_big(65, 1);
  EXPECT_TRUE(client.submit(chatRequest(t, fits, 1)));
  EXPECT_EQ(client.submit(chatRequest(t, too_big, 2)).code(), ErrorCode::kPromptTooLarge);
}

TEST(ClientSubmit, LimitsAnnouncedByTheEndpointAreCheckedLocally) {
  FakeDaemonOptions fo;
  fo.endpoints = {{"chat", 7, 100, 120}};
  FakeDaemon fake(fo);
  fake.start();
  Client client = mustConnect(optionsFor(fake));
  const Tenant t = mustOpen(client, "acme");
  const std::vector<std::uint32_t> prompt(30, 1);
  SubmitRequest req = chatRequest(t, prompt, 1);
  req.max_output_tokens = 101;
  EXPECT_EQ(client.submit(req).code(), ErrorCode::kInvalidArgument);
  req.max_output_tokens = 91;  // 30 + 91 > 120
  EXPECT_EQ(client.submit(req).code(), ErrorCode::kPromptTooLarge);
  req.max_output_tokens = 90;
  EXPECT_TRUE(client.submit(req));
}

TEST(ClientSubmit, FullRingReturnsRingFullAndRecoversOnceDrained) {
  FakeDaemon fake;  // 4 lanes of 16 cells: a thread spills over into the others
  fake.setPaused(true);
  fake.start();
  Client client = mustConnect(optionsFor(fake));
  const Tenant t = mustOpen(client, "acme");
  for (std::uint64_t i = 0; i < 64; ++i) {
    ASSERT_TRUE(client.submit(chatRequest(t, {}, i))) << i;
  }
  Result<RequestId> full = client.submit(chatRequest(t, {}, 64));
  ASSERT_FALSE(full);
  EXPECT_EQ(full.code(), ErrorCode::kRingFull);
  EXPECT_EQ(client.stats().ring_full, 1u);
  EXPECT_EQ(client.outstanding(), 64u) << "a rejected submit leaves nothing outstanding";

  fake.setPaused(false);
  EXPECT_EQ(collect(client, 64).size(), 64u);
  EXPECT_TRUE(client.submit(chatRequest(t, {}, 17)));
  EXPECT_EQ(collect(client, 1).size(), 1u);
}

TEST(ClientSubmit, ManyThreadsSubmitAndEveryRequestCompletesExactlyOnce) {
  const std::uint64_t seed = testSeed();
  FakeDaemonOptions fo;
  fo.geometry = shm::Geometry{4, 64, 32, 256};
  FakeDaemon fake(fo);
  fake.start();
  Client client = mustConnect(optionsFor(fake));
  const Tenant tenants[2] = {mustOpen(client, "a"), mustOpen(client, "b")};

  constexpr int kThreads = 8;
  constexpr std::uint64_t kPerThread = 1500;
  constexpr std::uint64_t kTotal = kThreads * kPerThread;
  std::vector<std::atomic<int>> seen(kTotal);
  std::atomic<std::uint64_t> received{0};
  std::atomic<bool> failed{false};
  std::mutex ids_mu;
  std::map<RequestId, std::uint64_t> ids;  // id → tag, from submit()

  std::thread consumer([&] {
    std::vector<Completion> out;
    const auto deadline = Clock::now() + 60s;
    while (received < kTotal && Clock::now() < deadline) {
      out.clear();
      if (client.poll(out, 64) == 0) {
        (void)client.wait(50ms);
        continue;
      }
      for (const Completion& c : out) {
        if (c.tag >= kTotal || c.status != Status::kOk) {
          failed = true;
          continue;
        }
        seen[c.tag].fetch_add(1);
        ++received;
      }
    }
  });
  std::vector<std::thread> producers;
  for (int th = 0; th < kThreads; ++th) {
    producers.emplace_back([&, th] {
      std::mt19937_64 rng(seed + static_cast<std::uint64_t>(th));
      std::vector<std::uint32_t> prompt;
      for (std::uint64_t i = 0; i < kPerThread; ++i) {
        const std::uint64_t tag = static_cast<std::uint64_t>(th) * kPerThread + i;
        prompt.assign(rng() % 33, static_cast<std::uint32_t>(tag));
        SubmitRequest req = chatRequest(tenants[rng() % 2], prompt, tag);
        for (;;) {
          Result<RequestId> r = client.submit(req);
          if (r) {
            std::lock_guard lk(ids_mu);
            if (!ids.emplace(*r, tag).second) failed = true;
            break;
          }
          if (r.code() != ErrorCode::kRingFull) {
            failed = true;
            break;
          }
          std::this_thread::yield();
        }
      }
    });
  }
  for (auto& p : producers) p.join();
  consumer.join();

  EXPECT_FALSE(failed);
  EXPECT_EQ(received.load(), kTotal);
  for (std::uint64_t tag = 0; tag < kTotal; ++tag) {
    ASSERT_EQ(seen[tag].load(), 1) << "tag " << tag;
  }
  EXPECT_EQ(ids.size(), kTotal);
  EXPECT_EQ(client.outstanding(), 0u);
  EXPECT_EQ(client.stats().submitted, kTotal);
  EXPECT_EQ(fake.submissions(), kTotal);
}

TEST(ClientWait, TimesOutWhenNothingIsOutstanding) {
  FakeDaemon fake;
  Client client = startAndConnect(fake, {}, [](ClientOptions& o) { o.spin = 0ns; });
  const auto before = Clock::now();
  Result<void> w = client.wait(20ms);
  ASSERT_FALSE(w);
  EXPECT_EQ(w.code(), ErrorCode::kTimedOut);
  EXPECT_GE(Clock::now() - before, 20ms);
  EXPECT_FALSE(fake.clientSleeping()) << "the sleep flag is withdrawn on the way out";
}

TEST(ClientWait, ZeroTimeoutReturnsAtOnce) {
  FakeDaemon fake;
  Client client = startAndConnect(fake);
  EXPECT_EQ(client.wait(0ns).code(), ErrorCode::kTimedOut);
}

TEST(ClientDoorbell, SleepingDaemonIsWokenThroughItsDoorbell) {
  FakeDaemon fake;  // blocks on the doorbells when idle, no timeout
  fake.start();
  Client client = mustConnect(optionsFor(fake));
  const Tenant t = mustOpen(client, "acme");
  ASSERT_TRUE(fake.waitFor([&] { return fake.daemonSleeping(); }, 5000ms));
  ASSERT_TRUE(client.submit(chatRequest(t, {}, 1)));
  EXPECT_EQ(client.stats().doorbell_rings, 1u);
  // The fake only wakes for the doorbell, so the completion proves it rang.
  ASSERT_EQ(collect(client, 1).size(), 1u);
  EXPECT_GE(fake.doorbellWakes(), 1u);
}

TEST(ClientDoorbell, BusyDaemonIsNeverRung) {
  FakeDaemonOptions fo;
  fo.sleep_when_idle = false;  // daemon_sleeping stays 0
  FakeDaemon fake(fo);
  fake.start();
  Client client = mustConnect(optionsFor(fake));
  const Tenant t = mustOpen(client, "acme");
  for (std::uint64_t i = 0; i < 50; ++i) {
    ASSERT_TRUE(client.submit(chatRequest(t, {}, i)));
    ASSERT_EQ(collect(client, 1).size(), 1u);
  }
  EXPECT_EQ(client.stats().doorbell_rings, 0u);
  EXPECT_EQ(fake.takeDoorbellCount(), 0u);
}

TEST(ClientDoorbell, SleepingClientIsWokenThroughTheCompletionEventfd) {
  FakeDaemon fake;
  Client client = startAndConnect(fake, holdAll, [](ClientOptions& o) { o.spin = 0ns; });
  const Tenant t = mustOpen(client, "acme");
  ASSERT_TRUE(client.submit(chatRequest(t, {}, 5)));
  ASSERT_TRUE(fake.waitHeld(1));

  std::atomic<bool> returned{false};
  Result<void> result = Error{ErrorCode::kSystem, 0, "not run"};
  std::thread waiter([&] {
    result = client.wait(30s);
    returned = true;
  });
  ASSERT_TRUE(fake.waitFor([&] { return fake.clientSleeping(); }, 5000ms));
  EXPECT_FALSE(returned);
  const auto released_at = Clock::now();
  EXPECT_EQ(fake.releaseHeld(), 1u);
  waiter.join();
  EXPECT_LT(Clock::now() - released_at, 10s);
  EXPECT_TRUE(result) << result.error().toString();
  EXPECT_GE(fake.bellWrites(), 1u);
  EXPECT_FALSE(fake.clientSleeping());
  std::vector<Completion> out;
  ASSERT_EQ(client.poll(out), 1u);
  EXPECT_EQ(out[0].tag, 5u);
}

TEST(ClientDoorbell, PollingClientIsNotRung) {
  FakeDaemon fake;
  Client client = startAndConnect(fake);
  const Tenant t = mustOpen(client, "acme");
  for (std::uint64_t i = 0; i < 20; ++i) {
    ASSERT_TRUE(client.submit(chatRequest(t, {}, i)));
    std::vector<Completion> out;
    const auto deadline = Clock::now() + 5s;
    while (client.poll(out) == 0 && Clock::now() < deadline) std::this_thread::yield();
    ASSERT_EQ(out.size(), 1u);
  }
  EXPECT_EQ(fake.bellWrites(), 0u);
}

TEST(ClientCompletionFd, ReadableWhenACompletionArrivesAfterPrepareToBlock) {
  FakeDaemon fake;
  Client client = startAndConnect(fake, holdAll);
  const Tenant t = mustOpen(client, "acme");
  const int fd = client.completionFd();
  ASSERT_TRUE(client.submit(chatRequest(t, {}, 9)));
  ASSERT_TRUE(fake.waitHeld(1));

  Result<bool> block = client.prepareToBlock();
  ASSERT_TRUE(block);
  EXPECT_TRUE(*block);
  EXPECT_FALSE(fdReadable(fd, 0));
  fake.releaseHeld();
  EXPECT_TRUE(fdReadable(fd, 5000));
  std::vector<Completion> out;
  EXPECT_EQ(client.poll(out), 1u);
  Result<bool> again = client.prepareToBlock();
  ASSERT_TRUE(again);
  EXPECT_TRUE(*again);
  EXPECT_FALSE(fdReadable(fd, 0)) << "prepareToBlock drains the bell";

  // Descriptor mode lasts: later completions ring without another announcement.
  fake.setResponder(okCompletion);
  ASSERT_TRUE(client.submit(chatRequest(t, {}, 10)));
  EXPECT_TRUE(fdReadable(fd, 5000));
  EXPECT_EQ(client.prepareToBlock().value(), false) << "the completion is waiting";
  out.clear();
  EXPECT_EQ(client.poll(out), 1u);
}

TEST(ClientSubmitAndWait, ReturnsItsOwnCompletionAndLeavesOthersToPoll) {
  FakeDaemon fake;
  Client client = startAndConnect(fake);
  const Tenant t = mustOpen(client, "acme");
  ASSERT_TRUE(client.submit(chatRequest(t, {}, 1)));
  Result<Completion> mine = client.submitAndWait(chatRequest(t, {}, 2), 5s);
  ASSERT_TRUE(mine) << mine.error().toString();
  EXPECT_EQ(mine->tag, 2u);
  EXPECT_EQ(mine->status, Status::kOk);
  const std::vector<Completion> rest = collect(client, 1);
  ASSERT_EQ(rest.size(), 1u);
  EXPECT_EQ(rest[0].tag, 1u);
  EXPECT_EQ(client.outstanding(), 0u);
}

TEST(ClientSubmitAndWait, GetsItsCompletionWhileAnotherThreadPolls) {
  FakeDaemon fake;
  Client client = startAndConnect(fake, holdAll);
  const Tenant t = mustOpen(client, "acme");
  std::atomic<bool> stop{false};
  std::atomic<int> polled{0};
  std::thread poller([&] {
    std::vector<Completion> out;
    while (!stop) {
      out.clear();
      polled += static_cast<int>(client.poll(out));
      (void)client.wait(5ms);
    }
  });
  Result<Completion> mine = Error{ErrorCode::kSystem, 0, "not run"};
  std::thread waiter([&] { mine = client.submitAndWait(chatRequest(t, {}, 3), 30s); });
  ASSERT_TRUE(fake.waitHeld(1));
  fake.releaseHeld();
  waiter.join();
  stop = true;
  poller.join();
  ASSERT_TRUE(mine) << mine.error().toString();
  EXPECT_EQ(mine->tag, 3u);
  EXPECT_EQ(polled.load(), 0) << "the poller never saw the awaited completion";
}

TEST(ClientSubmitAndWait, TimeoutAbandonsTheRequestsCompletion) {
  FakeDaemon fake;
  Client client = startAndConnect(fake, holdAll);
  const Tenant t = mustOpen(client, "acme");
  Result<Completion> r = client.submitAndWait(chatRequest(t, {}, 4), 20ms);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.code(), ErrorCode::kTimedOut);
  ASSERT_TRUE(fake.waitHeld(1));
  fake.releaseHeld();
  ASSERT_TRUE(fake.waitFor(
      [&] {
        std::vector<Completion> out;
        client.poll(out);
        EXPECT_TRUE(out.empty());
        return client.stats().abandoned == 1;
      },
      5000ms));
  EXPECT_EQ(client.outstanding(), 0u);
}

}  // namespace
}  // namespace fairsched::testing
