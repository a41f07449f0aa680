// SHA-256 (FIPS 180-4), for the gateway's API keys: the config stores each
// key's digest, never the key. Small and self-contained; not constant time
// and not meant for anything but hashing a presented key once per request.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace fairsched::gateway {

using Sha256Digest = std::array<std::uint8_t, 32>;

Sha256Digest sha256(std::string_view data);
// 64 lower-case hex digits.
std::string sha256Hex(std::string_view data);
std::string toHex(const Sha256Digest& digest);

}  // namespace fairsched::gateway
