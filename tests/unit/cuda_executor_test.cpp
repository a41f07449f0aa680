// The CUDA executor (daemon/exec/cuda_executor.hpp): start-up failures that any
// machine can check, and end-to-end batches that need a CUDA device (skipped
// with the reason where there is none). Also how Server::create turns a
// `cuda` endpoint it cannot serve into the cpu fallback or an error.
#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <random>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "daemon/config/config.hpp"
#include "daemon/server/server.hpp"
#include "kernels/workload_reference.hpp"
#include "tests/support/daemon_config.hpp"
#include "tests/support/daemon_result.hpp"
#include "tests/support/seeded_rng.hpp"

#if FAIRSCHED_HAVE_CUDA
#include "daemon/exec/cuda_executor.hpp"
#endif

namespace fairsched::daemon {
namespace {

std::string serverConfig(const std::string& socket, const std::string& cuda_section) {
  testing::DaemonConfigText c;
  c.socket = socket;
  c.socket_mode = "";
  c.log_level = "warn";
  c.body = "[endpoints.chat]\nexecutor = \"cuda\"\n[endpoints.chat.cuda]\n" + cuda_section;
  c.client_tenants = "[\"acme\"]";
  c.client_extra = "assign_tiers = [\"*\"]\n";
  return c.text();
}

std::string testDir() {
  return std::filesystem::temp_directory_path() /
         ("fairsched_cuda_exec_" + std::to_string(getpid()));
}

// Removes the test's socket directory when the test ends.
struct TestDirCleanup {
  ~TestDirCleanup() {
    std::error_code ec;
    std::filesystem::remove_all(testDir(), ec);
  }
};

Result<std::unique_ptr<Server>> createServer(const std::string& cuda_section) {
  const std::string dir = testDir();
  std::filesystem::create_directories(dir);
  const std::string socket = dir + "/s.sock";
  std::filesystem::remove(socket);
  auto parsed = config::parseConfig(serverConfig(socket, cuda_section), "test");
  if (auto* err = parsed.errorOrNull()) {
    ADD_FAILURE() << "config: " << err->message;
    return Error{Errc::kConfig, "bad config"};
  }
  return Server::create(parsed.value());
}

bool cudaDevicePresent(std::string& why) {
#if FAIRSCHED_HAVE_CUDA
  if (Result<> device = CudaExecutor::checkDevice(0); !device) {
    why = device.error().message;
    return false;
  }
  return true;
#else
  why = "built without CUDA";
  return false;
#endif
}

TEST(CudaExecutorServer, CudaEndpointWithoutADeviceFailsAtStartWithoutFallback) {
  std::string why;
  if (cudaDevicePresent(why)) GTEST_SKIP() << "a CUDA device is present: the cuda executor starts";
  const TestDirCleanup cleanup;
  auto s = createServer("device = 0\n");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Errc::kUnavailable);
  const std::string& err = s.error().message;
  EXPECT_NE(err.find("endpoints.chat: "), std::string::npos) << err;
  EXPECT_NE(err.find("no fallback = \"cpu\" is set"), std::string::npos) << err;
#if FAIRSCHED_HAVE_CUDA
  EXPECT_NE(err.find("no CUDA device: cudaGetDeviceCount"), std::string::npos) << err;
#else
  EXPECT_NE(err.find("not available in this build"), std::string::npos) << err;
#endif
}

TEST(CudaExecutorServer, CudaEndpointWithoutADeviceFallsBackToCpu) {
  std::string why;
  if (cudaDevicePresent(why)) GTEST_SKIP() << "a CUDA device is present: no fallback needed";
  const TestDirCleanup cleanup;
  auto s = createServer("fallback = \"cpu\"\n");
  ASSERT_TRUE(s.ok()) << s.error().message;
}

#if FAIRSCHED_HAVE_CUDA

TEST(CudaExecutor, CreateRejectsInvalidOptionsBeforeTouchingTheDevice) {
  CudaExecutor::Options o;
  o.streams = 0;
  EXPECT_TRUE(testing::failsWith(CudaExecutor::create(o), Errc::kConfig,
                                 "cuda executor: streams must be >= 1"));
  o = {};
  o.staging_bytes = 16;
  EXPECT_TRUE(testing::failsWith(
      CudaExecutor::create(o), Errc::kConfig,
      "cuda executor: staging_bytes 16 too small for 32 requests per batch (double-buffered)"));
}

TEST(CudaExecutor, CreateFailsWithTheReasonWhenNoDeviceIsPresent) {
  const Result<> device = CudaExecutor::checkDevice(0);
  if (device) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_TRUE(testing::failsWith(CudaExecutor::create({}), Errc::kUnavailable,
                                 "cuda executor: no CUDA device: " + device.error().message));
}

TEST(CudaExecutor, CreateFailsForADeviceIdOutOfRange) {
  CudaExecutor::Options o;
  o.device = 1000;
  auto ex = CudaExecutor::create(o);
  ASSERT_FALSE(ex.ok());
  EXPECT_EQ(ex.code(), Errc::kUnavailable);
  EXPECT_NE(ex.error().message.find("cuda executor: no CUDA device: "), std::string::npos);
}

#define SKIP_WITHOUT_CUDA_DEVICE()                                  \
  do {                                                              \
    if (Result<> device = CudaExecutor::checkDevice(0); !device) {  \
      GTEST_SKIP() << "no CUDA device: " << device.error().message; \
    }                                                               \
  } while (0)

std::unique_ptr<CudaExecutor> makeExecutor(CudaExecutor::Options o = {}) {
  auto ex = CudaExecutor::create(o);
  if (!ex) {
    ADD_FAILURE() << ex.error().message;
    return nullptr;
  }
  return std::move(ex).value();
}

// Waits (time-boxed) on the completion eventfd and drains.
void waitAndDrain(Executor& ex, std::vector<BatchDone>& out) {
  pollfd p{ex.completionFd(), POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 10000), 1) << "no completion within 10 s";
  ex.drain(out);
}

