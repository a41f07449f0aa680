#include "gateway/http_head.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace fairsched::gateway {

TEST(HttpHead, WritesTheStatusLineAndFieldsInOrder) {
  HttpHead h = HttpHead::response(11, 429, "Too Many Requests");
  h.set("Server", "fairsched-gateway").set("Content-Type", "application/json");
  h.set("retry-after", "2").set("Content-Length", "17");
  EXPECT_EQ(std::move(h).finish(),
            "HTTP/1.1 429 Too Many Requests\r\nServer: fairsched-gateway\r\nContent-Type: "
            "application/json\r\nretry-after: 2\r\nContent-Length: 17\r\n\r\n");
}

TEST(HttpHead, ASecondFieldOfTheSameNameInAnyCaseReplacesTheFirst) {
  HttpHead h = HttpHead::response(11, 200, "OK");
  h.set("x-a", "1").set("Retry-After", "1").set("x-b", "2").set("retry-after", "3");
  h.set("X-A", "4");
  EXPECT_EQ(std::move(h).finish(), "HTTP/1.1 200 OK\r\nx-b: 2\r\nretry-after: 3\r\nX-A: 4\r\n\r\n");
}

TEST(HttpHead, AFieldAddedWithoutALookIsStillReplacedByALaterSet) {
  HttpHead h = HttpHead::response(11, 200, "OK");
  h.add("Server", "a").keepAlive(11, false).add("Content-Type", "text/plain");
  h.set("content-type", "application/json").set("CONNECTION", "keep-alive");
  EXPECT_EQ(std::move(h).finish(),
            "HTTP/1.1 200 OK\r\nServer: a\r\ncontent-type: application/json\r\nCONNECTION: "
            "keep-alive\r\n\r\n");
}

TEST(HttpHead, ANameThatOnlyStartsLikeAnotherIsADifferentField) {
  HttpHead h = HttpHead::response(11, 200, "OK");
  h.set("x-ratelimit-limit-requests", "10").set("x-ratelimit-limit", "5");
  EXPECT_EQ(std::move(h).finish(),
            "HTTP/1.1 200 OK\r\nx-ratelimit-limit-requests: 10\r\nx-ratelimit-limit: 5\r\n\r\n");
}

TEST(HttpHead, KeepAliveWritesConnectionOnlyWhereTheVersionNeedsIt) {
  EXPECT_EQ(std::move(HttpHead::response(11, 200, "OK").keepAlive(11, true)).finish(),
            "HTTP/1.1 200 OK\r\n\r\n");
  EXPECT_EQ(std::move(HttpHead::response(11, 200, "OK").keepAlive(11, false)).finish(),
            "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(std::move(HttpHead::response(10, 200, "OK").keepAlive(10, true)).finish(),
            "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n\r\n");
  EXPECT_EQ(std::move(HttpHead::response(10, 200, "OK").keepAlive(10, false)).finish(),
            "HTTP/1.0 200 OK\r\n\r\n");
}

TEST(HttpHead, RefusesAFieldThatWouldSplitTheHead) {
  HttpHead h = HttpHead::request("POST", "/v1/chat/completions");
  h.set("x-evil", "a\r\nInjected: yes").set("x\nbad", "v").set("", "v").set("Host", "h:1");
  EXPECT_EQ(std::move(h).finish(), "POST /v1/chat/completions HTTP/1.1\r\nHost: h:1\r\n\r\n");
}

TEST(HttpHead, ManyReplacementsLeaveOneFieldPerName) {
  HttpHead h = HttpHead::response(11, 200, "OK");
  for (int i = 0; i < 200; ++i) h.set("f" + std::to_string(i % 7), std::to_string(i));
  const std::string out = std::move(h).finish();
  for (int k = 0; k < 7; ++k) {
    const std::string name = "\r\nf" + std::to_string(k) + ": ";
    const std::size_t at = out.find(name);
    ASSERT_NE(at, std::string::npos) << k;
    EXPECT_EQ(out.find(name, at + 1), std::string::npos) << k;
    // The value is the last one set for that name.
    const int last = 199 - ((199 - k) % 7);
    EXPECT_EQ(std::atoi(out.c_str() + at + name.size()), last) << k;
  }
}

TEST(ChunkSizeLine, IsTheSizeInHex) {
  EXPECT_EQ(chunkSizeLine(1), "1\r\n");
  EXPECT_EQ(chunkSizeLine(26), "1a\r\n");
  EXPECT_EQ(chunkSizeLine(65536), "10000\r\n");
}

}  // namespace fairsched::gateway
