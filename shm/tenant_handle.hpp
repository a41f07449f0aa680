// Tenant handles (layout version 3): how a submission names its tenant.
//
// A client's submission rings are lanes shared by all its tenants; each cell
// carries the connection-local handle of the tenant it is for. The client
// chooses the handle when it opens the tenant (OpenTenant{name, handle}) and
// keeps it across reconnects; the daemon records it in its own table for the
// connection and looks every cell's handle up there, trusting nothing else
// about it. A handle is a slot index and a generation:
//
//   bits  0..19  slot index, below the connection's max_tenants
//   bits 20..31  generation, 1..4095: bumped each time the client reuses a
//                slot, so cells still in a lane for a closed handle are told
//                apart from cells for the slot's next tenant
//
// 0 is never a handle (generation 0 does not exist).
#pragma once

#include <cstdint>

namespace fairsched::shm {

inline constexpr std::uint32_t kTenantIndexBits = 20;
inline constexpr std::uint32_t kTenantIndexMask = (1U << kTenantIndexBits) - 1;
inline constexpr std::uint32_t kMaxTenantGeneration = (1U << (32 - kTenantIndexBits)) - 1;
// The most tenants one connection can hold open, whatever the config says.
inline constexpr std::uint32_t kMaxTenantsPerConnection = 1U << kTenantIndexBits;

constexpr std::uint32_t tenantIndex(std::uint32_t handle) {
  return handle & kTenantIndexMask;
}
constexpr std::uint32_t tenantGeneration(std::uint32_t handle) {
  return handle >> kTenantIndexBits;
}
// REQUIRES: index < kMaxTenantsPerConnection, 1 <= generation <= kMaxTenantGeneration.
constexpr std::uint32_t makeTenantHandle(std::uint32_t index, std::uint32_t generation) {
  return (generation << kTenantIndexBits) | index;
}
// The generation after `g`, skipping 0.
constexpr std::uint32_t nextTenantGeneration(std::uint32_t g) {
  return g >= kMaxTenantGeneration ? 1 : g + 1;
}
constexpr bool wellFormedTenantHandle(std::uint32_t handle) {
  return tenantGeneration(handle) != 0;
}

}  // namespace fairsched::shm
