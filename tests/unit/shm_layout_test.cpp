// The segment layout: limits, alignment, no overlaps, and the client's check
// of every header field.
#include "shm/layout.hpp"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cstddef>
#include <cstdint>
#include <variant>

namespace fairsched::shm {
namespace {

constexpr std::uint64_t kPage = 4096;

Layout layoutOf(const Geometry& g, std::uint64_t page = kPage) {
  Result<Layout> r = computeLayout(g, page);
  if (!r.ok()) ADD_FAILURE() << r.error().toString();
  return r.value();
}

ErrorCode errorOf(const Geometry& g, std::uint64_t page = kPage) {
  Result<Layout> r = computeLayout(g, page);
  EXPECT_TRUE(!r.ok());
  return !r.ok() ? r.error().code : ErrorCode::kSystem;
}

// The invariants the rest of shm/ relies on.
void expectSound(const Layout& l) {
  const Geometry& g = l.geometry;
  EXPECT_EQ(l.client_control_offset, kHeaderBytes);
  EXPECT_EQ(l.client_control_offset % kCacheLine, 0u);
  EXPECT_GE(l.ready_bitmap_offset, l.client_control_offset + sizeof(ClientControl));
  EXPECT_EQ(l.ready_bitmap_words, (g.ring_count + 63) / 64);
  EXPECT_GE(l.rings_offset, l.ready_bitmap_offset + 8ULL * l.ready_bitmap_words);
  EXPECT_EQ(l.rings_offset % kCacheLine, 0u);
  EXPECT_EQ(l.ring_stride % kCacheLine, 0u);
  EXPECT_EQ(l.ring_stride, sizeof(SubmissionRingControl) +
                               std::uint64_t{g.ring_capacity} * sizeof(SubmissionCell));
  EXPECT_GE(l.arena_offset, l.ringOffset(g.ring_count - 1) + l.ring_stride);
  EXPECT_EQ(l.arena_offset % l.page_size, 0u);
  EXPECT_GE(l.arena_ring_bytes, l.arenaRegionTokens() * 4);
  EXPECT_EQ(l.arena_ring_bytes % kCacheLine, 0u);
  EXPECT_GE(l.writable_size, l.arenaRegionOffset(g.ring_count - 1) + l.arena_ring_bytes);
  EXPECT_EQ(l.writable_size % l.page_size, 0u);
  EXPECT_EQ(l.daemon_offset, l.writable_size);
  EXPECT_EQ(l.completion_control_offset, l.daemon_offset);
  EXPECT_EQ(l.completion_cells_offset, l.daemon_offset + sizeof(CompletionControl));
  EXPECT_GE(
      l.daemon_offset + l.daemon_size,
      l.completion_cells_offset + std::uint64_t{g.completion_capacity} * sizeof(CompletionCell));
  EXPECT_EQ(l.daemon_size % l.page_size, 0u);
  EXPECT_EQ(l.total_size, l.writable_size + l.daemon_size);
  EXPECT_LE(l.total_size, kMaxSegmentBytes);
}

TEST(Layout, RecordSizesAreFixed) {
  EXPECT_EQ(sizeof(SubmissionSlot), 56u);
  EXPECT_EQ(sizeof(SubmissionCell), 128u);
  EXPECT_EQ(offsetof(SubmissionCell, words), 8u);
  EXPECT_EQ(offsetof(SubmissionCell, inline_words), 64u);
  EXPECT_EQ(sizeof(CompletionSlot), 64u);
  EXPECT_EQ(sizeof(CompletionCell), 64u);
  EXPECT_EQ(offsetof(SubmissionRingControl, consumed), 64u);
  EXPECT_EQ(offsetof(ClientControl, client_sleeping), 64u);
  EXPECT_EQ(offsetof(CompletionControl, daemon_sleeping), 0u);
  EXPECT_EQ(offsetof(SubmissionSlot, prompt_offset), 24u);
  EXPECT_EQ(offsetof(SubmissionSlot, prompt_tokens), 32u);
  EXPECT_EQ(offsetof(SubmissionSlot, endpoint), 44u);
  EXPECT_EQ(offsetof(CompletionSlot, status), 48u);
}

TEST(Layout, DefaultGeometryIsSound) {
  const Layout l = layoutOf(Geometry{});
  expectSound(l);
  // The numbers docs/shm-layout.md shows.
  EXPECT_EQ(l.ready_bitmap_offset, 384u);
  EXPECT_EQ(l.rings_offset, 448u);
  EXPECT_EQ(l.ring_stride, 32896u);
  EXPECT_EQ(l.arena_offset, 266240u);
  EXPECT_EQ(l.arena_ring_bytes, 8u << 20);
  EXPECT_EQ(l.writable_size, 266240u + (64u << 20));
  EXPECT_EQ(l.daemon_size, 135168u);
  EXPECT_EQ(l.total_size, 67510272u);
}

TEST(Layout, SmallestAndLargestGeometriesAreSound) {
  expectSound(layoutOf(Geometry{1, kMinRingCapacity, 1, kMinCompletionCapacity}));
  expectSound(layoutOf(Geometry{kMaxRings, 64, 16, kMaxCompletionCapacity}));
  expectSound(layoutOf(Geometry{2, kMaxRingCapacity, 1, 2}));
  expectSound(layoutOf(Geometry{1, 2, kMaxPromptTokensPerSlot, 2}));
  expectSound(layoutOf(Geometry{3, 4, 5, 8}, 65536));
}

TEST(Layout, EveryLimitIsEnforced) {
  EXPECT_EQ(errorOf(Geometry{0, 256, 8, 64}), ErrorCode::kInvalidGeometry);
  EXPECT_EQ(errorOf(Geometry{kMaxRings + 1, 256, 8, 64}), ErrorCode::kInvalidGeometry);
  EXPECT_EQ(errorOf(Geometry{1, 1, 8, 64}), ErrorCode::kInvalidGeometry);
  EXPECT_EQ(errorOf(Geometry{1, 3, 8, 64}), ErrorCode::kInvalidGeometry);
  EXPECT_EQ(errorOf(Geometry{1, kMaxRingCapacity * 2, 8, 64}), ErrorCode::kInvalidGeometry);
  EXPECT_EQ(errorOf(Geometry{1, 256, 0, 64}), ErrorCode::kInvalidGeometry);
  EXPECT_EQ(errorOf(Geometry{1, 256, kMaxPromptTokensPerSlot + 1, 64}),
            ErrorCode::kInvalidGeometry);
  EXPECT_EQ(errorOf(Geometry{1, 256, 8, 1}), ErrorCode::kInvalidGeometry);
  EXPECT_EQ(errorOf(Geometry{1, 256, 8, 100}), ErrorCode::kInvalidGeometry);
  EXPECT_EQ(errorOf(Geometry{1, 256, 8, kMaxCompletionCapacity * 2}), ErrorCode::kInvalidGeometry);
  EXPECT_EQ(errorOf(Geometry{}, 1000), ErrorCode::kInvalidGeometry);
  EXPECT_EQ(errorOf(Geometry{}, 2048), ErrorCode::kInvalidGeometry);
  // Each within its own limit, together too big.
  EXPECT_EQ(errorOf(Geometry{kMaxRings, kMaxRingCapacity, 64, 2}), ErrorCode::kInvalidGeometry);
}

TEST(Layout, ErrorSaysWhichLimit) {
  Result<Layout> r = computeLayout(Geometry{1, 3, 8, 64}, kPage);
  ASSERT_TRUE(!r.ok());
  EXPECT_EQ(r.error().message, "ring_capacity 3 is not a power of two in [2, 65536]");
}

RC_GTEST_PROP(Layout, AnyAcceptedGeometryIsSound, ()) {
  Geometry g;
  g.ring_count = *rc::gen::inRange<std::uint32_t>(0, kMaxRings + 2);
  g.ring_capacity =
      *rc::gen::oneOf(rc::gen::just(0u), rc::gen::just(3u),
                      rc::gen::map(rc::gen::inRange(0, 18), [](int s) { return 1u << s; }));
  g.prompt_tokens_per_slot = *rc::gen::inRange<std::uint32_t>(0, 20000);
  g.completion_capacity = *rc::gen::map(rc::gen::inRange(0, 22), [](int s) { return 1u << s; });
  Result<Layout> r = computeLayout(g, kPage);
  if (r.ok()) {
    const Layout& l = r.value();
    RC_ASSERT(l.total_size <= kMaxSegmentBytes);
    RC_ASSERT(l.arena_offset >= l.rings_offset + g.ring_count * l.ring_stride);
    RC_ASSERT(l.writable_size >= l.arena_offset + g.ring_count * l.arena_ring_bytes);
    RC_ASSERT(l.writable_size % kPage == 0 && l.daemon_size % kPage == 0);
    // The header of an accepted layout passes the client's check.
    RC_ASSERT((checkHeader(makeHeader(l), l.total_size, kPage)).ok());
  } else {
    RC_ASSERT(r.error().code == ErrorCode::kInvalidGeometry);
  }
}

// ---- the client's check of a header ---------------------------------------

class HeaderCheck : public ::testing::Test {
 protected:
  Layout layout_ = layoutOf(Geometry{4, 64, 128, 256});
  SegmentHeader header_ = makeHeader(layout_);

