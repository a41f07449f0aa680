#include "gateway/openai_json.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <limits>
#include <optional>
#include <vector>

#include "fairsched/prefix_hash.hpp"

namespace fairsched::gateway {

namespace {

using nlohmann::json;

std::uint64_t textBytes(const json& v) {
  if (v.is_string()) return v.get_ref<const std::string&>().size();
  std::uint64_t n = 0;
  if (v.is_array()) {
    for (const json& e : v) {
      if (e.is_string()) {
        n += e.get_ref<const std::string&>().size();
      } else if (e.is_object()) {  // content parts: {"type":"text","text":...}
        if (auto t = e.find("text"); t != e.end() && t->is_string()) {
          n += t->get_ref<const std::string&>().size();
        }
      } else if (e.is_number_integer()) {  // a prompt given as token ids
        n += 4;
      } else if (e.is_array()) {
        n += textBytes(e);
      }
    }
  }
  return n;
}

// Feeds a message's or prompt's text content to `h` (a string, or the text
// of its parts in order).
void feedText(const json& v, TextPrefixHasher& h) {
  if (v.is_string()) {
    h.feed(v.get_ref<const std::string&>());
  } else if (v.is_array()) {
    for (const json& e : v) {
      if (e.is_string()) {
        h.feed(e.get_ref<const std::string&>());
      } else if (e.is_object()) {
        if (auto t = e.find("text"); t != e.end() && t->is_string()) {
          h.feed(t->get_ref<const std::string&>());
        }
      }
    }
  }
}

// A completion's prompt as token ids (an array of them, or an array of one
// such array), when it is one.
std::optional<std::vector<std::uint32_t>> promptIds(const json& p) {
  const json* a = &p;
  if (p.is_array() && p.size() == 1 && p[0].is_array()) a = &p[0];
  if (!a->is_array() || a->empty()) return std::nullopt;
  std::vector<std::uint32_t> ids;
  ids.reserve(a->size());
  for (const json& t : *a) {
    if (!t.is_number_unsigned() || t.get<std::uint64_t>() > UINT32_MAX) return std::nullopt;
    ids.push_back(static_cast<std::uint32_t>(t.get<std::uint64_t>()));
  }
  return ids;
}

std::uint32_t clampTokens(std::uint64_t v) {
  return static_cast<std::uint32_t>(std::min<std::uint64_t>(v, 1u << 30));
}

// /v1/embeddings: "input" is a string, an array of strings, an array of
// token ids or an array of such arrays. Nothing is generated: the request
// reserves its input alone (max_tokens 0) and is never streamed.
std::variant<GenerateRequest, BodyError> embeddingsRequest(json j, GenerateRequest r) {
  if (r.stream) return BodyError{"embeddings are not streamed", "stream"};
  const auto in = j.find("input");
  if (in == j.end()) return BodyError{"'input' is required", "input"};
  const auto tokenIds = [](const json& a) {
    return a.is_array() && !a.empty() &&
           std::all_of(a.begin(), a.end(), [](const json& t) { return t.is_number_unsigned(); });
  };
  std::uint64_t tokens = 0;
  if (in->is_string()) {
    tokens = (in->get_ref<const std::string&>().size() + 3) / 4;
  } else if (tokenIds(*in)) {
    tokens = in->size();
  } else if (in->is_array() && !in->empty()) {
    for (const json& item : *in) {
      if (item.is_string()) {
        tokens += std::max<std::uint64_t>(1, (item.get_ref<const std::string&>().size() + 3) / 4);
      } else if (tokenIds(item)) {
        tokens += item.size();
      } else {
        return BodyError{
            "'input' must be a string, an array of strings, an array of token ids or an array of "
            "such arrays",
            "input"};
      }
    }
  } else {
    return BodyError{"'input' must be a non-empty string or array", "input"};
  }
  r.prompt_tokens = clampTokens(std::max<std::uint64_t>(1, tokens));
  r.max_tokens = 0;
  r.upstream_body = j.dump();
  return r;
}

}  // namespace

std::variant<GenerateRequest, BodyError> parseGenerateRequest(Route route, std::string_view body,
                                                              std::uint32_t default_max_tokens,
                                                              std::uint32_t max_output_tokens,
                                                              const PrefixOptions& prefix) {
  json j = json::parse(body.begin(), body.end(), nullptr, false);
  if (j.is_discarded()) return BodyError{"the request body is not valid JSON", ""};
  if (!j.is_object()) return BodyError{"the request body must be a JSON object", ""};
  GenerateRequest r;
  if (auto m = j.find("model"); m != j.end()) {
    if (!m->is_string()) return BodyError{"'model' must be a string", "model"};
    r.model = m->get<std::string>();
  }
  if (auto s = j.find("stream"); s != j.end() && !s->is_null()) {
    if (!s->is_boolean()) return BodyError{"'stream' must be a boolean", "stream"};
    r.stream = s->get<bool>();
  }
  // An engine's scheduling priority (vLLM, SGLang): kept apart, so that an
  // upstream with engine_priority set gets the gateway's instead.
  if (auto p = j.find("priority"); p != j.end()) {
    if (!p->is_null()) {
      if (!p->is_number_integer()) return BodyError{"'priority' must be an integer", "priority"};
      r.caller_priority = p->get<std::int64_t>();
    }
    j.erase(p);
  }
  if (auto n = j.find("n"); n != j.end() && !n->is_null()) {
    if (!n->is_number_integer() || n->get<std::int64_t>() != 1) {
      return BodyError{"only n = 1 is supported", "n"};
    }
  }
  if (auto b = j.find("best_of"); b != j.end() && !b->is_null()) {
    if (!b->is_number_integer() || b->get<std::int64_t>() != 1) {
      return BodyError{"only best_of = 1 is supported", "best_of"};
    }
  }
  std::uint64_t bytes = 0;
  std::uint64_t overhead = 0;
  if (route == Route::kEmbeddings) return embeddingsRequest(std::move(j), std::move(r));
  if (route == Route::kCompletions) {
    auto p = j.find("prompt");
    if (p == j.end() || !(p->is_string() || p->is_array())) {
      return BodyError{"'prompt' must be a string or an array", "prompt"};
    }
    if (p->is_array() && !p->empty() && (*p)[0].is_string() && p->size() > 1) {
      return BodyError{"only one prompt per request is supported", "prompt"};
    }
    bytes = textBytes(*p);
    if (prefix.block_bytes > 0) {
      if (auto ids = promptIds(*p)) {
        r.prefix = prefixBlockHashes(*ids, prefix.block_tokens, prefix.max_blocks);
      } else {
        TextPrefixHasher h(prefix.block_bytes, prefix.max_blocks);
        feedText(*p, h);
        r.prefix = std::move(h.hashes());
      }
    }
  } else {
    auto m = j.find("messages");
    if (m == j.end() || !m->is_array() || m->empty()) {
      return BodyError{"'messages' must be a non-empty array", "messages"};
    }
    TextPrefixHasher h(prefix.block_bytes > 0 ? prefix.block_bytes : 1,
                       prefix.block_bytes > 0 ? prefix.max_blocks : 0);
    for (const json& msg : *m) {
      if (!msg.is_object()) return BodyError{"each message must be an object", "messages"};
      if (auto role = msg.find("role"); role != msg.end() && role->is_string()) {
        h.feed(role->get_ref<const std::string&>());
      }
      h.feed("\x1f");
      if (auto c = msg.find("content"); c != msg.end()) {
        bytes += textBytes(*c);
        feedText(*c, h);
      }
      h.feed("\x1e");
      overhead += 4;
    }
    r.prefix = std::move(h.hashes());
  }
  r.prompt_tokens = clampTokens(std::max<std::uint64_t>(1, (bytes + 3) / 4 + overhead));

  // max_tokens (and chat's max_completion_tokens): the reservation, and what
  // the upstream is told, so it never produces more than was reserved.
  const char* key = "max_tokens";
  auto mt = j.find("max_tokens");
  if (route == Route::kChatCompletions) {
    if (auto mct = j.find("max_completion_tokens"); mct != j.end() && !mct->is_null()) {
      mt = mct;
      key = "max_completion_tokens";
    }
  }
  if (mt != j.end() && !mt->is_null()) {
    if (!mt->is_number_integer() || mt->get<std::int64_t>() < 1 ||
        mt->get<std::int64_t>() > std::numeric_limits<std::int32_t>::max()) {
      return BodyError{std::string("'") + key + "' must be a positive integer", key};
    }
    r.max_tokens = static_cast<std::uint32_t>(mt->get<std::int64_t>());
  } else {
    r.max_tokens = default_max_tokens;
    if (max_output_tokens != 0) r.max_tokens = std::min(r.max_tokens, max_output_tokens);
  }
  if (max_output_tokens != 0 && r.max_tokens > max_output_tokens) {
    return BodyError{std::string("'") + key + "' is above this endpoint's limit of " +
                         std::to_string(max_output_tokens),
                     key};
  }
  j[key] = r.max_tokens;

  if (r.stream) {
    auto so = j.find("stream_options");
    if (so != j.end() && !so->is_null() && !so->is_object()) {
      return BodyError{"'stream_options' must be an object", "stream_options"};
    }
    if (so != j.end() && so->is_object()) {
      if (auto iu = so->find("include_usage"); iu != so->end() && iu->is_boolean()) {
        r.caller_wants_usage = iu->get<bool>();
      }
    }
    j["stream_options"]["include_usage"] = true;
  }
  r.upstream_body = j.dump();
  return r;
}

namespace {

std::optional<Usage> usageOf(const json& j) {
  auto u = j.find("usage");
  if (u == j.end() || !u->is_object()) return std::nullopt;
  Usage out;
  if (auto p = u->find("prompt_tokens"); p != u->end() && p->is_number_unsigned()) {
    out.prompt_tokens = clampTokens(p->get<std::uint64_t>());
  }
  if (auto c = u->find("completion_tokens"); c != u->end() && c->is_number_unsigned()) {
    out.completion_tokens = clampTokens(c->get<std::uint64_t>());
  }
  return out;
}

}  // namespace

namespace {

// parseStreamChunk's reader: nlohmann's SAX interface, so an event is
// scanned once without building a document (an SSE stream has one event
// per token). It follows the path of each value and keeps what the chunk
// says: root.error, root.usage.{prompt,completion}_tokens, root.choices[]
// and in each choice text, delta.content, delta.reasoning_content and
// delta.tool_calls[].
class ChunkReader {
 public:
  using string_t = json::string_t;
  using binary_t = json::binary_t;

