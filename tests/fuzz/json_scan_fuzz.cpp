// libFuzzer target for the gateway's body reader (gateway/json_scan.hpp),
// which every caller's request body and every upstream answer goes through:
// whatever the bytes, it accepts exactly what nlohmann/json accepts (but
// for nesting past its bound and a NUL byte, which it refuses, and
// numbers past a double's range, which it takes), never reads past the
// input, and parseGenerateRequest on an accepted body gives an upstream
// body that is valid JSON.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <variant>

#include <nlohmann/json.hpp>

#include "gateway/json_scan.hpp"
#include "gateway/openai_json.hpp"

namespace {

int depthOf(std::string_view t) {
  int depth = 0, most = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < t.size(); ++i) {
    const char c = t[i];
    if (in_string) {
      if (c == '\\') ++i;
      if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    if (c == '[' || c == '{') most = std::max(most, ++depth);
    if (c == ']' || c == '}') --depth;
  }
  return most;
}

// nlohmann refuses `t` for a number it cannot hold in a double.
bool overflows(std::string_view t) {
  try {
    (void)nlohmann::json::parse(t.begin(), t.end());
  } catch (const nlohmann::json::out_of_range& e) {
    return e.id == 406;
  } catch (const nlohmann::json::exception&) {
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using fairsched::gateway::JsonScan;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  JsonScan s(text);
  const bool scanned = s.skip() && s.end();
  const bool accepted = nlohmann::json::accept(text.begin(), text.end());
  // nlohmann reads a NUL byte as the end of its input, where JsonScan
  // refuses the stray byte; nlohmann refuses a number past a double's
  // range, which RFC 8259 allows and JsonScan takes. Past its depth bound
  // JsonScan refuses what nlohmann takes.
  const bool comparable =
      text.find('\0') == std::string_view::npos && !(scanned && !accepted && overflows(text));
  if (comparable && scanned != accepted && !(accepted && depthOf(text) > JsonScan::kMaxDepth)) {
    std::abort();
  }
  for (const auto route :
       {fairsched::gateway::Route::kCompletions, fairsched::gateway::Route::kChatCompletions,
        fairsched::gateway::Route::kEmbeddings}) {
    auto r = fairsched::gateway::parseGenerateRequest(route, text, 16, 4096);
    if (const auto* g = std::get_if<fairsched::gateway::GenerateRequest>(&r)) {
      const std::string& up = g->upstream_body;
      JsonScan again(up);
      if (!scanned || !(again.skip() && again.end())) std::abort();
      if (!nlohmann::json::accept(up) && !overflows(up)) std::abort();
    }
  }
  (void)fairsched::gateway::parseStreamChunk(text);
  (void)fairsched::gateway::parseResponseUsage(text);
  return 0;
}
