#include "bench/trace.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <istream>
#include <limits>

#include <nlohmann/json.hpp>

#include "fairsched/prefix_hash.hpp"

namespace fairsched::bench {
namespace {

using nlohmann::json;

std::optional<TraceError> readUint32(const json& j, const char* field, std::size_t line,
                                     std::uint32_t& out) {
  auto it = j.find(field);
  if (it == j.end()) return TraceError{line, field, "missing"};
  if (!it->is_number_integer() || (!it->is_number_unsigned() && it->get<std::int64_t>() < 0)) {
    return TraceError{line, field, "must be a non-negative integer"};
  }
  const std::uint64_t v = it->get<std::uint64_t>();
  if (v > std::numeric_limits<std::uint32_t>::max()) {
    return TraceError{line, field, "out of range"};
  }
  out = static_cast<std::uint32_t>(v);
  return std::nullopt;
}

std::optional<TraceError> readString(const json& j, const char* field, std::size_t line,
                                     std::string& out) {
  auto it = j.find(field);
  if (it == j.end()) return TraceError{line, field, "missing"};
  if (!it->is_string() || it->get_ref<const std::string&>().empty()) {
    return TraceError{line, field, "must be a non-empty string"};
  }
  out = it->get<std::string>();
  return std::nullopt;
}

std::variant<TraceRequest, TraceError> parseLine(const std::string& text, std::size_t line) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return TraceError{line, "", "not valid JSON"};
  if (!j.is_object()) return TraceError{line, "", "not a JSON object"};
  TraceRequest r;
  r.line = line;
  auto t = j.find("t");
  if (t == j.end()) return TraceError{line, "t", "missing"};
  if (!t->is_number() || !std::isfinite(t->get<double>()) || t->get<double>() < 0) {
    return TraceError{line, "t", "must be a non-negative number of seconds"};
  }
  r.t = t->get<double>();
  if (auto e = readString(j, "tenant", line, r.tenant)) return *e;
  if (auto e = readString(j, "endpoint", line, r.endpoint)) return *e;
  if (auto e = readUint32(j, "input_tokens", line, r.input_tokens)) return *e;
  if (auto e = readUint32(j, "output_tokens", line, r.output_tokens)) return *e;
  if (j.contains("max_output_tokens")) {
    std::uint32_t max_output = 0;
    if (auto e = readUint32(j, "max_output_tokens", line, max_output)) return *e;
    if (max_output < r.output_tokens) {
      return TraceError{line, "max_output_tokens", "must be at least output_tokens"};
    }
    r.max_output_tokens = max_output;
  }
  if (auto p = j.find("priority"); p != j.end()) {
    if (!p->is_number_integer() ||
        p->get<std::int64_t>() < std::numeric_limits<std::int32_t>::min() ||
        p->get<std::int64_t>() > std::numeric_limits<std::int32_t>::max()) {
      return TraceError{line, "priority", "must be a 32-bit integer"};
    }
    r.priority = static_cast<std::int32_t>(p->get<std::int64_t>());
  }
  if (auto d = j.find("deadline_ms"); d != j.end()) {
    if (!d->is_number() || !std::isfinite(d->get<double>()) || d->get<double>() < 0) {
      return TraceError{line, "deadline_ms", "must be a non-negative number"};
    }
    r.deadline_ms = d->get<double>();
  }
  if (auto p = j.find("prefix"); p != j.end()) {
    if (!p->is_array()) return TraceError{line, "prefix", "must be an array of segments"};
    std::uint64_t total = 0;
    for (const json& seg : *p) {
      if (!seg.is_object()) {
        return TraceError{line, "prefix", "each segment must be {\"id\": string, \"tokens\": N}"};
      }
      PrefixSegment s;
      if (auto err = readString(seg, "id", line, s.id)) {
        err->field = "prefix." + err->field;
        return *err;
      }
      if (auto err = readUint32(seg, "tokens", line, s.tokens)) {
        err->field = "prefix." + err->field;
        return *err;
      }
      total += s.tokens;
      r.prefix.push_back(std::move(s));
    }
    if (total > r.input_tokens) {
      return TraceError{line, "prefix", "its segments hold more tokens than input_tokens"};
    }
  }
  return r;
}

}  // namespace

std::vector<std::uint32_t> promptTokens(const TraceRequest& r, std::size_t index, std::size_t limit,
                                        std::size_t* shared_tokens) {
  auto tokenOf = [](std::uint64_t name, std::uint64_t k) {
    std::uint64_t x = name ^ (k * 0x9e3779b97f4a7c15ULL);
    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 29;
    return static_cast<std::uint32_t>(x);
  };
  limit = std::min<std::size_t>(r.input_tokens, limit);
  std::vector<std::uint32_t> tokens;
  tokens.reserve(limit);
  std::size_t shared = 0;
  for (const PrefixSegment& s : r.prefix) {
    std::uint64_t name = 0xcbf29ce484222325ULL;  // FNV-1a of the id: the same on every host
    for (const char c : s.id) name = (name ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
    for (std::uint32_t k = 0; k < s.tokens && tokens.size() < limit; ++k) {
      tokens.push_back(tokenOf(name, k));
    }
    shared += s.tokens;
  }
  const std::uint64_t own = 0x5eed0000000000ULL + index;
  for (std::uint64_t k = 0; tokens.size() < limit; ++k) tokens.push_back(tokenOf(own, k));
  if (shared_tokens != nullptr) *shared_tokens = shared;
  return tokens;
}

std::vector<std::uint64_t> promptChain(const TraceRequest& r, std::size_t index,
                                       std::uint32_t block_tokens, std::size_t max_blocks,
                                       std::size_t* shared_blocks) {
  std::size_t shared = 0;
  const std::vector<std::uint32_t> tokens =
      promptTokens(r, index, max_blocks * std::size_t{block_tokens}, &shared);
  std::vector<std::uint64_t> chain = prefixBlockHashes(tokens, block_tokens, max_blocks);
  if (shared_blocks != nullptr) *shared_blocks = std::min(chain.size(), shared / block_tokens);
  return chain;
}

std::string TraceError::toString() const {
  std::string s;
  if (line != 0) s += "line " + std::to_string(line) + ": ";
  if (!field.empty()) s += field + ": ";
  return s + message;
}

TraceResult parseTrace(std::istream& in) {
  std::vector<TraceRequest> out;
  std::string text;
  std::size_t line = 0;
  while (std::getline(in, text)) {
    ++line;
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto parsed = parseLine(text, line);
    if (auto* err = std::get_if<TraceError>(&parsed)) return *err;
    out.push_back(std::move(std::get<TraceRequest>(parsed)));
  }
  return out;
}

TraceResult loadTraceFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return TraceError{0, "", "cannot open " + path};
  auto r = parseTrace(in);
  if (auto* err = std::get_if<TraceError>(&r); err && err->line != 0) {
    err->message += " (" + path + ")";
  }
  return r;
}

}  // namespace fairsched::bench
