// libFuzzer target: the daemon's table of a connection's tenant handles
// (daemon/server/tenant_handles.hpp) under arbitrary opens, closes and cell
// lookups — what a hostile client controls: the handles it asks to open and
// close, and the handle in every cell it writes. A reference model says what
// each answer must be: a cell is taken for an open tenant only under the
// exact handle it was opened with, CANCELLED only for the handle its slot
// last closed, and nothing beyond max_tenants is ever opened.
#include <cstddef>
#include <cstdint>
#include <map>

#include "daemon/server/tenant_handles.hpp"
#include "fuzz_input.hpp"
#include "shm/tenant_handle.hpp"

namespace {

using fairsched::daemon::TenantHandles;
using fairsched::fuzz::require;

struct Model {
  std::uint32_t open = 0;    // the open handle of the slot, 0 if none
  std::uint32_t closed = 0;  // its last closed handle
};

// Mostly small slots and generations, so that opens, closes and lookups meet.
std::uint32_t handleFrom(fairsched::fuzz::Bytes& in) {
  const std::uint64_t kind = in.take(1);
  if (kind < 16) return static_cast<std::uint32_t>(in.take(4));  // anything at all
  const auto index = static_cast<std::uint32_t>(in.take(1) % 24);
  const auto gen = static_cast<std::uint32_t>(in.take(1) % 4);
  return (gen << fairsched::shm::kTenantIndexBits) | index;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fairsched::fuzz::Bytes in{data, size};
  const auto max_tenants = static_cast<std::uint32_t>(1 + in.take(1) % 20);
  TenantHandles table(max_tenants);
  std::map<std::uint32_t, Model> model;  // by slot
  std::uint32_t open_count = 0;
  for (int step = 0; step < 512 && in.pos < in.size; ++step) {
    const std::uint64_t op = in.take(1) % 3;
    const std::uint32_t h = handleFrom(in);
    const std::uint32_t slot = fairsched::shm::tenantIndex(h);
    Model& m = model[slot];
    if (op == 0) {  // OpenTenant
      const bool may = h != 0 && fairsched::shm::tenantGeneration(h) != 0 && slot < max_tenants &&
                       m.open == 0 && m.closed != h;
      require(!table.checkOpen(h).has_value() == may);
      if (may) {
        table.open(h, static_cast<fairsched::TenantId>(slot + 100));
        m.open = h;
        ++open_count;
      }
    } else if (op == 1) {  // CloseTenant
      const auto closed = table.close(h);
      require(closed.has_value() == (h != 0 && m.open == h));
      if (closed) {
        require(closed->handle == h && closed->tenant == slot + 100);
        m.open = 0;
        m.closed = h;
        --open_count;
      }
    } else {  // a cell naming h
      TenantHandles::Entry* e = nullptr;
      const TenantHandles::Found f = table.lookup(h, e);
      if (h != 0 && m.open == h) {
        require(f == TenantHandles::Found::kOpen && e != nullptr && e->tenant == slot + 100);
      } else if (h != 0 && m.closed == h) {
        require(f == TenantHandles::Found::kClosed && e == nullptr);
      } else {
        require(f == TenantHandles::Found::kUnknown && e == nullptr);
      }
    }
    require(table.openCount() == open_count);
    require(open_count <= max_tenants);
  }
  std::uint32_t seen = 0;
  table.forEachOpen([&](TenantHandles::Entry& e) {
    require(model[fairsched::shm::tenantIndex(e.handle)].open == e.handle);
    ++seen;
  });
  require(seen == open_count);
  return 0;
}
