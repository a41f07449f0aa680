// The Server with executors injected (Server::create's MakeExecutors): an
// executor that throws on submit and one that reports failed batches. Every
// request still ends exactly once — OK with its own checksum, or
// EXECUTOR_FAILED — and the daemon keeps serving and stops cleanly.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include "daemon/config/config.hpp"
#include "daemon/exec/cpu_executor.hpp"
#include "daemon/exec/executor_factory.hpp"
#include "daemon/server/server.hpp"
#include "fairsched/client.hpp"
#include "kernels/workload_reference.hpp"
#include "tests/support/daemon_config.hpp"
#include "tests/support/forked_daemon.hpp"
#include "tests/support/prompts.hpp"
#include "tests/support/raw_client.hpp"
#include "tests/support/temp_dir.hpp"

namespace fairsched {
namespace {

using daemon::BatchDone;
using daemon::ExecBatch;
using daemon::Executor;

// Wraps a CPU executor: the batches whose number (1, 2, ...) is a multiple
// of `throw_every` throw from submit(); of the others, those whose number is
// a multiple of `fail_every` come back !ok.
class FaultyExecutor final : public Executor {
 public:
  FaultyExecutor(std::unique_ptr<Executor> inner, std::uint64_t throw_every,
                 std::uint64_t fail_every)
      : inner_(std::move(inner)), throw_every_(throw_every), fail_every_(fail_every) {}
  std::string_view name() const override { return "faulty"; }
  std::uint32_t slots() const override { return inner_->slots(); }
  std::uint32_t freeSlots() const override { return inner_->freeSlots(); }
  void submit(ExecBatch&& batch) override {
    ++count_;
    if (throw_every_ != 0 && count_ % throw_every_ == 0) {
      throw std::runtime_error("injected: device lost");
    }
    if (fail_every_ != 0 && count_ % fail_every_ == 0) failing_.push_back(batch.id);
    inner_->submit(std::move(batch));
  }
  void drain(std::vector<BatchDone>& out) override {
    const std::size_t first = out.size();
    inner_->drain(out);
    for (std::size_t i = first; i < out.size(); ++i) {
      for (const std::uint64_t id : failing_) {
        if (out[i].id != id) continue;
        out[i].ok = false;
        out[i].error = "injected: kernel fault";
        out[i].results.clear();
      }
    }
  }
  int completionFd() const override { return inner_->completionFd(); }

 private:
  std::unique_ptr<Executor> inner_;
  std::uint64_t throw_every_ = 0;
  std::uint64_t fail_every_ = 0;
  std::uint64_t count_ = 0;
  std::vector<std::uint64_t> failing_;
};

// Wraps a CPU executor: after `good` batches the device is "lost": the
// batches it holds never come back (as after a sticky CUDA error, when the
// runtime runs no more host functions) and fatal() says why.
class LostDeviceExecutor final : public Executor {
 public:
  LostDeviceExecutor(std::unique_ptr<Executor> inner, std::uint64_t good)
      : inner_(std::move(inner)), good_(good) {}
  std::string_view name() const override { return "lost-device"; }
  std::uint32_t slots() const override { return inner_->slots(); }
  std::uint32_t freeSlots() const override { return lost_ ? 0 : inner_->freeSlots(); }
  void submit(ExecBatch&& batch) override {
    if (++count_ > good_) {
      lost_.emplace(daemon::Error{daemon::Errc::kDevice, "injected: illegal address (sticky)"});
      held_.push_back(std::move(batch));  // never reported, like a lost context's batches
      return;
    }
    inner_->submit(std::move(batch));
  }
  void drain(std::vector<BatchDone>& out) override { inner_->drain(out); }
  int completionFd() const override { return inner_->completionFd(); }
  const daemon::Error* fatal() const override { return lost_ ? &*lost_ : nullptr; }

