// Server-sent events as OpenAI-compatible servers stream them: the parser
// for the upstream's bytes and the framing of what goes to the caller.
//
// The parser takes the body in pieces of any size and returns each event's
// data (the `data:` lines of one event joined by '\n'); comments, `event:`,
// `id:` and `retry:` lines are ignored. One event may not exceed
// `max_event_bytes`: past it the parser fails for good (a bounded buffer).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace fairsched::gateway {

class SseParser {
 public:
  explicit SseParser(std::size_t max_event_bytes) : max_(max_event_bytes) {}

  // Appends the data of every event completed by `bytes` to `events`.
  // False once an event (or a line) grew past max_event_bytes.
  bool feed(std::string_view bytes, std::vector<std::string>& events);
  bool failed() const { return failed_; }

 private:
  void line(std::string_view l, std::vector<std::string>& events);

  std::size_t max_;
  std::string partial_;  // an incomplete line
  std::string data_;     // the data of the event being read
  bool has_data_ = false;
  bool failed_ = false;
  bool last_was_cr_ = false;
};

// "data: PAYLOAD\n\n".
std::string sseEvent(std::string_view payload);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

}  // namespace fairsched::gateway
