// The head of an HTTP/1.x message the gateway writes itself — the status or
// request line and its fields in one string, appended as they come — and
// the framing of a chunked body — in place of Beast's message and
// serializer (a field list allocated per field, several layers of buffer
// sequences per write: about 10 % of the gateway's CPU per request). Pure:
// no I/O, no clock.
//
// Fields are written in the order set; setting a name that is there already
// (in any case) replaces it, as Beast's `set` did (`add` skips that look). A name or value holding
// CR or LF is refused (the field is dropped), so nothing set can split the head.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace fairsched::gateway {

class HttpHead {
 public:
  // "HTTP/1.1 200 OK": `version` 10 or 11; `reason` as the status' phrase.
  static HttpHead response(unsigned version, int status, std::string_view reason);
  // "POST /v1/chat/completions HTTP/1.1".
  static HttpHead request(std::string_view method, std::string_view target);

  HttpHead& set(std::string_view name, std::string_view value);
  // `set` for a name the caller knows is not there yet (the fields it
  // writes itself before any that come from elsewhere): no look for it.
  HttpHead& add(std::string_view name, std::string_view value);
  // The "Connection" field that keep-alive needs for `version`: "close" on
  // 1.1 when it ends, "keep-alive" on 1.0 when it goes on, none otherwise
  // (added as `add` does).
  HttpHead& keepAlive(unsigned version, bool keep_alive);
  // The head, ended by the empty line; the builder is spent.
  std::string finish() &&;

 private:
  explicit HttpHead(std::string line);
  std::string out_;
};

// A chunk's size line ("1a\r\n"): the chunk is this, its data, then "\r\n".
std::string chunkSizeLine(std::size_t size);
inline constexpr std::string_view kChunkEnd = "\r\n";
// The terminating chunk of a body without trailers.
inline constexpr std::string_view kLastChunk = "0\r\n\r\n";

}  // namespace fairsched::gateway
