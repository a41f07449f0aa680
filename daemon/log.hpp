// Process-wide logging through spdlog: one stderr logger, set up once in
// main() before anything logs. spdlog's headers stay out of this one.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "daemon/error.hpp"

namespace spdlog::level {
enum level_enum : int;
}

namespace fairsched {

// "trace", "debug", "info", "warn", "error", "critical" or "off" — the names
// the config accepts for daemon.log_level; nullopt for anything else.
std::optional<spdlog::level::level_enum> parseLogLevel(std::string_view name);

// Makes a stderr logger (time, level, message) the default logger at `level`.
// On an unknown level (kConfig) or a sink that cannot be made (kSystem),
// leaves logging as it was and returns the error. Call from the main thread
// before other threads log.
daemon::Result<> setupLogging(std::string_view level);

}  // namespace fairsched