  StreamChunk result() && {
    if (!ok_) return {};
    c_.valid = true;
    c_.usage_only = choices_ == 0 && c_.usage.has_value();
    return std::move(c_);
  }

  bool null() { return value(); }
  bool boolean(bool) { return value(); }
  bool number_integer(json::number_integer_t) { return value(); }
  bool number_unsigned(json::number_unsigned_t v) {
    if (at(2) && in(0, "usage") && c_.usage && !stack_[1].array) {
      if (keyAt(1) == "prompt_tokens") c_.usage->prompt_tokens = clampTokens(v);
      if (keyAt(1) == "completion_tokens") c_.usage->completion_tokens = clampTokens(v);
    }
    return value();
  }
  bool number_float(json::number_float_t, const string_t&) { return value(); }
  bool string(string_t& v) {
    if (!v.empty() && inChoice(3) && keyAt(2) == "text") c_.has_text = true;
    if (!v.empty() && at(4) && inDelta() &&
        (keyAt(3) == "content" || keyAt(3) == "reasoning_content")) {
      c_.has_text = true;
    }
    return value();
  }
  bool binary(binary_t&) { return value(); }
  bool start_object(std::size_t) {
    if (stack_.empty()) {  // the root: an object, or not a chunk
      if (seen_root_) return false;
      seen_root_ = true;
      stack_.push_back(Frame{false, {}, 0});
      return true;
    }
    if (at(1) && keyAt(0) == "usage") c_.usage = Usage{};
    if (!value()) return false;
    stack_.push_back(Frame{false, {}, 0});
    return true;
  }
  bool key(string_t& k) {
    stack_.back().key.assign(k);
    if (at(1) && k == "error") c_.is_error = true;
    return true;
  }
  bool end_object() {
    stack_.pop_back();
    if (stack_.empty()) ok_ = true;
    return true;
  }
  bool start_array(std::size_t) {
    if (stack_.empty()) return false;  // an array is not a chunk
    if (!value()) return false;
    stack_.push_back(Frame{true, {}, 0});
    return true;
  }
  bool end_array() {
    stack_.pop_back();
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) {
    return false;
  }

