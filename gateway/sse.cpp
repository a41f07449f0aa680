#include "gateway/sse.hpp"

#include "gateway/line_break.hpp"

namespace fairsched::gateway {

bool SseParser::feed(std::string_view bytes, std::vector<std::string>& events) {
  if (failed_) return false;
  std::size_t i = 0;
  while (i < bytes.size()) {
    if (last_was_cr_ && bytes[i] == '\n') {  // the \n of a \r\n
      last_was_cr_ = false;
      ++i;
      continue;
    }
    last_was_cr_ = false;
    const std::size_t eol = findLineBreak(bytes, i);
    const std::string_view piece = bytes.substr(i, eol == std::string_view::npos ? eol : eol - i);
    if (partial_.size() + piece.size() + data_.size() > max_) {
      failed_ = true;
      return false;
    }
    if (eol == std::string_view::npos) {  // a line continued by the next read
      partial_ += piece;
      break;
    }
    last_was_cr_ = bytes[eol] == '\r';
    if (partial_.empty()) {
      line(piece, events);
    } else {
      partial_ += piece;
      line(partial_, events);
      partial_.clear();
    }
    i = eol + 1;
  }
  return true;
}

void SseParser::line(std::string_view l, std::vector<std::string>& events) {
  if (l.empty()) {  // the end of an event
    if (has_data_) events.push_back(std::move(data_));
    data_.clear();
    has_data_ = false;
    return;
  }
  if (l.front() == ':') return;  // a comment
  const auto colon = l.find(':');
  const std::string_view field = l.substr(0, colon);
  std::string_view value = colon == std::string_view::npos ? "" : l.substr(colon + 1);
  if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  if (field != "data") return;
  if (has_data_) data_ += '\n';
  data_ += value;
  has_data_ = true;
}

std::string sseEvent(std::string_view payload) {
  std::string s;
  s.reserve(payload.size() + 8);
  s += "data: ";
  s += payload;
  s += "\n\n";
  return s;
}

}  // namespace fairsched::gateway
