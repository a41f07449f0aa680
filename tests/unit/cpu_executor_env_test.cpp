// The CPU executor measures service times with the Env it is given, not the
// process's clock: a fake clock makes the measurement exact.
#include <gtest/gtest.h>
#include <poll.h>

#include "daemon/exec/cpu_executor.hpp"
#include "tests/support/fake_env.hpp"

namespace fairsched::daemon {
namespace {

TEST(CpuExecutorEnv, ServiceTimeIsReadFromItsEnv) {
  for (const double per_batch_us : {0.0, 50.0}) {  // inline, then on its own thread
    SCOPED_TRACE(per_batch_us == 0 ? "inline" : "threaded");
    testing::FakeEnv env(1'000, 7'000);  // every reading moves time on by 7 us
    CpuExecutor::Options o;
    o.per_batch_us = per_batch_us;
    o.per_token_us = 0;
    o.env = &env;
    auto created = CpuExecutor::create(o);
    ASSERT_TRUE(created.ok()) << created.error().message;
    CpuExecutor& ex = *created.value();
    ExecBatch b;
    b.id = 1;
    b.requests.push_back({5, 2, 3});
    b.tokens = {1, 2};
    ex.submit(std::move(b));
    std::vector<BatchDone> done;
    for (int i = 0; i < 1000 && done.empty(); ++i) {  // bounded: 10 s
      pollfd p{ex.completionFd(), POLLIN, 0};
      poll(&p, 1, 10);
      ex.drain(done);
    }
    ASSERT_EQ(done.size(), 1u) << "the batch came back";
    EXPECT_EQ(done[0].service_ns, 7'000) << "two readings of the fake clock, one step apart";
  }
}

}  // namespace
}  // namespace fairsched::daemon
