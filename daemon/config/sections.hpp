// The top-level sections of a config file, one parse_<section>.cpp each. Each
// is the reading step of a row in parse_config.cpp's root key table: it reads
// the value `n` found under the root key `path` into `cfg`, which is
// ctx.config(), and returns false after recording an error in `ctx`.
//
// The root table reads [fleet] before any limit list (a fleet-scoped limit
// needs it), endpoints before tiers and tiers before tenants and clients
// (their limit tables and rules name them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

#include "daemon/config/parse_context.hpp"

namespace fairsched::config {

// Durations are converted to TimeNs by the daemon; these caps keep that
// conversion from overflowing.
inline constexpr std::uint64_t kMaxSeconds = std::numeric_limits<TimeNs>::max() / kNsPerSec;
inline constexpr std::uint64_t kMaxMillis = std::numeric_limits<TimeNs>::max() / kNsPerMs;
inline constexpr std::uint64_t kMaxMicros = std::numeric_limits<TimeNs>::max() / kNsPerUs;
// TierId and EndpointId are 16 bits.
inline constexpr std::size_t kMaxIds = std::numeric_limits<std::uint16_t>::max();

bool parseDaemon(ParseContext& ctx, const toml::node& n, const std::string& path, Config& cfg);
bool parseMetrics(ParseContext& ctx, const toml::node& n, const std::string& path, Config& cfg);
bool parseFleet(ParseContext& ctx, const toml::node& n, const std::string& path, Config& cfg);
bool parseEndpoints(ParseContext& ctx, const toml::node& n, const std::string& path, Config& cfg);
bool parseTiers(ParseContext& ctx, const toml::node& n, const std::string& path, Config& cfg);
bool parseTenants(ParseContext& ctx, const toml::node& n, const std::string& path, Config& cfg);
bool parseClients(ParseContext& ctx, const toml::node& n, const std::string& path, Config& cfg);

}  // namespace fairsched::config
