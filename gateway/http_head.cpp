#include "gateway/http_head.hpp"

#include <cstdio>

#include "gateway/line_break.hpp"

namespace fairsched::gateway {

namespace {

char lower(char c) {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

bool splits(std::string_view s) {
  return findLineBreak(s) != std::string_view::npos;
}

}  // namespace

HttpHead::HttpHead(std::string line) : out_(std::move(line)) {}

HttpHead HttpHead::response(unsigned version, int status, std::string_view reason) {
  std::string line;
  line.reserve(384);
  line += version == 10 ? "HTTP/1.0 " : "HTTP/1.1 ";
  line += std::to_string(status);
  line += ' ';
  line += reason;
  line += "\r\n";
  return HttpHead(std::move(line));
}

HttpHead HttpHead::request(std::string_view method, std::string_view target) {
  std::string line;
  line.reserve(256 + target.size());
  line += method;
  line += ' ';
  line += target;
  line += " HTTP/1.1\r\n";
  return HttpHead(std::move(line));
}

HttpHead& HttpHead::set(std::string_view name, std::string_view value) {
  if (name.empty() || splits(name) || splits(value)) return *this;
  // An earlier field of the same name goes (the first line is the start line).
  std::size_t at = out_.find('\n') + 1;
  while (at < out_.size()) {
    const std::size_t end = out_.find('\n', at) + 1;
    bool same = end - at > name.size() && out_[at + name.size()] == ':';
    for (std::size_t i = 0; same && i < name.size(); ++i) {
      same = lower(out_[at + i]) == lower(name[i]);
    }
    if (same) {
      out_.erase(at, end - at);
      continue;
    }
    at = end;
  }
  return add(name, value);
}

HttpHead& HttpHead::add(std::string_view name, std::string_view value) {
  if (name.empty() || splits(name) || splits(value)) return *this;
  out_ += name;
  out_ += ": ";
  out_ += value;
  out_ += "\r\n";
  return *this;
}

HttpHead& HttpHead::keepAlive(unsigned version, bool keep_alive) {
  if (version == 10 && keep_alive) return add("Connection", "keep-alive");
  if (version != 10 && !keep_alive) return add("Connection", "close");
  return *this;
}

std::string HttpHead::finish() && {
  out_ += "\r\n";
  return std::move(out_);
}

std::string chunkSizeLine(std::size_t size) {
  char b[24];
  const int n = std::snprintf(b, sizeof b, "%zx\r\n", size);
  return std::string(b, static_cast<std::size_t>(n));
}

}  // namespace fairsched::gateway