 private:
  struct Frame {
    bool array = false;
    std::string key;  // an object's current key
    std::size_t items = 0;
  };

  // A value arrives in the innermost container.
  bool value() {
    if (stack_.empty()) return false;  // a bare value is not a chunk
    Frame& top = stack_.back();
    if (!top.array) return true;
    ++top.items;
    if (at(2) && in(0, "choices")) ++choices_;                          // a choice
    if (stack_.size() == 5 && inDelta() && keyAt(3) == "tool_calls") {  // a tool call
      c_.has_text = true;
    }
    return true;
  }
  // The stack is `depth` frames deep.
  bool at(std::size_t depth) const { return stack_.size() == depth; }
  const std::string& keyAt(std::size_t i) const { return stack_[i].key; }
  // Frame i is an object whose current key is `k`.
  bool in(std::size_t i, std::string_view k) const {
    return stack_.size() > i && !stack_[i].array && stack_[i].key == k;
  }
  // Inside a choice object, `depth` frames deep (root, choices[], the choice, ...).
  bool inChoice(std::size_t depth) const {
    return stack_.size() == depth && in(0, "choices") && stack_[1].array && !stack_[2].array;
  }
  // Directly inside a choice's delta object (or one level below it, for tool_calls).
  bool inDelta() const {
    return stack_.size() >= 4 && in(0, "choices") && stack_[1].array && in(2, "delta") &&
           !stack_[3].array;
  }

