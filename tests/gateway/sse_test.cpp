#include "gateway/sse.hpp"

#include "gateway/line_break.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace fairsched::gateway {

TEST(SseParser, ReturnsEachEventsDataWhateverThePieces) {
  const std::string stream =
      ": comment\n\ndata: {\"a\":1}\n\nevent: x\ndata: line1\ndata: line2\n\ndata: [DONE]\n\n";
  for (std::size_t piece = 1; piece <= stream.size(); ++piece) {
    SseParser p(1024);
    std::vector<std::string> events;
    for (std::size_t i = 0; i < stream.size(); i += piece) {
      ASSERT_TRUE(p.feed(std::string_view(stream).substr(i, piece), events));
    }
    ASSERT_EQ(events, (std::vector<std::string>{"{\"a\":1}", "line1\nline2", "[DONE]"}))
        << "piece " << piece;
  }
}

TEST(SseParser, AcceptsCrLfAndDataWithoutASpace) {
  SseParser p(1024);
  std::vector<std::string> events;
  ASSERT_TRUE(p.feed("data:x\r\n\r\ndata: y\r\n\r\n", events));
  EXPECT_EQ(events, (std::vector<std::string>{"x", "y"}));
}

TEST(SseParser, AnIncompleteEventIsNotReturned) {
  SseParser p(1024);
  std::vector<std::string> events;
  ASSERT_TRUE(p.feed("data: half", events));
  EXPECT_TRUE(events.empty());
}

TEST(SseParser, FailsForGoodPastTheEventBound) {
  SseParser p(16);
  std::vector<std::string> events;
  EXPECT_FALSE(p.feed("data: " + std::string(32, 'x'), events));
  EXPECT_TRUE(p.failed());
  EXPECT_FALSE(p.feed("\n\n", events));
  EXPECT_TRUE(events.empty());
}

TEST(SseParser, AcceptsLinesEndedByALoneCr) {
  SseParser p(1024);
  std::vector<std::string> events;
  ASSERT_TRUE(p.feed("data: a\r\rdata: b\n\ndata: c\r", events));
  ASSERT_TRUE(p.feed("\n\r\n", events));
  EXPECT_EQ(events, (std::vector<std::string>{"a", "b", "c"}));
}

TEST(SseParser, DataLinesOfOneEventCountTogetherTowardsTheBound) {
  SseParser p(16);
  std::vector<std::string> events;
  EXPECT_TRUE(p.feed("data: aaaaaaaa\n", events));
  EXPECT_FALSE(p.feed("data: bbbbbbbb\n\n", events));
  EXPECT_TRUE(events.empty());
}

TEST(FindLineBreak, FindsTheFirstCrOrLfFromAnOffset) {
  constexpr auto npos = std::string_view::npos;
  EXPECT_EQ(findLineBreak("abc"), npos);
  EXPECT_EQ(findLineBreak(""), npos);
  EXPECT_EQ(findLineBreak("ab\ncd\r"), 2u);
  EXPECT_EQ(findLineBreak("ab\rcd\n"), 2u);
  EXPECT_EQ(findLineBreak("ab\r\n", 3), 3u);
  EXPECT_EQ(findLineBreak("a\nb\rc", 2), 3u);
  EXPECT_EQ(findLineBreak("a\nb", 2), npos);
  EXPECT_EQ(findLineBreak("a\n", 5), npos);
}

TEST(SseEvent, FramesOnePayload) {
  EXPECT_EQ(sseEvent("{}"), "data: {}\n\n");
  EXPECT_EQ(kSseDone, "data: [DONE]\n\n");
}

}  // namespace fairsched::gateway
