// The CPU executor: per-request checksums of each request's own prompt, the
// modelled service time holding a slot, late-binding slot accounting, and a
// malformed batch reported as a failure.
#include "daemon/exec/cpu_executor.hpp"

#include <gtest/gtest.h>
#include <poll.h>

#include <numeric>

#include "kernels/workload_reference.hpp"
#include "tests/support/daemon_result.hpp"

namespace fairsched::daemon {
namespace {

std::unique_ptr<CpuExecutor> make(CpuExecutor::Options o) {
  auto created = CpuExecutor::create(o);
  if (!created) {
    ADD_FAILURE() << created.error().message;
    return nullptr;
  }
  return std::move(created).value();
}

// Wait for the completion eventfd, then drain (bounded: 10 s).
std::vector<BatchDone> waitFor(CpuExecutor& ex, std::size_t batches) {
  std::vector<BatchDone> out;
  for (int i = 0; i < 1000 && out.size() < batches; ++i) {
    pollfd p{ex.completionFd(), POLLIN, 0};
    poll(&p, 1, 10);
    ex.drain(out);
  }
  return out;
}

ExecBatch batchOf(std::vector<std::vector<std::uint32_t>> prompts, std::uint32_t out_tokens) {
  ExecBatch b;
  b.id = 42;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    b.requests.push_back({100 + i, static_cast<std::uint32_t>(prompts[i].size()), out_tokens});
    b.tokens.insert(b.tokens.end(), prompts[i].begin(), prompts[i].end());
  }
  return b;
}

TEST(CpuExecutor, InvalidOptionsAreRejected) {
  CpuExecutor::Options o;
  o.threads = 0;
  EXPECT_TRUE(testing::failsWith(CpuExecutor::create(o), Errc::kConfig,
                                 "cpu executor: threads must be >= 1"));
}

TEST(CpuExecutor, EachResultCarriesTheChecksumOfItsOwnPrompt) {
  auto ex = make({0.0, 0.0, 1});
  const std::vector<std::vector<std::uint32_t>> prompts{{1, 2, 3}, {3, 2, 1}, {}, {7}};
  ex->submit(batchOf(prompts, 5));
  auto done = waitFor(*ex, 1);
  ASSERT_EQ(done.size(), 1u);
  ASSERT_TRUE(done[0].ok);
  EXPECT_EQ(done[0].id, 42u);
  ASSERT_EQ(done[0].results.size(), prompts.size());
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(done[0].results[i].key, 100 + i);
    EXPECT_EQ(done[0].results[i].output_tokens, 5u);
    EXPECT_EQ(done[0].results[i].checksum, kernels::workloadChecksum(prompts[i]));
  }
  EXPECT_NE(done[0].results[0].checksum, done[0].results[1].checksum) << "order matters";
}

TEST(CpuExecutor, WithoutTheWorkloadEveryChecksumIsZeroAndTokensStillCount) {
  auto ex = make({0.0, 0.0, 1, /*workload=*/false});
  ex->submit(batchOf({{1, 2, 3}, {7}}, 4));
  auto done = waitFor(*ex, 1);
  ASSERT_EQ(done.size(), 1u);
  ASSERT_TRUE(done[0].ok);
  ASSERT_EQ(done[0].results.size(), 2u);
  for (const auto& r : done[0].results) {
    EXPECT_EQ(r.checksum, 0u);
    EXPECT_EQ(r.output_tokens, 4u);
  }
}

TEST(CpuExecutor, ModelledServiceTimeHoldsTheSlot) {
  auto ex = make({2000.0, 10.0, 1});  // 2 ms + 10 us x 300 tokens = 5 ms
  EXPECT_EQ(ex->serviceTime(300), 5 * kNsPerMs);
  ex->submit(batchOf({std::vector<std::uint32_t>(100, 9)}, 200));
  EXPECT_EQ(ex->freeSlots(), 0u);
  auto done = waitFor(*ex, 1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_GE(done[0].service_ns, 5 * kNsPerMs);
  EXPECT_EQ(ex->freeSlots(), 1u);
}

TEST(CpuExecutor, SlotsFollowThreadsAndFreeUpWhenDrained) {
  auto ex = make({1.0, 0.0, 3});
  EXPECT_EQ(ex->slots(), 3u);
  for (int i = 0; i < 3; ++i) ex->submit(batchOf({{1}}, 1));
  EXPECT_EQ(ex->freeSlots(), 0u);
  auto done = waitFor(*ex, 3);
  EXPECT_EQ(done.size(), 3u);
  EXPECT_EQ(ex->freeSlots(), 3u);
}

TEST(CpuExecutor, BatchWithTooFewTokensFailsAsAWhole) {
  auto ex = make({0.0, 0.0, 1});
  ExecBatch b = batchOf({{1, 2, 3}}, 1);
  b.tokens.pop_back();
  ex->submit(std::move(b));
  auto done = waitFor(*ex, 1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_FALSE(done[0].ok);
  EXPECT_TRUE(done[0].results.empty());
  EXPECT_FALSE(done[0].error.empty());
}

TEST(CpuExecutor, ZeroModelledTimeRunsInlineWithOneSlot) {
  auto ex = make({0.0, 0.0, 4});
  EXPECT_EQ(ex->slots(), 1u);
  ex->submit(batchOf({{4, 5}}, 3));
  EXPECT_EQ(ex->freeSlots(), 0u) << "until its result is drained";
  std::vector<BatchDone> out;
  ex->drain(out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].results[0].checksum,
            kernels::workloadChecksum(std::vector<std::uint32_t>{4, 5}));
  EXPECT_EQ(ex->freeSlots(), 1u);
}

TEST(WorkloadReference, ChecksumDependsOnEveryTokenAndItsPosition) {
  const std::vector<std::uint32_t> a{1, 2, 3, 4};
  std::vector<std::uint32_t> b = a;
  b[2] = 5;
  std::vector<std::uint32_t> c{1, 2, 4, 3};
  const std::vector<std::uint32_t> empty;
  EXPECT_EQ(kernels::workloadChecksum(a), kernels::workloadChecksum(a));
  EXPECT_NE(kernels::workloadChecksum(a), kernels::workloadChecksum(b));
  EXPECT_NE(kernels::workloadChecksum(a), kernels::workloadChecksum(c));
  EXPECT_NE(kernels::workloadChecksum(empty),
            kernels::workloadChecksum(std::vector<std::uint32_t>{0}));
}

}  // namespace
}  // namespace fairsched::daemon
