// Every error the gateway can answer is a row of docs/gateway.md's table:
// the test reads the table and holds each reply's status, type and code to
// it, and every documented code to some reply.
#include "gateway/error_reply.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

namespace fairsched::gateway {
namespace {

// (status, type, code) of each documented error row.
using Row = std::tuple<int, std::string, std::string>;

std::set<Row> documentedRows() {
  std::ifstream in(std::string(FAIRSCHED_SOURCE_DIR) + "/docs/gateway.md");
  EXPECT_TRUE(in) << "docs/gateway.md";
  std::set<Row> rows;
  std::string line;
  bool in_answers = false;
  const std::regex row(R"(^\| ([0-9, ]+) \| `([a-z_]+)` / ([^|]+) \|)");
  const std::regex code("`([a-z_]+)`");
  while (std::getline(in, line)) {
    if (line.starts_with("### ")) in_answers = line == "### Answers";
    std::smatch m;
    if (!in_answers || !std::regex_search(line, m, row)) continue;
    std::vector<int> statuses;
    std::stringstream ss(m[1].str());
    for (std::string s; std::getline(ss, s, ',');) statuses.push_back(std::stoi(s));
    const std::string codes = m[3].str();
    for (auto it = std::sregex_iterator(codes.begin(), codes.end(), code);
         it != std::sregex_iterator(); ++it) {
      for (int st : statuses) rows.insert({st, m[2].str(), (*it)[1].str()});
    }
  }
  return rows;
}

bool hasHeader(const ErrorReply& r, const std::string& name) {
  for (const HttpHeader& h : r.headers) {
    if (h.name == name) return true;
  }
  return false;
}

std::vector<ErrorReply> everyReply() {
  std::vector<ErrorReply> out;
  for (int s = 0; s <= static_cast<int>(Status::kSlowConsumer); ++s) {  // kOk: internal_error
    for (bool ran : {false, true}) {
      Completion c;
      c.status = static_cast<Status>(s);
      out.push_back(errorForCompletion(c, ran));
      c.retry_after = std::chrono::milliseconds(250);
      out.push_back(errorForCompletion(c, ran));
    }
  }
  for (int e = 0; e <= static_cast<int>(ErrorCode::kSystem); ++e) {
    out.push_back(errorForSubmit(Error{static_cast<ErrorCode>(e), 0, "why"}));
  }
  for (ErrorReply r :
       {missingKey(), unknownKey(), routeNotAllowed("/v1/completions"), badRequest("m"),
        bodyTooLarge(10), headersTooLarge(), notFound("/x"), methodNotAllowed("PUT", "/healthz"),
        draining(), tooManyConnections(), schedulerUnavailable("gone"),
        upstreamUnavailable("refused"), upstreamTimeout("slow"), upstreamBroken("garbage")}) {
    out.push_back(std::move(r));
  }
  return out;
}

TEST(ErrorReply, EveryReplyIsARowOfTheDocumentedTable) {
  const std::set<Row> documented = documentedRows();
  ASSERT_GE(documented.size(), 15u) << "the Answers table of docs/gateway.md was not found";
  for (const ErrorReply& r : everyReply()) {
    EXPECT_TRUE(documented.count({r.status, r.type, r.code}))
        << r.status << " " << r.type << " / " << r.code << " (" << r.message
        << ") is not in docs/gateway.md's table";
    EXPECT_EQ(r.code.find(' '), std::string::npos) << r.code;
  }
}

TEST(ErrorReply, EveryDocumentedCodeIsAnswered) {
  std::set<Row> answered;
  for (const ErrorReply& r : everyReply()) answered.insert({r.status, r.type, r.code});
  for (const Row& row : documentedRows()) {
    EXPECT_TRUE(answered.count(row)) << std::get<0>(row) << " " << std::get<1>(row) << " / "
                                     << std::get<2>(row) << " is documented but never answered";
  }
}

TEST(ErrorReply, EveryServiceUnavailableSaysWhenToRetry) {
  int seen = 0;
  for (const ErrorReply& r : everyReply()) {
    if (r.status != 503) continue;
    ++seen;
    EXPECT_TRUE(hasHeader(r, "retry-after")) << r.code;
    EXPECT_TRUE(hasHeader(r, "retry-after-ms")) << r.code;
  }
  EXPECT_GE(seen, 6);
}

TEST(ErrorReply, TheDaemonsRetryAfterIsKeptOnAQueueFull) {
  Completion c;
  c.status = Status::kQueueFull;
  c.retry_after = std::chrono::milliseconds(250);
  const ErrorReply r = errorForCompletion(c);
  EXPECT_EQ(r.status, 503);
  std::map<std::string, std::string> h;
  for (const HttpHeader& x : r.headers) h[x.name] = x.value;
  EXPECT_EQ(h["retry-after-ms"], "250");
  EXPECT_EQ(h["retry-after"], "1");
}

TEST(ErrorReply, ADeadlineAfterTheStreamStartedDoesNotSayItNeverRan) {
  Completion c;
  c.status = Status::kDeadlineExceeded;
  EXPECT_NE(errorForCompletion(c).message.find("before it could run"), std::string::npos);
  const ErrorReply late = errorForCompletion(c, /*ran=*/true);
  EXPECT_EQ(late.code, "deadline_exceeded");
  EXPECT_EQ(late.message.find("before it could run"), std::string::npos) << late.message;
}

TEST(ErrorReply, SubmitErrorsNeverCarryTheLibrarysStatusText) {
  EXPECT_EQ(errorForSubmit(Error{ErrorCode::kUnauthorized, 0, "no"}).code, "tenant_not_allowed");
  EXPECT_EQ(errorForSubmit(Error{ErrorCode::kNotConnected, 0, ""}).code, "scheduler_unavailable");
  EXPECT_EQ(errorForSubmit(Error{ErrorCode::kNoCapacity, 0, ""}).code, "scheduler_unavailable");
  EXPECT_EQ(errorForSubmit(Error{ErrorCode::kRingFull, 0, ""}).code, "queue_full");
}

}  // namespace
}  // namespace fairsched::gateway
