// config/fairsched.toml, compiled into the binaries: the embedded default the
// demo and the benchmarks run with when no --config is given.
#pragma once

#include <string_view>

namespace fairsched::config {
extern const std::string_view kEmbeddedDefaultConfig;
}  // namespace fairsched::config
