#include "daemon/log.hpp"

#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <string>

namespace fairsched {
namespace {

TEST(Log, ParsesEveryLevelTheConfigAccepts) {
  EXPECT_EQ(parseLogLevel("trace"), spdlog::level::trace);
  EXPECT_EQ(parseLogLevel("debug"), spdlog::level::debug);
  EXPECT_EQ(parseLogLevel("info"), spdlog::level::info);
  EXPECT_EQ(parseLogLevel("warn"), spdlog::level::warn);
  EXPECT_EQ(parseLogLevel("error"), spdlog::level::err);
  EXPECT_EQ(parseLogLevel("critical"), spdlog::level::critical);
  EXPECT_EQ(parseLogLevel("off"), spdlog::level::off);
}

TEST(Log, RejectsSpdlogAliasesAndOtherSpellings) {
  EXPECT_FALSE(parseLogLevel("err").has_value());
  EXPECT_FALSE(parseLogLevel("warning").has_value());
  EXPECT_FALSE(parseLogLevel("INFO").has_value());
  EXPECT_FALSE(parseLogLevel("").has_value());
}

TEST(Log, SetupSetsTheDefaultLoggersLevel) {
  auto r = setupLogging("warn");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(spdlog::default_logger()->level(), spdlog::level::warn);
  r = setupLogging("debug");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(spdlog::default_logger()->level(), spdlog::level::debug);
}

TEST(Log, UnknownLevelLeavesLoggingAsItWas) {
  ASSERT_TRUE(setupLogging("error").ok());
  const auto r = setupLogging("verbose");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.code(), daemon::Errc::kConfig);
  EXPECT_EQ(r.error().message,
            "unknown log level 'verbose' (expected trace|debug|info|warn|error|critical|off)");
  EXPECT_EQ(spdlog::default_logger()->level(), spdlog::level::err);
}

}  // namespace
}  // namespace fairsched
