// One client's shared-memory segment: a sealed memfd, mapped in two parts.
//
// The daemon calls create(): memfd_create, ftruncate, seal the size, map both
// parts read-write, write the header and initialise every ring. It then sends
// fd() to the client over the unix socket (SCM_RIGHTS) and may closeFd(); the
// mappings stay. The client calls attach() on the fd it received: it checks
// the seals and the header against the file's size, then maps part (a)
// read-write and part (b) read-only. Nothing is ever created in /dev/shm; the
// memory goes away with the last mapping and descriptor, however the
// processes exit.
//
// All ring memory handed out is derived from this side's own Layout: on the
// daemon the one it computed, on the client the one recomputed from the
// checked header. The daemon never reads the header back.
//
// Mapping goes through Boost.Interprocess (mapped_region over the memfd);
// its exceptions are caught here and returned as kMapFailed.
#pragma once

#include <cstdint>
#include <memory>

#include "shm/completion_ring.hpp"
#include "shm/doorbell.hpp"
#include "shm/error.hpp"
#include "shm/layout.hpp"
#include "shm/ready_bitmap.hpp"
#include "shm/submission_ring.hpp"
#include "shm/unique_fd.hpp"

namespace fairsched::shm {

class Segment {
 public:
  enum class Side : std::uint8_t { kDaemon, kClient };

  // Daemon. Every ring and both completion indices start at position 0.
  static Result<Segment> create(const Geometry& geometry);

  // Client. Borrows `fd` (the caller may close it afterwards). Errors:
  // kSystem (fstat/pread), kBadSeals (not a memfd with its size sealed, or
  // write-sealed), kTooSmall, kBadMagic, kBadVersion, kBadPageSize,
  // kInvalidGeometry, kSizeMismatch, kLayoutMismatch, kMapFailed.
  static Result<Segment> attach(int fd);

  Segment(Segment&&) noexcept;
  Segment& operator=(Segment&&) noexcept;
  ~Segment();

  Side side() const { return side_; }
  const Layout& layout() const { return layout_; }

  // Daemon: the memfd to send to the client; -1 after closeFd() and always
  // on the client side.
  int fd() const { return fd_.get(); }
  void closeFd() { fd_.reset(); }

  // REQUIRES: ring < layout().geometry.ring_count.
  SubmissionRingMemory submissionRing(std::uint32_t ring) const;
  CompletionRingMemory completionRing() const;
  ReadyBitmap readyBitmap() const;

  // This side's sleep flag (daemon: daemon_sleeping; client: client_sleeping)
  // and the other side's.
  SleepFlag ownSleepFlag() const;
  PeerSleepFlag peerSleepFlag() const;

  // Base addresses of the two parts (part (b) is read-only on the client).
  std::byte* writablePart() const { return writable_; }
  const std::byte* daemonPart() const { return daemon_; }

 private:
  struct Mappings;
  Segment(Side side, const Layout& layout, UniqueFd fd, std::unique_ptr<Mappings> maps);
  static Result<std::unique_ptr<Mappings>> mapParts(int fd, const Layout& layout,
                                                    bool daemon_writable);

  Side side_ = Side::kDaemon;
  Layout layout_;
  UniqueFd fd_;
  std::unique_ptr<Mappings> maps_;
  std::byte* writable_ = nullptr;
  std::byte* daemon_ = nullptr;
};

// This host's page size.
std::uint64_t pageSize();

}  // namespace fairsched::shm
