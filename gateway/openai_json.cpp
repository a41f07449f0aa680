#include "gateway/openai_json.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <limits>
#include <optional>
#include <vector>

#include "fairsched/prefix_hash.hpp"
#include "gateway/json_scan.hpp"

namespace fairsched::gateway {

namespace {

using nlohmann::json;
using Scan = JsonScan;
using Type = JsonScan::Type;

// One value of the body, as written (checked already: the whole body was).
struct Val {
  Type type = Type::kBad;
  std::string_view text;
  bool is(Type t) const { return type == t; }
};

// The next value of `s`, skipped.
Val take(Scan& s) {
  Val v{s.peek(), {}};
  const std::size_t from = s.pos();
  if (!s.skip()) return {};
  v.text = s.text().substr(from, s.pos() - from);
  return v;
}

template <class F>
void eachItem(const Val& array, F&& f) {
  if (!array.is(Type::kArray)) return;
  Scan s(array.text);
  s.enterArray();
  while (s.nextItem()) f(take(s));
}

std::size_t itemCount(const Val& array) {
  std::size_t n = 0;
  eachItem(array, [&](const Val&) { ++n; });
  return n;
}

// An object's member `key` (the last, when given twice), if any.
std::optional<Val> member(const Val& object, std::string_view key) {
  if (!object.is(Type::kObject)) return std::nullopt;
  std::optional<Val> found;
  Scan s(object.text);
  s.enterObject();
  std::string_view k;
  while (s.nextMember(k)) {
    const Val v = take(s);
    if (Scan::keyIs(k, key)) found = v;
  }
  return found;
}

std::string_view rawString(const Val& v) {
  return v.text.substr(1, v.text.size() - 2);
}

// A string value's text, escapes decoded.
std::string str(const Val& v) {
  const std::string_view raw = rawString(v);
  return raw.find('\\') == std::string_view::npos ? std::string(raw) : Scan::decode(raw);
}
std::uint64_t strBytes(const Val& v) {
  const std::string_view raw = rawString(v);
  return raw.find('\\') == std::string_view::npos ? raw.size() : Scan::decode(raw).size();
}

std::optional<std::uint64_t> asUnsigned(const Val& v) {
  return v.is(Type::kNumber) ? Scan::unsignedValue(v.text) : std::nullopt;
}
std::optional<std::int64_t> asInteger(const Val& v) {
  return v.is(Type::kNumber) ? Scan::integerValue(v.text) : std::nullopt;
}
bool isInteger(const Val& v) {
  return asInteger(v) || asUnsigned(v);
}
bool isNull(const Val& v) {
  return v.is(Type::kLiteral) && v.text == "null";
}

std::uint64_t textBytes(const Val& v) {
  if (v.is(Type::kString)) return strBytes(v);
  std::uint64_t n = 0;
  eachItem(v, [&](const Val& e) {
    if (e.is(Type::kString)) {
      n += strBytes(e);
    } else if (e.is(Type::kObject)) {  // content parts: {"type":"text","text":...}
      if (auto t = member(e, "text"); t && t->is(Type::kString)) n += strBytes(*t);
    } else if (isInteger(e)) {  // a prompt given as token ids
      n += 4;
    } else if (e.is(Type::kArray)) {
      n += textBytes(e);
    }
  });
  return n;
}

// Feeds a message's or prompt's text content to `h` (a string, or the text
// of its parts in order).
void feedText(const Val& v, TextPrefixHasher& h) {
  if (v.is(Type::kString)) {
    h.feed(str(v));
    return;
  }
  eachItem(v, [&](const Val& e) {
    if (e.is(Type::kString)) {
      h.feed(str(e));
    } else if (e.is(Type::kObject)) {
      if (auto t = member(e, "text"); t && t->is(Type::kString)) h.feed(str(*t));
    }
  });
}

// A completion's prompt as token ids (an array of them, or an array of one
// such array), when it is one.
std::optional<std::vector<std::uint32_t>> promptIds(const Val& p) {
  Val a = p;
  if (itemCount(p) == 1) {
    eachItem(p, [&](const Val& only) {
      if (only.is(Type::kArray)) a = only;
    });
  }
  std::vector<std::uint32_t> ids;
  bool all = a.is(Type::kArray);
  eachItem(a, [&](const Val& t) {
    const std::optional<std::uint64_t> id = asUnsigned(t);
    if (!id || *id > UINT32_MAX) all = false;
    if (all) ids.push_back(static_cast<std::uint32_t>(*id));
  });
  if (!all || ids.empty()) return std::nullopt;
  return ids;
}

std::uint32_t clampTokens(std::uint64_t v) {
  return static_cast<std::uint32_t>(std::min<std::uint64_t>(v, 1u << 30));
}

// The body's top-level members, each as written: the upstream gets them
// again in their order, less those the gateway sets itself.
struct Member {
  std::string_view key;   // raw
  std::string_view text;  // "key":value as written
  Val value;
};

// The members of the body, or an error when it is not a JSON object.
std::variant<std::vector<Member>, BodyError> bodyMembers(std::string_view body) {
  Scan s(body);
  if (s.peek() != Type::kObject) {
    return s.skip() && s.end() ? BodyError{"the request body must be a JSON object", ""}
                               : BodyError{"the request body is not valid JSON", ""};
  }
  std::vector<Member> out;
  out.reserve(16);
  s.enterObject();
  std::string_view k;
  while (s.nextMember(k)) {
    const auto from = static_cast<std::size_t>(k.data() - body.data()) - 1;  // its '"'
    Member m{k, {}, take(s)};
    m.text = body.substr(from, s.pos() - from);
    out.push_back(m);
  }
  if (!s.end()) return BodyError{"the request body is not valid JSON", ""};
  return out;
}

// The last member named `key`.
std::optional<Val> find(const std::vector<Member>& ms, std::string_view key) {
  for (auto it = ms.rbegin(); it != ms.rend(); ++it) {
    if (Scan::keyIs(it->key, key)) return it->value;
  }
  return std::nullopt;
}

// The body again: its members less every one named in `drop`, then `add`
// (members as written; empty ones left out).
std::string rebuild(const std::vector<Member>& ms, std::initializer_list<std::string_view> drop,
                    std::initializer_list<std::string_view> add) {
  std::string out = "{";
  const auto append = [&](std::string_view m) {
    if (out.size() > 1) out += ',';
    out += m;
  };
  for (const Member& m : ms) {
    if (std::none_of(drop.begin(), drop.end(),
                     [&](std::string_view d) { return !d.empty() && Scan::keyIs(m.key, d); })) {
      append(m.text);
    }
  }
  for (const std::string_view m : add) {
    if (!m.empty()) append(m);
  }
  out += '}';
  return out;
}

// /v1/embeddings: "input" is a string, an array of strings, an array of
// token ids or an array of such arrays. Nothing is generated: the request
// reserves its input alone (max_tokens 0) and is never streamed.
std::variant<GenerateRequest, BodyError> embeddingsRequest(const std::vector<Member>& ms,
                                                           GenerateRequest r) {
  if (r.stream) return BodyError{"embeddings are not streamed", "stream"};
  const std::optional<Val> in = find(ms, "input");
  if (!in) return BodyError{"'input' is required", "input"};
  const auto tokenIds = [](const Val& a) {
    bool all = a.is(Type::kArray);
    eachItem(a, [&](const Val& t) { all = all && asUnsigned(t).has_value(); });
    return all && itemCount(a) > 0;
  };
  std::uint64_t tokens = 0;
  if (in->is(Type::kString)) {
    tokens = (strBytes(*in) + 3) / 4;
  } else if (tokenIds(*in)) {
    tokens = itemCount(*in);
  } else if (in->is(Type::kArray) && itemCount(*in) > 0) {
    bool usable = true;
    eachItem(*in, [&](const Val& item) {
      if (item.is(Type::kString)) {
        tokens += std::max<std::uint64_t>(1, (strBytes(item) + 3) / 4);
      } else if (tokenIds(item)) {
        tokens += itemCount(item);
      } else {
        usable = false;
      }
    });
    if (!usable) {
      return BodyError{
          "'input' must be a string, an array of strings, an array of token ids or an array of "
          "such arrays",
          "input"};
    }
  } else {
    return BodyError{"'input' must be a non-empty string or array", "input"};
  }
  r.prompt_tokens = clampTokens(std::max<std::uint64_t>(1, tokens));
  r.max_tokens = 0;
  r.upstream_body = rebuild(ms, {"priority"}, {});
  return r;
}

// The upstream's stream_options: the caller's, include_usage set (the
// caller's own choice noted in `r`). `so`: the caller's, an object or none.
std::string streamOptions(const std::optional<Val>& so, GenerateRequest& r) {
  std::string out = "\"stream_options\":{";
  if (so && so->is(Type::kObject)) {
    Scan s(so->text);
    s.enterObject();
    std::string_view k;
    while (s.nextMember(k)) {
      const auto from = static_cast<std::size_t>(k.data() - so->text.data()) - 1;
      const Val v = take(s);
      if (Scan::keyIs(k, "include_usage")) {
        if (v.is(Type::kLiteral) && !isNull(v)) r.caller_wants_usage = v.text == "true";
        continue;
      }
      out += so->text.substr(from, s.pos() - from);
      out += ',';
    }
  }
  out += "\"include_usage\":true}";
  return out;
}

}  // namespace

// One scan of the body, building nothing of it: the fields below are read
// as written, and the upstream's body is the caller's members again, less
// those the gateway sets (priority, the max_tokens key, stream_options).
std::variant<GenerateRequest, BodyError> parseGenerateRequest(Route route, std::string_view body,
                                                              std::uint32_t default_max_tokens,
                                                              std::uint32_t max_output_tokens,
                                                              const PrefixOptions& prefix) {
  auto parsed = bodyMembers(body);
  if (auto* e = std::get_if<BodyError>(&parsed)) return std::move(*e);
  const std::vector<Member>& ms = std::get<std::vector<Member>>(parsed);
  GenerateRequest r;
  if (auto m = find(ms, "model")) {
    if (!m->is(Type::kString)) return BodyError{"'model' must be a string", "model"};
    r.model = str(*m);
  }
  if (auto s = find(ms, "stream"); s && !isNull(*s)) {
    if (!s->is(Type::kLiteral)) return BodyError{"'stream' must be a boolean", "stream"};
    r.stream = s->text == "true";
  }
  // An engine's scheduling priority (vLLM, SGLang): kept apart, so that an
  // upstream with engine_priority set gets the gateway's instead.
  if (auto p = find(ms, "priority"); p && !isNull(*p)) {
    const std::optional<std::int64_t> v = asInteger(*p);
    if (!v) return BodyError{"'priority' must be an integer", "priority"};
    r.caller_priority = *v;
  }
  if (auto n = find(ms, "n"); n && !isNull(*n) && asInteger(*n) != 1) {
    return BodyError{"only n = 1 is supported", "n"};
  }
  if (auto b = find(ms, "best_of"); b && !isNull(*b) && asInteger(*b) != 1) {
    return BodyError{"only best_of = 1 is supported", "best_of"};
  }
  std::uint64_t bytes = 0;
  std::uint64_t overhead = 0;
  if (route == Route::kEmbeddings) return embeddingsRequest(ms, std::move(r));
  if (route == Route::kCompletions) {
    const std::optional<Val> p = find(ms, "prompt");
    if (!p || !(p->is(Type::kString) || p->is(Type::kArray))) {
      return BodyError{"'prompt' must be a string or an array", "prompt"};
    }
    if (itemCount(*p) > 1) {
      bool first = true;
      bool first_is_string = false;
      eachItem(*p, [&](const Val& e) {
        if (first) first_is_string = e.is(Type::kString);
        first = false;
      });
      if (first_is_string) return BodyError{"only one prompt per request is supported", "prompt"};
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
    const std::optional<Val> m = find(ms, "messages");
    if (!m || !m->is(Type::kArray) || itemCount(*m) == 0) {
      return BodyError{"'messages' must be a non-empty array", "messages"};
    }
    TextPrefixHasher h(prefix.block_bytes > 0 ? prefix.block_bytes : 1,
                       prefix.block_bytes > 0 ? prefix.max_blocks : 0);
    bool objects = true;
    eachItem(*m, [&](const Val& msg) {
      objects = objects && msg.is(Type::kObject);
      if (!objects) return;
      if (auto role = member(msg, "role"); role && role->is(Type::kString)) h.feed(str(*role));
      h.feed("\x1f");
      if (auto c = member(msg, "content")) {
        bytes += textBytes(*c);
        feedText(*c, h);
      }
      h.feed("\x1e");
      overhead += 4;
    });
    if (!objects) return BodyError{"each message must be an object", "messages"};
    r.prefix = std::move(h.hashes());
  }
  r.prompt_tokens = clampTokens(std::max<std::uint64_t>(1, (bytes + 3) / 4 + overhead));

  // max_tokens (and chat's max_completion_tokens): the reservation, and what
  // the upstream is told, so it never produces more than was reserved.
  std::string key = "max_tokens";
  std::optional<Val> mt = find(ms, key);
  if (route == Route::kChatCompletions) {
    if (auto mct = find(ms, "max_completion_tokens"); mct && !isNull(*mct)) {
      mt = mct;
      key = "max_completion_tokens";
    }
  }
  if (mt && !isNull(*mt)) {
    const std::optional<std::int64_t> v = asInteger(*mt);
    if (!v || *v < 1 || *v > std::numeric_limits<std::int32_t>::max()) {
      return BodyError{"'" + key + "' must be a positive integer", key};
    }
    r.max_tokens = static_cast<std::uint32_t>(*v);
  } else {
    r.max_tokens = default_max_tokens;
    if (max_output_tokens != 0) r.max_tokens = std::min(r.max_tokens, max_output_tokens);
  }
  if (max_output_tokens != 0 && r.max_tokens > max_output_tokens) {
    return BodyError{
        "'" + key + "' is above this endpoint's limit of " + std::to_string(max_output_tokens),
        key};
  }
  const std::string max_member = "\"" + key + "\":" + std::to_string(r.max_tokens);

  // Streamed: the upstream is always asked for the usage chunk.
  std::string options;
  if (r.stream) {
    const std::optional<Val> so = find(ms, "stream_options");
    if (so && !isNull(*so) && !so->is(Type::kObject)) {
      return BodyError{"'stream_options' must be an object", "stream_options"};
    }
    options = streamOptions(so, r);
  }
  r.upstream_body =
      rebuild(ms, {"priority", key, r.stream ? "stream_options" : ""}, {max_member, options});
  return r;
}

namespace {

// The counts of a usage object, the scan just inside it. A count that is
// not an unsigned integer reads 0; of a key given twice, the last counts.
Usage readUsage(Scan& s) {
  Usage u;
  std::string_view k;
  while (s.nextMember(k)) {
    std::uint32_t* field = Scan::keyIs(k, "prompt_tokens")       ? &u.prompt_tokens
                           : Scan::keyIs(k, "completion_tokens") ? &u.completion_tokens
                                                                 : nullptr;
    if (field == nullptr || s.peek() != Scan::Type::kNumber) {
      if (field != nullptr) *field = 0;
      if (!s.skip()) break;
      continue;
    }
    std::string_view num;
    s.number(num);
    const std::optional<std::uint64_t> v = Scan::unsignedValue(num);
    *field = v ? clampTokens(*v) : 0;
  }
  return u;
}

// A root member named "usage": its counts when it is an object, none else
// (the last such member counts).
void readUsageMember(Scan& s, std::optional<Usage>& usage) {
  if (s.peek() == Scan::Type::kObject) {
    s.enterObject();
    usage = readUsage(s);
  } else {
    usage.reset();
    s.skip();
  }
}

// A non-empty string value (the scan at the value), else the value skipped.
bool nonEmptyString(Scan& s) {
  std::string_view v;
  if (s.peek() == Scan::Type::kString) return s.string(v) && !v.empty();
  s.skip();
  return false;
}

// A choice's delta: text in content or reasoning_content, or a tool call.
void readDelta(Scan& s, StreamChunk& c) {
  std::string_view k;
  while (s.nextMember(k)) {
    if (Scan::keyIs(k, "content") || Scan::keyIs(k, "reasoning_content")) {
      if (nonEmptyString(s)) c.has_text = true;
    } else if (Scan::keyIs(k, "tool_calls") && s.peek() == Scan::Type::kArray) {
      s.enterArray();
      while (s.nextItem()) {
        c.has_text = true;
        if (!s.skip()) return;
      }
    } else if (!s.skip()) {
      return;
    }
  }
}

// One item of root.choices: text, or a delta that carries some.
void readChoice(Scan& s, StreamChunk& c) {
  if (s.peek() != Scan::Type::kObject) {
    s.skip();
    return;
  }
  s.enterObject();
  std::string_view k;
  while (s.nextMember(k)) {
    if (Scan::keyIs(k, "text")) {
      if (nonEmptyString(s)) c.has_text = true;
    } else if (Scan::keyIs(k, "delta") && s.peek() == Scan::Type::kObject) {
      s.enterObject();
      readDelta(s, c);
    } else if (!s.skip()) {
      return;
    }
  }
}

}  // namespace

// One scan of the event, building nothing (a stream has one event per
// token): root.error, root.usage, root.choices[] and in each choice text,
// delta.content, delta.reasoning_content and delta.tool_calls[].
StreamChunk parseStreamChunk(std::string_view payload) {
  Scan s(payload);
  StreamChunk c;
  std::size_t choices = 0;
  if (!s.enterObject()) return {};
  std::string_view k;
  while (s.nextMember(k)) {
    if (Scan::keyIs(k, "error")) {
      c.is_error = true;
      s.skip();
    } else if (Scan::keyIs(k, "usage")) {
      readUsageMember(s, c.usage);
    } else if (Scan::keyIs(k, "choices") && s.peek() == Scan::Type::kArray) {
      s.enterArray();
      while (s.nextItem()) {
        ++choices;
        readChoice(s, c);
      }
    } else {
      s.skip();
    }
  }
  if (!s.end()) return {};
  c.valid = true;
  c.usage_only = choices == 0 && c.usage.has_value();
  return c;
}

std::optional<Usage> parseResponseUsage(std::string_view body) {
  Scan s(body);
  std::optional<Usage> usage;
  if (!s.enterObject()) return std::nullopt;
  std::string_view k;
  while (s.nextMember(k)) {
    if (Scan::keyIs(k, "usage")) {
      readUsageMember(s, usage);
    } else {
      s.skip();
    }
  }
  if (!s.end()) return std::nullopt;
  return usage;
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