  ErrorCode check(const SegmentHeader& h, std::uint64_t file_size) {
    Result<Layout> r = checkHeader(h, file_size, kPage);
    if (r.ok()) {
      ADD_FAILURE() << "accepted";
      return ErrorCode::kSystem;
    }
    return r.error().code;
  }
};

TEST_F(HeaderCheck, AcceptsTheDaemonsHeaderAndRecomputesTheSameLayout) {
  Result<Layout> r = checkHeader(header_, layout_.total_size, kPage);
  ASSERT_TRUE(r.ok());
  const Layout& l = r.value();
  EXPECT_EQ(l.geometry, layout_.geometry);
  EXPECT_EQ(l.rings_offset, layout_.rings_offset);
  EXPECT_EQ(l.completion_cells_offset, layout_.completion_cells_offset);
  EXPECT_EQ(l.total_size, layout_.total_size);
}

TEST_F(HeaderCheck, BadMagic) {
  header_.magic ^= 1;
  EXPECT_EQ(check(header_, layout_.total_size), ErrorCode::kBadMagic);
}

TEST_F(HeaderCheck, BadVersion) {
  header_.version = kLayoutVersion + 1;
  EXPECT_EQ(check(header_, layout_.total_size), ErrorCode::kBadVersion);
}

TEST_F(HeaderCheck, OtherPageSize) {
  header_.page_size = 65536;
  EXPECT_EQ(check(header_, layout_.total_size), ErrorCode::kBadPageSize);
}

TEST_F(HeaderCheck, FileSizeDiffersFromTheHeader) {
  EXPECT_EQ(check(header_, layout_.total_size - kPage), ErrorCode::kSizeMismatch);
  EXPECT_EQ(check(header_, layout_.total_size + kPage), ErrorCode::kSizeMismatch);
}

TEST_F(HeaderCheck, FileTooSmallForAHeader) {
  EXPECT_EQ(check(header_, kHeaderBytes - 1), ErrorCode::kTooSmall);
  EXPECT_EQ(check(header_, 0), ErrorCode::kTooSmall);
}

TEST_F(HeaderCheck, GeometryOutsideTheLimits) {
  header_.ring_capacity = 3;
  EXPECT_EQ(check(header_, layout_.total_size), ErrorCode::kInvalidGeometry);
}

TEST_F(HeaderCheck, GeometryThatDisagreesWithTheSize) {
  header_.ring_count = 5;  // a valid geometry, but not the one this file was laid out for
  EXPECT_EQ(check(header_, layout_.total_size), ErrorCode::kLayoutMismatch);
}

TEST_F(HeaderCheck, EveryDerivedFieldIsCompared) {
  // Each 64-bit offset/size field from client_control_offset on, and the
  // 32-bit sizes, altered one at a time.
  std::uint64_t SegmentHeader::*fields64[] = {
      &SegmentHeader::client_control_offset,
      &SegmentHeader::ready_bitmap_offset,
      &SegmentHeader::rings_offset,
      &SegmentHeader::ring_stride,
      &SegmentHeader::arena_offset,
      &SegmentHeader::arena_ring_bytes,
      &SegmentHeader::writable_size,
      &SegmentHeader::daemon_offset,
      &SegmentHeader::completion_control_offset,
      &SegmentHeader::completion_cells_offset,
      &SegmentHeader::daemon_size,
  };
  for (auto field : fields64) {
    SegmentHeader h = header_;
    h.*field += 64;
    EXPECT_EQ(check(h, layout_.total_size), ErrorCode::kLayoutMismatch);
  }
  std::uint32_t SegmentHeader::*fields32[] = {&SegmentHeader::header_size,
                                              &SegmentHeader::submission_cell_size,
                                              &SegmentHeader::completion_cell_size};
  for (auto field : fields32) {
    SegmentHeader h = header_;
    h.*field += 8;
    EXPECT_EQ(check(h, layout_.total_size), ErrorCode::kLayoutMismatch);
  }
}

TEST_F(HeaderCheck, MismatchMessageNamesTheField) {
  header_.ring_stride += 64;
  Result<Layout> r = checkHeader(header_, layout_.total_size, kPage);
  ASSERT_TRUE(!r.ok());
  EXPECT_EQ(r.error().message.rfind("ring_stride is ", 0), 0u) << r.error().message;
}

}  // namespace
}  // namespace fairsched::shm
