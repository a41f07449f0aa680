// daemon/error.hpp: the daemon's one error value and its Result.
#include "daemon/error.hpp"

#include <gtest/gtest.h>

#include <cerrno>
#include <memory>
#include <string>

namespace fairsched::daemon {
namespace {

TEST(DaemonError, SystemErrorNamesTheCallAndErrno) {
  const Error e = systemError("bind /x", EACCES);
  EXPECT_EQ(e.code, Errc::kSystem);
  EXPECT_EQ(e.message, "bind /x: Permission denied");
}

TEST(DaemonError, SystemErrorReadsErrnoAtTheCall) {
  errno = ENOENT;
  EXPECT_EQ(systemError("connect /run/s.sock").message,
            "connect /run/s.sock: No such file or directory");
}

TEST(DaemonError, WithContextKeepsTheCodeAndPrefixesTheMessage) {
  const Error e = withContext("endpoints.chat", Error{Errc::kConfig, "threads must be >= 1"});
  EXPECT_EQ(e.code, Errc::kConfig);
  EXPECT_EQ(e.message, "endpoints.chat: threads must be >= 1");
}

TEST(DaemonError, ToStringPutsTheCodeFirst) {
  EXPECT_EQ(toString(Errc::kTimedOut), "timed out");
  EXPECT_EQ((Error{Errc::kUnavailable, "no device"}).toString(), "unavailable: no device");
  EXPECT_EQ((Error{Errc::kInternal, ""}).toString(), "internal error");
}

TEST(DaemonError, ResultHoldsAValueOrAnError) {
  Result<std::unique_ptr<int>> ok = std::make_unique<int>(7);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok.value(), 7);
  std::unique_ptr<int> taken = std::move(ok).value();
  EXPECT_EQ(*taken, 7);

  Result<std::unique_ptr<int>> failed = Error{Errc::kDevice, "cudaMalloc: out of memory"};
  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.code(), Errc::kDevice);
  EXPECT_EQ(failed.error().message, "cudaMalloc: out of memory");
}

TEST(DaemonError, VoidResultIsOkOrAnError) {
  const Result<> ok;
  EXPECT_TRUE(ok.ok());
  const Result<> failed = Error{Errc::kProtocol, "reply to another request"};
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.code(), Errc::kProtocol);
}

}  // namespace
}  // namespace fairsched::daemon
