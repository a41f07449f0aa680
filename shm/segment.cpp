#include "shm/segment.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/interprocess/detail/os_file_functions.hpp>
#include <boost/interprocess/exceptions.hpp>
#include <boost/interprocess/mapped_region.hpp>
#include <cassert>
#include <cerrno>
#include <cstring>
#include <string>

namespace fairsched::shm {
namespace {

namespace bip = boost::interprocess;

// Lets mapped_region map an arbitrary descriptor (the memfd).
class MemfdMappable {
 public:
  explicit MemfdMappable(int fd) : fd_(fd) {}
  bip::mapping_handle_t get_mapping_handle() const {
    return bip::ipcdetail::mapping_handle_from_file_handle(fd_);
  }

 private:
  int fd_;
};

constexpr int kRequiredSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

Error systemError(const char* what) {
  return Error{ErrorCode::kSystem, errno, what};
}

template <class T>
T* at(std::byte* base, std::uint64_t offset) {
  return reinterpret_cast<T*>(base + offset);
}

}  // namespace

struct Segment::Mappings {
  bip::mapped_region writable;
  bip::mapped_region daemon;
};

Result<std::unique_ptr<Segment::Mappings>> Segment::mapParts(int fd, const Layout& layout,
                                                             bool daemon_writable) {
  auto maps = std::make_unique<Segment::Mappings>();
  try {
    maps->writable = bip::mapped_region(MemfdMappable(fd), bip::read_write, 0,
                                        static_cast<std::size_t>(layout.writable_size));
    maps->daemon =
        bip::mapped_region(MemfdMappable(fd), daemon_writable ? bip::read_write : bip::read_only,
                           static_cast<bip::offset_t>(layout.daemon_offset),
                           static_cast<std::size_t>(layout.daemon_size));
  } catch (const bip::interprocess_exception& e) {
    return Error{ErrorCode::kMapFailed, e.get_native_error(), e.what()};
  }
  return maps;
}

std::uint64_t pageSize() {
  return static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

Segment::Segment(Side side, const Layout& layout, UniqueFd fd, std::unique_ptr<Mappings> maps)
    : side_(side), layout_(layout), fd_(std::move(fd)), maps_(std::move(maps)) {
  writable_ = static_cast<std::byte*>(maps_->writable.get_address());
  daemon_ = static_cast<std::byte*>(maps_->daemon.get_address());
}

Segment::Segment(Segment&&) noexcept = default;
Segment& Segment::operator=(Segment&&) noexcept = default;
Segment::~Segment() = default;

Result<Segment> Segment::create(const Geometry& geometry) {
  Result<Layout> computed = computeLayout(geometry, pageSize());
  if (!computed.ok()) return std::move(computed).error();
  const Layout& layout = computed.value();

  UniqueFd fd(::memfd_create("fairsched-client", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd) return systemError("memfd_create");
  if (::ftruncate(fd.get(), static_cast<off_t>(layout.total_size)) != 0) {
    return systemError("ftruncate of the new segment");
  }
  if (::fcntl(fd.get(), F_ADD_SEALS, kRequiredSeals) != 0) {
    return systemError("sealing the segment's size");
  }
  Result<std::unique_ptr<Mappings>> mapped = mapParts(fd.get(), layout, true);
  if (!mapped.ok()) return std::move(mapped).error();

  Segment seg(Side::kDaemon, layout, std::move(fd), std::move(mapped).value());
  // A new memfd reads as zeros; only what is not zero is written. Nothing
  // else can see the segment yet.
  const SegmentHeader header = makeHeader(layout);
  std::memcpy(seg.writable_, &header, sizeof(header));
  for (std::uint32_t r = 0; r < geometry.ring_count; ++r) {
    initSubmissionRing(seg.submissionRing(r), 0);
  }
  initCompletionRing(seg.completionRing(), 0);
  return seg;
}

Result<Segment> Segment::attach(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return systemError("fstat of the segment");
  const int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0) {
    return Error{ErrorCode::kBadSeals, errno, "the descriptor is not a sealable memfd"};
  }
  if ((seals & kRequiredSeals) != kRequiredSeals) {
    return Error{ErrorCode::kBadSeals, 0,
                 "the segment's size is not sealed (seals " + std::to_string(seals) + ")"};
  }
  if ((seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE)) != 0) {
    return Error{ErrorCode::kBadSeals, 0, "the segment is sealed against writes"};
  }
  if (st.st_size < 0 || static_cast<std::uint64_t>(st.st_size) < kHeaderBytes) {
    return Error{ErrorCode::kTooSmall, 0,
                 "segment of " + std::to_string(st.st_size) + " bytes has no room for a header"};
  }
  const auto file_size = static_cast<std::uint64_t>(st.st_size);

  SegmentHeader header{};
  const ssize_t n = ::pread(fd, &header, sizeof(header), 0);
  if (n < 0) return systemError("reading the segment header");
  if (n != static_cast<ssize_t>(sizeof(header))) {
    return Error{ErrorCode::kTooSmall, 0, "short read of the segment header"};
  }
  Result<Layout> checked = checkHeader(header, file_size, pageSize());
  if (!checked.ok()) return std::move(checked).error();
  const Layout& layout = checked.value();

  Result<std::unique_ptr<Mappings>> mapped = mapParts(fd, layout, false);
  if (!mapped.ok()) return std::move(mapped).error();
  return Segment(Side::kClient, layout, UniqueFd(), std::move(mapped).value());
}

SubmissionRingMemory Segment::submissionRing(std::uint32_t ring) const {
  assert(ring < layout_.geometry.ring_count);
  const Layout& l = layout_;
  SubmissionRingMemory m;
  std::byte* base = writable_ + l.ringOffset(ring);
  m.control = at<SubmissionRingControl>(base, 0);
  m.cells = at<SubmissionCell>(base, sizeof(SubmissionRingControl));
  m.capacity = l.geometry.ring_capacity;
  m.arena = at<std::uint32_t>(writable_, l.arenaRegionOffset(ring));
  m.tokens_per_slot = l.geometry.prompt_tokens_per_slot;
  m.ready_word = at<std::uint64_t>(writable_, l.ready_bitmap_offset) + ring / 64;
  m.ready_bit = std::uint64_t{1} << (ring % 64);
  return m;
}

CompletionRingMemory Segment::completionRing() const {
  const Layout& l = layout_;
  CompletionRingMemory m;
  m.control = at<CompletionControl>(daemon_, l.completion_control_offset - l.daemon_offset);
  m.cells = at<CompletionCell>(daemon_, l.completion_cells_offset - l.daemon_offset);
  m.capacity = l.geometry.completion_capacity;
  m.client = at<ClientControl>(writable_, l.client_control_offset);
  m.reply_arena = at<std::uint32_t>(daemon_, l.reply_arena_offset - l.daemon_offset);
  m.reply_tokens_per_slot = l.geometry.reply_tokens_per_slot;
  return m;
}

ReadyBitmap Segment::readyBitmap() const {
  return ReadyBitmap(at<std::uint64_t>(writable_, layout_.ready_bitmap_offset),
                     layout_.geometry.ring_count);
}

SleepFlag Segment::ownSleepFlag() const {
  if (side_ == Side::kDaemon) return SleepFlag(&completionRing().control->daemon_sleeping);
  return SleepFlag(&completionRing().client->client_sleeping);
}

PeerSleepFlag Segment::peerSleepFlag() const {
  if (side_ == Side::kDaemon) return PeerSleepFlag(&completionRing().client->client_sleeping);
  return PeerSleepFlag(&completionRing().control->daemon_sleeping);
}

}  // namespace fairsched::shm
