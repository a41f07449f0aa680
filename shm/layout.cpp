#include "shm/layout.hpp"

#include <bit>
#include <string>

namespace fairsched::shm {
namespace {

constexpr std::uint64_t alignUp(std::uint64_t value, std::uint64_t alignment) {
  return (value + alignment - 1) & ~(alignment - 1);
}

Error geometryError(std::string message) {
  return Error{ErrorCode::kInvalidGeometry, 0, std::move(message)};
}

}  // namespace

Result<Layout> computeLayout(const Geometry& g, std::uint64_t page_size) {
  if (page_size < 4096 || !std::has_single_bit(page_size)) {
    return geometryError("page size " + std::to_string(page_size) +
                         " is not a power of two >= 4096");
  }
  if (g.ring_count < 1 || g.ring_count > kMaxRings) {
    return geometryError("ring_count " + std::to_string(g.ring_count) + " is not in [1, " +
                         std::to_string(kMaxRings) + "]");
  }
  if (g.ring_capacity < kMinRingCapacity || g.ring_capacity > kMaxRingCapacity ||
      !std::has_single_bit(g.ring_capacity)) {
    return geometryError("ring_capacity " + std::to_string(g.ring_capacity) +
                         " is not a power of two in [" + std::to_string(kMinRingCapacity) + ", " +
                         std::to_string(kMaxRingCapacity) + "]");
  }
  if (g.prompt_tokens_per_slot < 1 || g.prompt_tokens_per_slot > kMaxPromptTokensPerSlot) {
    return geometryError("prompt_tokens_per_slot " + std::to_string(g.prompt_tokens_per_slot) +
                         " is not in [1, " + std::to_string(kMaxPromptTokensPerSlot) + "]");
  }
  if (g.completion_capacity < kMinCompletionCapacity ||
      g.completion_capacity > kMaxCompletionCapacity ||
      !std::has_single_bit(g.completion_capacity)) {
    return geometryError("completion_capacity " + std::to_string(g.completion_capacity) +
                         " is not a power of two in [" + std::to_string(kMinCompletionCapacity) +
                         ", " + std::to_string(kMaxCompletionCapacity) + "]");
  }

  if (g.reply_tokens_per_slot > kMaxReplyTokensPerSlot) {
    return geometryError("reply_tokens_per_slot " + std::to_string(g.reply_tokens_per_slot) +
                         " is over " + std::to_string(kMaxReplyTokensPerSlot));
  }

  // Within the limits above nothing here can overflow 64 bits (the largest
  // arena is 2^8 * 2^16 * 2^20 * 4 bytes = 2^46).
  Layout l;
  l.geometry = g;
  l.page_size = page_size;
  l.client_control_offset = kHeaderBytes;
  l.ready_bitmap_offset = l.client_control_offset + sizeof(ClientControl);
  l.ready_bitmap_words = (g.ring_count + 63) / 64;
  l.rings_offset = alignUp(l.ready_bitmap_offset + l.ready_bitmap_words * 8ULL, kCacheLine);
  l.ring_stride =
      sizeof(SubmissionRingControl) + std::uint64_t{g.ring_capacity} * sizeof(SubmissionCell);
  l.arena_offset = alignUp(l.rings_offset + g.ring_count * l.ring_stride, page_size);
  l.arena_ring_bytes =
      alignUp(std::uint64_t{g.ring_capacity} * g.prompt_tokens_per_slot * 4, kCacheLine);
  l.writable_size = alignUp(l.arena_offset + g.ring_count * l.arena_ring_bytes, page_size);
  l.daemon_offset = l.writable_size;
  l.completion_control_offset = l.daemon_offset;
  l.completion_cells_offset = l.completion_control_offset + sizeof(CompletionControl);
  l.reply_arena_offset =
      l.completion_cells_offset + std::uint64_t{g.completion_capacity} * sizeof(CompletionCell);
  l.daemon_size = alignUp(l.reply_arena_offset - l.daemon_offset +
                              std::uint64_t{g.completion_capacity} * g.reply_tokens_per_slot * 4,
                          page_size);
  l.total_size = l.writable_size + l.daemon_size;
  if (l.total_size > kMaxSegmentBytes) {
    return geometryError("segment of " + std::to_string(l.total_size) + " bytes exceeds " +
                         std::to_string(kMaxSegmentBytes));
  }
  return l;
}

SegmentHeader makeHeader(const Layout& l) {
  SegmentHeader h{};
  h.magic = kMagic;
  h.version = kLayoutVersion;
  h.header_size = sizeof(SegmentHeader);
  h.page_size = l.page_size;
  h.total_size = l.total_size;
  h.ring_count = l.geometry.ring_count;
  h.ring_capacity = l.geometry.ring_capacity;
  h.prompt_tokens_per_slot = l.geometry.prompt_tokens_per_slot;
  h.completion_capacity = l.geometry.completion_capacity;
  h.submission_cell_size = sizeof(SubmissionCell);
  h.completion_cell_size = sizeof(CompletionCell);
  h.client_control_offset = l.client_control_offset;
  h.ready_bitmap_offset = l.ready_bitmap_offset;
  h.rings_offset = l.rings_offset;
  h.ring_stride = l.ring_stride;
  h.arena_offset = l.arena_offset;
  h.arena_ring_bytes = l.arena_ring_bytes;
  h.writable_size = l.writable_size;
  h.daemon_offset = l.daemon_offset;
  h.completion_control_offset = l.completion_control_offset;
  h.completion_cells_offset = l.completion_cells_offset;
  h.daemon_size = l.daemon_size;
  h.reply_tokens_per_slot = l.geometry.reply_tokens_per_slot;
  h.reply_arena_offset = l.reply_arena_offset;
  return h;
}

Result<Layout> checkHeader(const SegmentHeader& h, std::uint64_t file_size,
                           std::uint64_t page_size) {
  if (file_size < kHeaderBytes) {
    return Error{ErrorCode::kTooSmall, 0,
                 "segment of " + std::to_string(file_size) + " bytes has no room for a header"};
  }
  if (h.magic != kMagic) return Error{ErrorCode::kBadMagic, 0, "not a fairsched segment"};
  if (h.version != kLayoutVersion) {
    return Error{ErrorCode::kBadVersion, 0,
                 "layout version " + std::to_string(h.version) + ", this build speaks " +
                     std::to_string(kLayoutVersion)};
  }
  if (h.page_size != page_size) {
    return Error{ErrorCode::kBadPageSize, 0,
                 "segment laid out for pages of " + std::to_string(h.page_size) +
                     " bytes, this host uses " + std::to_string(page_size)};
  }
  if (h.total_size != file_size) {
    return Error{ErrorCode::kSizeMismatch, 0,
                 "header says " + std::to_string(h.total_size) + " bytes, the segment has " +
                     std::to_string(file_size)};
  }
  Geometry g{h.ring_count, h.ring_capacity, h.prompt_tokens_per_slot, h.completion_capacity,
             h.reply_tokens_per_slot};
  Result<Layout> computed = computeLayout(g, page_size);
  if (!computed.ok()) {
    Error err = std::move(computed).error();
    err.message = "header geometry: " + err.message;
    return err;
  }
  const Layout& l = computed.value();
  const SegmentHeader expected = makeHeader(l);
  struct Field {
    const char* name;
    std::uint64_t found;
    std::uint64_t want;
  };
  const Field fields[] = {
      {"header_size", h.header_size, expected.header_size},
      {"total_size", h.total_size, expected.total_size},
      {"submission_cell_size", h.submission_cell_size, expected.submission_cell_size},
      {"completion_cell_size", h.completion_cell_size, expected.completion_cell_size},
      {"client_control_offset", h.client_control_offset, expected.client_control_offset},
      {"ready_bitmap_offset", h.ready_bitmap_offset, expected.ready_bitmap_offset},
      {"rings_offset", h.rings_offset, expected.rings_offset},
      {"ring_stride", h.ring_stride, expected.ring_stride},
      {"arena_offset", h.arena_offset, expected.arena_offset},
      {"arena_ring_bytes", h.arena_ring_bytes, expected.arena_ring_bytes},
      {"writable_size", h.writable_size, expected.writable_size},
      {"daemon_offset", h.daemon_offset, expected.daemon_offset},
      {"completion_control_offset", h.completion_control_offset,
       expected.completion_control_offset},
      {"completion_cells_offset", h.completion_cells_offset, expected.completion_cells_offset},
      {"daemon_size", h.daemon_size, expected.daemon_size},
      {"reply_arena_offset", h.reply_arena_offset, expected.reply_arena_offset},
      {"reserved", h.reserved, expected.reserved},
  };
  for (const Field& f : fields) {
    if (f.found != f.want) {
      return Error{ErrorCode::kLayoutMismatch, 0,
                   std::string(f.name) + " is " + std::to_string(f.found) +
                       ", its geometry gives " + std::to_string(f.want)};
    }
  }
  return computed;
}

}  // namespace fairsched::shm
