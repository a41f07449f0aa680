#include "tenant_registry.hpp"

namespace fairsched::client_detail {

TenantRegistry::TenantRegistry() {
  tiers_.emplace_back();
}

std::optional<std::uint32_t> TenantRegistry::find(std::string_view name) const {
  // Heterogeneous lookup needs C++20's transparent hashing; a temporary
  // string keeps this simple (openTenant is not the hot path).
  const auto it = by_name_.find(std::string(name));
  if (it == by_name_.end()) return std::nullopt;
  return it->second;
}

Result<std::uint32_t> TenantRegistry::add(std::string_view name, std::string_view tier,
                                          std::uint32_t max_tenants) {
  std::uint32_t index = 0;
  if (!free_.empty()) {
    index = free_.top();
  } else {
    index = static_cast<std::uint32_t>(entries_.size());
  }
  if (index >= max_tenants || index >= shm::kMaxTenantsPerConnection) {
    return Error{ErrorCode::kNoCapacity, 0,
                 "this connection holds " + std::to_string(by_name_.size()) +
                     " tenants open, the most the daemon allows (max_tenants_per_connection " +
                     std::to_string(max_tenants) + "); close one first"};
  }
  if (!free_.empty()) {
    free_.pop();
  } else {
    entries_.emplace_back();
  }
  std::uint16_t tier_index = 0;
  if (!tier.empty()) {
    for (std::size_t t = 1; t < tiers_.size(); ++t) {
      if (tiers_[t] == tier) tier_index = static_cast<std::uint16_t>(t);
    }
    if (tier_index == 0 && tiers_.size() < UINT16_MAX) {
      tier_index = static_cast<std::uint16_t>(tiers_.size());
      tiers_.emplace_back(tier);
    }
  }
  Entry& e = entries_[index];
  const std::uint32_t generation =
      e.handle == 0 ? 1 : shm::nextTenantGeneration(shm::tenantGeneration(e.handle));
  const std::uint32_t handle = shm::makeTenantHandle(index, generation);
  const auto [node, inserted] = by_name_.emplace(std::string(name), handle);
  e.name = &node->first;
  e.handle = handle;
  e.tier = tier_index;
  word(index);  // the chunk exists before isOpen() may be asked
  return handle;
}

void TenantRegistry::remove(std::uint32_t handle) {
  const std::uint32_t index = shm::tenantIndex(handle);
  if (index >= entries_.size() || entries_[index].name == nullptr ||
      entries_[index].handle != handle) {
    return;
  }
  setOpen(handle, false);
  Entry& e = entries_[index];
  by_name_.erase(*e.name);
  e.name = nullptr;
  e.tier = 0;
  free_.push(index);
}

const TenantRegistry::Entry* TenantRegistry::entry(std::uint32_t handle) const {
  const std::uint32_t index = shm::tenantIndex(handle);
  if (index >= entries_.size()) return nullptr;
  const Entry& e = entries_[index];
  return e.name != nullptr && e.handle == handle ? &e : nullptr;
}

void TenantRegistry::forEach(
    const std::function<void(std::uint32_t handle, const Entry&)>& f) const {
  for (const Entry& e : entries_) {
    if (e.name != nullptr) f(e.handle, e);
  }
}

TenantRegistry::Word* TenantRegistry::word(std::uint32_t index) {
  std::atomic<Word*>& slot = chunks_[index >> kChunkBits];
  Word* chunk = slot.load(std::memory_order_relaxed);
  if (chunk == nullptr) {
    auto fresh = std::make_unique<Word[]>(kChunkSize);
    for (std::uint32_t i = 0; i < kChunkSize; ++i) fresh[i].store(0, std::memory_order_relaxed);
    chunk = fresh.get();
    owned_.push_back(std::move(fresh));
    slot.store(chunk, std::memory_order_release);
  }
  return &chunk[index & (kChunkSize - 1)];
}

bool TenantRegistry::isOpen(std::uint32_t handle) const {
  const std::uint32_t index = shm::tenantIndex(handle);
  if (handle == 0) return false;
  const Word* chunk = chunks_[index >> kChunkBits].load(std::memory_order_acquire);
  return chunk != nullptr &&
         chunk[index & (kChunkSize - 1)].load(std::memory_order_acquire) == handle;
}

void TenantRegistry::setOpen(std::uint32_t handle, bool open) {
  word(shm::tenantIndex(handle))->store(open ? handle : 0, std::memory_order_release);
}

}  // namespace fairsched::client_detail
