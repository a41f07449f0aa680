#include "daemon/log.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <array>
#include <exception>
#include <memory>
#include <utility>

namespace fairsched {

std::optional<spdlog::level::level_enum> parseLogLevel(std::string_view name) {
  static constexpr std::array<std::pair<std::string_view, spdlog::level::level_enum>, 7> kLevels{{
      {"trace", spdlog::level::trace},
      {"debug", spdlog::level::debug},
      {"info", spdlog::level::info},
      {"warn", spdlog::level::warn},
      {"error", spdlog::level::err},
      {"critical", spdlog::level::critical},
      {"off", spdlog::level::off},
  }};
  for (const auto& [n, level] : kLevels) {
    if (n == name) return level;
  }
  return std::nullopt;
}

daemon::Result<> setupLogging(std::string_view level) {
  const auto parsed = parseLogLevel(level);
  if (!parsed) {
    return daemon::Error{daemon::Errc::kConfig,
                         "unknown log level '" + std::string(level) +
                             "' (expected trace|debug|info|warn|error|critical|off)"};
  }
  try {
    // Colours only when stderr is a terminal; under systemd the journal adds
    // its own timestamps, but the pattern keeps them for plain runs.
    auto sink =
        std::make_shared<spdlog::sinks::stderr_color_sink_mt>(spdlog::color_mode::automatic);
    auto logger = std::make_shared<spdlog::logger>("fairschedd", std::move(sink));
    logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ %v");
    logger->set_level(*parsed);
    logger->flush_on(spdlog::level::warn);
    spdlog::set_default_logger(std::move(logger));
  } catch (const std::exception& e) {
    return daemon::Error{daemon::Errc::kSystem, std::string("cannot set up logging: ") + e.what()};
  }
  return {};
}

}  // namespace fairsched