 private:
  std::unique_ptr<Executor> inner_;
  std::uint64_t good_;
  std::uint64_t count_ = 0;
  std::optional<daemon::Error> lost_;
  std::vector<ExecBatch> held_;
};

config::Config makeConfig(const std::string& socket) {
  testing::DaemonConfigText c;
  c.socket = socket;
  c.log_level = "critical";
  c.body =
      "[endpoints.chat]\nmax_batch_requests = 4\nmax_batch_tokens = 4096\nmax_wait_us = 50\n"
      "max_output_tokens = 64\n"
      "[endpoints.chat.cpu]\nper_batch_us = 20.0\nper_token_us = 0.0\nthreads = 2\n";
  return c.parsed();
}

daemon::MakeExecutors faulty(std::uint64_t throw_every, std::uint64_t fail_every) {
  return [=](const config::Config& cfg) -> daemon::Result<daemon::Executors> {
    auto real = daemon::makeExecutors(cfg);
    if (!real) return std::move(real).error();
    daemon::Executors out;
    for (auto& ex : real.value()) {
      out.push_back(std::make_unique<FaultyExecutor>(std::move(ex), throw_every, fail_every));
    }
    return out;
  };
}

std::vector<std::uint32_t> promptFor(std::uint64_t id) {
  return testing::promptFor(id, testing::kShortPrompts);
}

struct Outcome {
  std::size_t ok = 0;
  std::size_t failed = 0;
};

// Submits `n` requests on one ring and checks each ends exactly once.
Outcome submitAndCheck(testing::RawClient& c, std::uint32_t ring, std::uint64_t first,
                       std::uint64_t n) {
  std::map<std::uint64_t, std::uint64_t> expected;
  for (std::uint64_t id = first; id < first + n; ++id) {
    const auto prompt = promptFor(id);
    EXPECT_TRUE(c.submit(ring, id, prompt));
    expected[id] = kernels::workloadChecksum(prompt);
  }
  Outcome o;
  const auto got = c.collect(n);
  EXPECT_EQ(got.size(), n);
  std::map<std::uint64_t, int> seen;
  for (const auto& s : got) {
    EXPECT_EQ(++seen[s.request_id], 1) << "request " << s.request_id << " ended twice";
    if (!expected.count(s.request_id)) {
      ADD_FAILURE() << "unknown request " << s.request_id;
      continue;
    }
    if (s.status == encodeStatus(Status::kOk)) {
      EXPECT_EQ(s.checksum, expected.at(s.request_id)) << "request " << s.request_id;
      ++o.ok;
    } else {
      EXPECT_EQ(s.status, encodeStatus(Status::kExecutorFailed)) << "request " << s.request_id;
      ++o.failed;
    }
  }
  return o;
}

// 500 requests through executors from `make`: each ends once; some fail,
// some are served.
void serveThroughFaults(const daemon::MakeExecutors& make) {
  testing::TempDir tmp;
  auto started = daemon::ForkedDaemon::start(makeConfig(tmp.file("s.sock")), make);
  ASSERT_TRUE(started.ok()) << started.error().message;
  auto& d = started.value();
  testing::RawClient c;
  ASSERT_EQ(c.connect(d.socket()), shm::ControlStatus::kOk);
  const auto [status, ring] = c.open("acme");
  ASSERT_EQ(status, shm::ControlStatus::kOk);
  Outcome total;
  for (std::uint64_t round = 0; round < 10; ++round) {
    const Outcome o = submitAndCheck(c, ring, 1 + round * 50, 50);
    total.ok += o.ok;
    total.failed += o.failed;
  }
  EXPECT_GT(total.failed, 0u) << "the injected faults reached no request";
  EXPECT_GT(total.ok, 0u) << "nothing was served between the faults";
  EXPECT_EQ(total.ok + total.failed, 500u);
  EXPECT_EQ(d.terminate(), 0) << "the daemon did not stop cleanly after the faults";
}

TEST(ServerFaults, AnExecutorThatThrowsOnSubmitEndsThatBatchExecutorFailedAndServingGoesOn) {
  serveThroughFaults(faulty(3, 0));
}

TEST(ServerFaults, AnExecutorReportingFailedBatchesEndsThemExecutorFailedAndServingGoesOn) {
  serveThroughFaults(faulty(0, 4));
}

TEST(ServerFaults, ALostDeviceEndsItsRequestsAtOnceAndStopsTheDaemonNonZero) {
  testing::TempDir tmp;
  auto make = [](const config::Config& cfg) -> daemon::Result<daemon::Executors> {
    auto real = daemon::makeExecutors(cfg);
    if (!real) return std::move(real).error();
    daemon::Executors out;
    for (auto& ex : real.value()) {
      out.push_back(std::make_unique<LostDeviceExecutor>(std::move(ex), 5));
    }
    return out;
  };
  auto started = daemon::ForkedDaemon::start(makeConfig(tmp.file("s.sock")), make);
  ASSERT_TRUE(started) << started.error().message;
  auto& d = started.value();
  ClientOptions o;
  o.socket_path = d.socket();
  auto client = Client::connect(o);
  ASSERT_TRUE(client) << client.error().toString();
  auto tenant = client->openTenant("acme");
  ASSERT_TRUE(tenant) << tenant.error().toString();
  const auto begun = std::chrono::steady_clock::now();
  std::vector<std::vector<std::uint32_t>> prompts;
  std::size_t submitted = 0;
  for (std::uint64_t id = 1; id <= 100; ++id) {
    prompts.push_back(promptFor(id));
    SubmitRequest r;
    r.tenant = *tenant;
    r.endpoint = "chat";
    r.prompt = prompts.back();
    r.max_output_tokens = 4;
    if (client->submit(r)) ++submitted;  // refused once the daemon is gone: nothing to wait for
  }
  // Every submitted request ends once — served, EXECUTOR_FAILED (running on
  // the lost device), or SHUTTING_DOWN (queued when the daemon stopped; made
  // up by the library for those it had not answered) — long before
  // batch_timeout_ms (30 s) would have ended them.
  std::map<Status, std::size_t> by_status;
  std::size_t got = 0;
  std::vector<Completion> done;
  while (got < submitted && std::chrono::steady_clock::now() - begun < std::chrono::seconds(20)) {
    done.clear();
    (void)client->wait(std::chrono::milliseconds(100));
    client->poll(done);
    for (const Completion& c : done) ++by_status[c.status];
    got += done.size();
  }
  ASSERT_EQ(got, submitted);
  EXPECT_GT(by_status[Status::kOk], 0u);
  EXPECT_GT(by_status[Status::kExecutorFailed], 0u);
  EXPECT_EQ(by_status[Status::kOk] + by_status[Status::kExecutorFailed] +
                by_status[Status::kShuttingDown],
            submitted);
  EXPECT_LT(std::chrono::steady_clock::now() - begun, std::chrono::seconds(10));
  // The daemon stops by itself with a non-zero status (EIO) for systemd to restart it.
  EXPECT_EQ(d.terminate(), EIO);
}

TEST(ServerFaults, ExecutorsThatCannotBeBuiltAreAnErrorNotACrash) {
  testing::TempDir tmp;
  const config::Config cfg = makeConfig(tmp.file("s.sock"));
  auto none = [](const config::Config&) -> daemon::Result<daemon::Executors> {
    return daemon::Error{daemon::Errc::kUnavailable, "no device"};
  };
  auto s = daemon::Server::create(cfg, none);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), daemon::Errc::kUnavailable);  // the factory's error, as it was
  EXPECT_EQ(s.error().message, "no device");
  auto too_few = [](const config::Config&) -> daemon::Result<daemon::Executors> {
    return daemon::Executors{};
  };
  auto s2 = daemon::Server::create(cfg, too_few);
  ASSERT_FALSE(s2.ok());
  EXPECT_EQ(s2.code(), daemon::Errc::kInternal);
  EXPECT_NE(s2.error().message.find("0 executors for 1 endpoints"), std::string::npos);
}

}  // namespace
}  // namespace fairsched
