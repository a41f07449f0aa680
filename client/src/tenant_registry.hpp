// The tenants a Client has opened, by the handles it chose for them
// (shm/tenant_handle.hpp). A handle stays the same across reconnects: the
// library opens every registered tenant again under it.
//
// Threading: add(), remove(), find(), entry() and forEach() are for the
// thread that holds the Client's control mutex. isOpen() is lock-free, for
// submit(); setOpen() publishes with a release store what isOpen() reads.
//
// Slots: the lowest free slot is handed out first, so the daemon's table
// for the connection stays as small as the tenants open at once. Reusing a
// slot bumps its generation: a Tenant kept after closeTenant() never names
// the slot's next tenant.
//
// Memory per registered tenant: one hash-map node holding its name, a
// 16-byte entry and a 4-byte open word (chunks of 4,096 words, allocated
// as slots are first used and kept while the Client lives).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <queue>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "fairsched/error.hpp"
#include "shm/tenant_handle.hpp"

namespace fairsched::client_detail {

class TenantRegistry {
 public:
  struct Entry {
    const std::string* name = nullptr;  // the key of its by_name_ node; null: slot free
    std::uint32_t handle = 0;           // the last handle of this slot
    std::uint16_t tier = 0;             // index into tiers_ (0: no hint)
  };

  TenantRegistry();
  TenantRegistry(const TenantRegistry&) = delete;
  TenantRegistry& operator=(const TenantRegistry&) = delete;

  // The handle of the registered tenant `name`.
  std::optional<std::uint32_t> find(std::string_view name) const;
  // Registers `name` under a fresh handle (not yet open). Errors:
  // kNoCapacity when `max_tenants` are registered already.
  Result<std::uint32_t> add(std::string_view name, std::string_view tier,
                            std::uint32_t max_tenants);
  // Forgets a registered handle: its slot is free, isOpen() false.
  void remove(std::uint32_t handle);
  // The entry of a registered handle; null otherwise.
  const Entry* entry(std::uint32_t handle) const;
  std::string_view tierOf(const Entry& e) const { return tiers_[e.tier]; }
  std::size_t size() const { return by_name_.size(); }
  // Every registered handle, in slot order.
  void forEach(const std::function<void(std::uint32_t handle, const Entry&)>& f) const;

  // Whether `handle` is open on the current connection. Any thread.
  bool isOpen(std::uint32_t handle) const;
  // REQUIRES: `handle` registered.
  void setOpen(std::uint32_t handle, bool open);

 private:
  static constexpr std::uint32_t kChunkBits = 12;
  static constexpr std::uint32_t kChunkSize = 1U << kChunkBits;
  static constexpr std::uint32_t kChunks = shm::kMaxTenantsPerConnection >> kChunkBits;
  using Word = std::atomic<std::uint32_t>;

  Word* word(std::uint32_t index);  // allocates the chunk

  std::unordered_map<std::string, std::uint32_t> by_name_;  // name → handle
  std::vector<Entry> entries_;                              // by slot index
  std::priority_queue<std::uint32_t, std::vector<std::uint32_t>, std::greater<>> free_;
  std::vector<std::string> tiers_;  // interned tier hints; [0] = ""
  // The open words: the handle while open on the current connection, else 0.
  std::array<std::atomic<Word*>, kChunks> chunks_{};
  std::vector<std::unique_ptr<Word[]>> owned_;
};

}  // namespace fairsched::client_detail
