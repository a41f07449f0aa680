#include "daemon/server/pending_slab.hpp"

#include <utility>

namespace fairsched::daemon {

void Pending::reset() {
  std::vector<std::uint32_t> keep_prompt = std::move(prompt);
  std::vector<std::uint32_t> keep_generated = std::move(generated);
  const std::uint32_t keep_gen = gen;
  *this = Pending{};
  keep_prompt.clear();
  keep_generated.clear();
  prompt = std::move(keep_prompt);
  generated = std::move(keep_generated);
  gen = keep_gen;
}

std::uint64_t PendingSlab::reserve() {
  if (!free_.empty()) {
    const std::uint64_t key = free_.back();
    free_.pop_back();
    return key;
  }
  entries_.emplace_back();
  return entries_.size() - 1;
}

Pending& PendingSlab::emplace(std::uint64_t key) {
  Pending& p = entries_[key];
  p.reset();
  p.live = true;
  return p;
}

void PendingSlab::release(std::uint64_t key) {
  Pending& p = entries_[key];
  p.live = false;
  p.worker = 0;
  p.aborted = false;
  ++p.gen;
  free_.push_back(key);
}

Pending* PendingSlab::byAssignment(std::uint64_t assignment) {
  const std::uint64_t key = assignment & 0xffffffffu;
  Pending* p = find(key);
  if (!p || p->gen != (assignment >> 32)) return nullptr;
  return p;
}

}  // namespace fairsched::daemon
