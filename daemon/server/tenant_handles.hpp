// One client connection's open tenants, by the handles its client chose
// (shm/tenant_handle.hpp). The daemon's own table: a handle read from a
// submission cell is looked up here, and nothing else about it is trusted.
//
// Contract:
// - checkOpen() says whether a handle may be opened now: well formed, its
//   slot below max_tenants, the slot not open, and not the handle the slot
//   last closed (the client bumps the generation on reuse, so cells of the
//   closed tenant still in a lane are never taken for the new one's).
// - lookup() classifies a cell's handle: open (the entry), closed (the
//   slot's last closed handle: its cells end CANCELLED) or unknown (out of
//   range, never opened, an older generation: INVALID).
// - An entry holds one reference on its TenantId from open() to close()
//   (the caller acquires and releases it); a revoked entry keeps it.
//
// Memory: 16 bytes per slot up to the highest slot the client has used
// (the client library hands out the lowest free slot), at most
// max_tenants × 16 bytes per connection.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "daemon/core/types.hpp"

namespace fairsched::daemon {

class TenantHandles {
 public:
  struct Entry {
    TenantId tenant = kNoTenant;
    std::uint32_t handle = 0;  // open under this handle; 0: the slot is not open
    std::uint32_t closed = 0;  // the handle this slot last closed
    bool revoked = false;      // a reload took the tenant from this client
  };
  enum class Found : std::uint8_t { kOpen, kClosed, kUnknown };

  explicit TenantHandles(std::uint32_t max_tenants = 0) : max_(max_tenants) {}

  std::uint32_t maxTenants() const { return max_; }
  std::uint32_t openCount() const { return open_; }

  // Why `handle` may not be opened now; nullopt when it may.
  std::optional<std::string> checkOpen(std::uint32_t handle) const;
  // REQUIRES: checkOpen(handle) is nullopt.
  void open(std::uint32_t handle, TenantId tenant);
  // Closes an open handle and returns its entry as it was; nullopt when
  // `handle` is not open.
  std::optional<Entry> close(std::uint32_t handle);

  // The entry of an open handle (kOpen); null otherwise.
  Found lookup(std::uint32_t handle, Entry*& entry);

  template <class F>
  void forEachOpen(F&& f) {
    for (Entry& e : entries_) {
      if (e.handle != 0) f(e);
    }
  }

 private:
  std::vector<Entry> entries_;  // by slot index
  std::uint32_t max_ = 0;
  std::uint32_t open_ = 0;
};

}  // namespace fairsched::daemon
