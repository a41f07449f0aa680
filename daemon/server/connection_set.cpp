#include "daemon/server/connection_set.hpp"

#include <algorithm>

namespace fairsched::daemon {

Connection& ConnectionSet::add(int fd) {
  auto c = std::make_unique<Connection>();
  c->id = next_id_++;
  c->fd = fd;
  Connection& ref = *c;
  conns_.emplace(ref.id, std::move(c));
  return ref;
}

Connection* ConnectionSet::opDone(std::uint64_t id) {
  if (auto it = conns_.find(id); it != conns_.end()) {
    --it->second->ops;
    return it->second->closing ? nullptr : it->second.get();
  }
  if (auto it = closed_.find(id); it != closed_.end()) {
    if (--it->second->ops <= 0) closed_.erase(it);
  }
  return nullptr;
}

void ConnectionSet::remove(std::uint64_t id) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  Connection& c = *it->second;
  if (c.shm_index != SIZE_MAX) {
    Connection* last = shm_conns_.back();
    shm_conns_[c.shm_index] = last;
    last->shm_index = c.shm_index;
    shm_conns_.pop_back();
    c.shm_index = SIZE_MAX;
  }
  if (c.dirty) {
    dirty_.erase(std::find(dirty_.begin(), dirty_.end(), &c));
    c.dirty = false;
  }
  if (c.active) {
    active_.erase(std::find(active_.begin(), active_.end(), &c));
    c.active = false;
  }
  // demoting_ is only filled and emptied within one pass, before any removal.
  auto owned = std::move(it->second);
  conns_.erase(it);
  if (owned->ops > 0) closed_.emplace(id, std::move(owned));
}

void ConnectionSet::clear() {
  shm_conns_.clear();
  active_.clear();
  dirty_.clear();
  demoting_.clear();
  conns_.clear();
  closed_.clear();
}

void Connection::heatLane(std::uint32_t ring) {
  const std::uint64_t bit = std::uint64_t{1} << (ring % 64);
  if ((hot_bits[ring / 64] & bit) != 0 || hot_lanes.size() >= kMaxHotLanes) return;
  // Nothing to write: the pass just took the bit; the producer's next
  // publication sets it, and from then on it stays set.
  hot_bits[ring / 64] |= bit;
  hot_lanes.push_back(ring);
}

void Connection::coolLanes() {
  if (hot_lanes.empty()) return;
  for (std::uint32_t w = 0; w < hot_bits.size(); ++w) {
    if (hot_bits[w] != 0) bitmap.clear(w, hot_bits[w]);
    hot_bits[w] = 0;
  }
  // After the clear, one look each: a producer that saw its bit still set
  // did not set it, and its cell is visible here (ready_bitmap.hpp).
  for (const std::uint32_t ring : hot_lanes) {
    if (lanes[ring].mayHaveItem()) pendLane(ring);
  }
  hot_lanes.clear();
}

bool Connection::lanesMayHaveWork() const {
  if (!pending_rings.empty() || bitmap.anySet(hot_bits.empty() ? nullptr : hot_bits.data()))
    return true;
  for (const std::uint32_t ring : hot_lanes) {
    if (lanes[ring].mayHaveItem()) return true;
  }
  return false;
}

void ConnectionSet::attach(Connection& c, TimeNs now) {
  c.bitmap = c.segment->readyBitmap();
  c.hot_bits.assign(c.bitmap.wordCount(), 0);
  c.own_sleep = c.segment->ownSleepFlag();
  c.peer_sleep = c.segment->peerSleepFlag();
  c.shm_index = shm_conns_.size();
  shm_conns_.push_back(&c);
  activate(c, now);
}

void ConnectionSet::activate(Connection& c, TimeNs now) {
  c.own_sleep.clear();  // no more doorbells: every pass looks at its rings now
  c.last_work = now;
  if (c.active || c.closing) return;
  c.active = true;
  active_.push_back(&c);
}

bool ConnectionSet::demote() {
  if (demoting_.empty()) return false;
  // Hot lanes first: once the connection leaves the active list only the
  // bitmap (and the doorbell) bring the daemon back to its lanes.
  for (Connection* c : demoting_) c->coolLanes();
  for (Connection* c : demoting_) c->own_sleep.announceSleepUnfenced();
  shm::seqCstFence();  // doorbell.hpp: a publication either rings or is seen below
  bool busy = false;
  for (Connection* c : demoting_) {
    if (c->lanesMayHaveWork()) {
      busy = true;  // stays active (its flag set costs it a doorbell at most)
      continue;
    }
    c->active = false;
  }
  demoting_.clear();
  std::erase_if(active_, [](const Connection* c) { return !c->active; });
  return busy;
}

}  // namespace fairsched::daemon
