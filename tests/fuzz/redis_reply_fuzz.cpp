// libFuzzer target for what a Redis server (or a config file) hands the
// fleet backend: whatever the bytes, as RESP (the backend's bounded reader:
// no declared array allocates more than kMaxReplyElements) a CLUSTER SLOTS reply becomes a slot map
// whose every served slot names one of its nodes and whose ranges agree with it, an error reply
// parses as a redirection only with a slot below 16384 and a port; as a
// [fleet] url, parseRedisUrl never crashes and a parsed password never
// survives redaction; keySlot is always below 16384.
#include <hiredis/hiredis.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "daemon/config/redis_url.hpp"
#include "daemon/fleet/redis_connection.hpp"
#include "daemon/fleet/redis_topology.hpp"

namespace {

using namespace fairsched;

void check(bool ok) {
  if (!ok) std::abort();
}

void reply(std::string_view bytes) {
  redisReader* reader = fleet::newReplyReader();
  redisReaderFeed(reader, bytes.data(), bytes.size());
  config::RedisAddress from;
  from.host = "10.0.0.1";
  from.port = 7000;
  for (int i = 0; i < 4; ++i) {
    void* raw = nullptr;
    if (redisReaderGetReply(reader, &raw) != REDIS_OK || raw == nullptr) break;
    const fleet::RedisReply r(static_cast<redisReply*>(raw));
    if (const auto map = fleet::SlotMap::fromClusterSlots(*r, from)) {
      int served = 0;
      for (int slot = 0; slot < fleet::kClusterSlots; ++slot) {
        const config::RedisAddress* node = map->nodeFor(static_cast<std::uint16_t>(slot));
        if (node == nullptr) continue;
        ++served;
        check(std::find(map->nodes().begin(), map->nodes().end(), *node) != map->nodes().end());
        check(node->port != 0);
      }
      check(served + map->unserved() == fleet::kClusterSlots);
      int ranged = 0;
      for (const config::RedisAddress& n : map->nodes()) {
        for (const fleet::SlotRange& range : map->slotsOf(n)) {
          check(range.first <= range.last && range.last < fleet::kClusterSlots);
          check(*map->nodeFor(range.first) == n && *map->nodeFor(range.last) == n);
          ranged += range.last - range.first + 1;
        }
      }
      check(ranged == served);
    }
    if (const std::string_view error = fleet::errorText(*r); !error.empty()) {
      if (const auto redirect = fleet::parseRedirect(error, from)) {
        check(redirect->slot < fleet::kClusterSlots);
        check(redirect->to.port != 0 && !redirect->to.host.empty());
      }
    }
  }
  redisReaderFree(reader);
}

void url(std::string_view text) {
  const auto parsed = config::parseRedisUrl(text);
  const std::string redacted = config::redactedUrl(text);
  if (const auto* u = std::get_if<config::RedisUrl>(&parsed)) {
    check(!u->hosts.empty());
    for (const config::RedisAddress& a : u->hosts) check(a.port != 0 || !a.unix_path.empty());
    // The userinfo's raw password text is gone from the redacted form.
    const std::size_t scheme = text.find("://");
    const std::string_view rest = text.substr(scheme + 3);
    const std::size_t at = rest.substr(0, rest.find_first_of("/#")).rfind('@');
    if (at != std::string_view::npos) {
      const std::string_view userinfo = rest.substr(0, at);
      const std::size_t colon = userinfo.find(':');
      if (colon != std::string_view::npos && colon + 1 < userinfo.size()) {
        check(redacted.find("***@") != std::string::npos);
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  check(fleet::keySlot(rest) < fleet::kClusterSlots);
  if (data[0] % 2 == 0) {
    reply(rest);
  } else {
    url(rest);
  }
  return 0;
}