ExecBatch randomBatch(std::uint64_t id, std::mt19937& rng, std::uint32_t max_requests,
                      std::uint32_t max_len) {
  ExecBatch b;
  b.id = id;
  const std::uint32_t n = 1 + rng() % max_requests;
  for (std::uint32_t i = 0; i < n; ++i) {
    const std::uint32_t len = rng() % (max_len + 1);
    b.requests.push_back({id * 1000 + i, len, static_cast<std::uint32_t>(1 + rng() % 8)});
    for (std::uint32_t t = 0; t < len; ++t) b.tokens.push_back(rng());
  }
  return b;
}

// Every result's checksum is the reference checksum of its own prompt.
void expectChecksums(const ExecBatch& b, const BatchDone& d) {
  ASSERT_TRUE(d.ok) << d.error;
  ASSERT_EQ(d.results.size(), b.requests.size());
  std::size_t offset = 0;
  for (std::size_t i = 0; i < b.requests.size(); ++i) {
    const ExecRequest& r = b.requests[i];
    const std::span<const std::uint32_t> prompt(b.tokens.data() + offset, r.input_tokens);
    EXPECT_EQ(d.results[i].key, r.key);
    EXPECT_EQ(d.results[i].output_tokens, r.max_output_tokens);
    EXPECT_EQ(d.results[i].checksum, kernels::workloadChecksum(prompt))
        << "batch " << b.id << " request " << i;
    offset += r.input_tokens;
  }
}

TEST(CudaExecutor, OneBatchEndToEnd) {
  SKIP_WITHOUT_CUDA_DEVICE();
  auto ex = makeExecutor();
  ASSERT_TRUE(ex);
  EXPECT_EQ(ex->slots(), 2 * CudaExecutor::kDepth);
  ExecBatch b;
  b.id = 7;
  b.requests = {{1, 3, 2}, {2, 0, 1}, {3, 2, 4}};
  b.tokens = {10, 11, 12, 20, 21};
  const ExecBatch copy = b;
  ex->submit(std::move(b));
  std::vector<BatchDone> done;
  while (done.empty()) waitAndDrain(*ex, done);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].id, 7u);
  EXPECT_GT(done[0].service_ns, 0);
  expectChecksums(copy, done[0]);
  EXPECT_EQ(ex->freeSlots(), ex->slots());
}

TEST(CudaExecutor, ManyBatchesInFlightOnAllSlotsKeepTheirOwnResults) {
  SKIP_WITHOUT_CUDA_DEVICE();
  CudaExecutor::Options o;
  o.streams = 3;
  o.max_batch_requests = 64;
  auto ex = makeExecutor(o);
  ASSERT_TRUE(ex);
  std::mt19937 rng(static_cast<unsigned>(testing::testSeed()));
  std::map<std::uint64_t, ExecBatch> sent;
  std::vector<BatchDone> done;
  std::uint64_t next = 1, finished = 0;
  const std::uint64_t kBatches = 300;
  while (finished < kBatches) {
    while (ex->freeSlots() > 0 && next <= kBatches) {
      ExecBatch b = randomBatch(next, rng, 64, 200);
      sent[next] = b;
      ex->submit(std::move(b));
      ++next;
    }
    done.clear();
    waitAndDrain(*ex, done);
    for (const BatchDone& d : done) {
      ASSERT_TRUE(sent.count(d.id)) << d.id;
      expectChecksums(sent[d.id], d);
      ++finished;
    }
  }
  EXPECT_EQ(ex->freeSlots(), ex->slots());
}

TEST(CudaExecutor, ABatchLargerThanASlotFailsAndFreesItsSlot) {
  SKIP_WITHOUT_CUDA_DEVICE();
  CudaExecutor::Options o;
  o.streams = 1;
  o.staging_bytes = 4096;
  o.max_batch_requests = 4;
  auto ex = makeExecutor(o);
  ASSERT_TRUE(ex);
  ExecBatch b;
  b.id = 1;
  const std::uint32_t len = static_cast<std::uint32_t>(ex->maxBatchTokens()) + 1;
  b.requests = {{1, len, 1}};
  b.tokens.assign(len, 3);
  ex->submit(std::move(b));
  std::vector<BatchDone> done;
  waitAndDrain(*ex, done);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_FALSE(done[0].ok);
  EXPECT_NE(done[0].error.find("exceeds a slot"), std::string::npos) << done[0].error;
  EXPECT_EQ(ex->freeSlots(), ex->slots());
}

#endif  // FAIRSCHED_HAVE_CUDA

}  // namespace
}  // namespace fairsched::daemon