  std::vector<Frame> stack_;
  StreamChunk c_;
  std::size_t choices_ = 0;
  bool seen_root_ = false;
  bool ok_ = false;
};

}  // namespace

StreamChunk parseStreamChunk(std::string_view payload) {
  ChunkReader r;
  if (!json::sax_parse(payload.begin(), payload.end(), &r)) return {};
  return std::move(r).result();
}

std::optional<Usage> parseResponseUsage(std::string_view body) {
  json j = json::parse(body.begin(), body.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  return usageOf(j);
}

std::string errorJson(std::string_view message, std::string_view type, std::string_view param,
                      std::string_view code) {
  json e = json::object();
  e["message"] = std::string(message);
  e["type"] = std::string(type);
  e["param"] = param.empty() ? json(nullptr) : json(std::string(param));
  e["code"] = code.empty() ? json(nullptr) : json(std::string(code));
  json out = json::object();
  out["error"] = std::move(e);
  // Invalid UTF-8 in a message (a peer's bytes) is replaced, never thrown on.
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string bodyForEngine(std::string body, UpstreamConfig::EnginePriority mode,
                          std::uint32_t tenant_calls, std::optional<std::int64_t> caller_priority) {
  std::optional<std::int64_t> priority = caller_priority;
  if (mode == UpstreamConfig::EnginePriority::kLowerFirst) priority = tenant_calls;
  if (mode == UpstreamConfig::EnginePriority::kHigherFirst) {
    priority = -static_cast<std::int64_t>(tenant_calls);
  }
  if (!priority) return body;
  const std::size_t close = body.rfind('}');
  if (close == std::string::npos) return body;
  std::string field = "\"priority\":" + std::to_string(*priority);
  const bool empty = body.find_first_not_of(" \t\r\n", body.find('{') + 1) == close;
  body.insert(close, empty ? field : "," + field);
  return body;
}

}  // namespace fairsched::gateway
