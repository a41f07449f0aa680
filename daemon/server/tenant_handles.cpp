#include "daemon/server/tenant_handles.hpp"

#include "shm/tenant_handle.hpp"

namespace fairsched::daemon {

std::optional<std::string> TenantHandles::checkOpen(std::uint32_t handle) const {
  if (!shm::wellFormedTenantHandle(handle))
    return "handle " + std::to_string(handle) + " has no generation";
  const std::uint32_t index = shm::tenantIndex(handle);
  if (index >= max_) {
    return "handle slot " + std::to_string(index) + " is beyond this connection's " +
           std::to_string(max_) + " tenants (max_tenants_per_connection)";
  }
  if (index < entries_.size()) {
    const Entry& e = entries_[index];
    if (e.handle != 0) return "handle slot " + std::to_string(index) + " is already open";
    if (e.closed == handle) {
      return "handle " + std::to_string(handle) +
             " was just closed: reuse its slot with a new generation";
    }
  }
  return std::nullopt;
}

void TenantHandles::open(std::uint32_t handle, TenantId tenant) {
  const std::uint32_t index = shm::tenantIndex(handle);
  if (index >= entries_.size()) entries_.resize(std::size_t{index} + 1);
  Entry& e = entries_[index];
  e.tenant = tenant;
  e.handle = handle;
  e.revoked = false;
  ++open_;
}

std::optional<TenantHandles::Entry> TenantHandles::close(std::uint32_t handle) {
  Entry* e = nullptr;
  if (handle == 0 || lookup(handle, e) != Found::kOpen) return std::nullopt;
  const Entry was = *e;
  e->tenant = kNoTenant;
  e->handle = 0;
  e->closed = handle;
  e->revoked = false;
  --open_;
  return was;
}

TenantHandles::Found TenantHandles::lookup(std::uint32_t handle, Entry*& entry) {
  entry = nullptr;
  const std::uint32_t index = shm::tenantIndex(handle);
  if (handle == 0 || index >= entries_.size()) return Found::kUnknown;
  Entry& e = entries_[index];
  if (e.handle == handle) {
    entry = &e;
    return Found::kOpen;
  }
  return e.closed == handle ? Found::kClosed : Found::kUnknown;
}

}  // namespace fairsched::daemon
