// The daemon's connections and the lists its loop walks, so that a pass
// costs what the busy connections cost, not what every connection costs:
//
// - withSegment(): connections past hello, dense (the loop's scans of sleep
//   flags and ready bitmaps run over this array, not over a hash map);
// - active(): connections whose rings every pass looks at. The others have
//   their "daemon sleeps" flag set, so their clients ring the doorbell after
//   publishing, which activates them again. A connection leaves when the
//   daemon goes to sleep, or when its rings have been idle for a while,
//   after a re-check behind a fence (demote(); doorbell.hpp);
// - dirty(): connections with completion records written but not published,
//   or held in a backlog, or worker aborts waiting: the only ones a flush
//   visits.
//
// A removed connection leaves every list at once but its object lives until
// the last io_uring operation queued on its buffers completes (opDone).
// Loop thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "daemon/server/connection.hpp"

namespace fairsched::daemon {

class ConnectionSet {
 public:
  // A new connection for socket `fd`, with the next id.
  Connection& add(int fd);
  // Connection `id`, closing ones included; null when removed.
  Connection* find(std::uint64_t id) {
    auto it = conns_.find(id);
    return it == conns_.end() ? nullptr : it->second.get();
  }
  // An operation queued on connection `id` completed: the connection, or
  // null when it is closing or removed (a removed one is freed with its
  // last operation).
  Connection* opDone(std::uint64_t id);
  // Takes `id` off every list; freed now, or with its last operation.
  void remove(std::uint64_t id);
  // Every connection not removed, closing ones included: fn(Connection&).
  template <typename Fn>
  void forEach(Fn&& fn) {
    for (auto& [id, c] : conns_) fn(*c);
  }
  template <typename Fn>
  void forEach(Fn&& fn) const {
    for (const auto& [id, c] : conns_) fn(static_cast<const Connection&>(*c));
  }
  std::size_t size() const { return conns_.size(); }
  void clear();

  // `c` has its segment: resolves the words the passes read, lists it in
  // withSegment() and activates it.
  void attach(Connection& c, TimeNs now);
  // Every pass looks at `c`'s rings from now on (no more doorbells).
  void activate(Connection& c, TimeNs now);
  // `c` is to leave active() at the next demote().
  void queueDemote(Connection& c) { demoting_.push_back(&c); }
  // Sets the flags of the queued connections, one fence, and takes off
  // active() those whose rings are still empty; true when one was not.
  bool demote();
  void markDirty(Connection& c) {
    if (c.dirty) return;
    c.dirty = true;
    dirty_.push_back(&c);
  }
  // Hands the dirty list over (into `out`, which must be empty) and empties it.
  void takeDirty(std::vector<Connection*>& out) {
    out.swap(dirty_);
    for (Connection* c : out) c->dirty = false;
  }

  const std::vector<Connection*>& withSegment() const { return shm_conns_; }
  const std::vector<Connection*>& active() const { return active_; }
  const std::vector<Connection*>& dirty() const { return dirty_; }

 private:
  std::unordered_map<std::uint64_t, std::unique_ptr<Connection>> conns_;
  std::unordered_map<std::uint64_t, std::unique_ptr<Connection>> closed_;  // ops still queued
  std::vector<Connection*> shm_conns_, active_, dirty_;
  std::vector<Connection*> demoting_;  // filled and emptied within one pass
  std::uint64_t next_id_ = 1;
};

}  // namespace fairsched::daemon
