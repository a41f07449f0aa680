#include "daemon/core/service_selector.hpp"

#include <algorithm>
#include <cmath>

namespace fairsched::core {
namespace {
// Rescale stored values once g(t) passes 2^256 (about 256 half-lives); a
// double holds values far beyond that, so no precision is lost meanwhile.
constexpr double kRescaleAt = 0x1p256;
}  // namespace

ServiceSelector::ServiceSelector(TimeNs half_life, bool lift)
    : half_life_(std::max<TimeNs>(0, half_life)), lift_(lift) {}

ServiceSelector::Flow& ServiceSelector::flow(FlowId f) {
  if (f >= flows_.size()) flows_.resize(static_cast<std::size_t>(f) + 1);
  return flows_[f];
}

double ServiceSelector::inflation(TimeNs now) {
  if (half_life_ == 0) return 1.0;
  if (now <= last_now_) return last_g_;
  last_now_ = now;
  last_g_ = std::exp2(static_cast<double>(now - base_) / static_cast<double>(half_life_));
  if (last_g_ > kRescaleAt) {
    // Divide every counter by g(now) and restart the clock here: the order
    // of the flows (and so the heap) is unchanged.
    for (Flow& fl : flows_) fl.stored /= last_g_;
    last_left_ /= last_g_;
    base_ = now;
    last_g_ = 1.0;
  }
  return last_g_;
}

void ServiceSelector::setWeight(FlowId f, double weight) {
  Flow& fl = flow(f);
  fl.weight = weight > 0 ? weight : 1.0;
  if (fl.pos != kNotQueued) {
    siftUp(fl.pos);
    siftDown(fl.pos);
  }
}

void ServiceSelector::enqueue(FlowId f, TimeNs now) {
  Flow& fl = flow(f);
  if (fl.pos != kNotQueued) return;
  if (lift_) {
    const double floor = heap_.empty() ? last_left_ : key(heap_.front());
    fl.stored = std::max(fl.stored, floor * fl.weight);
  }
  (void)inflation(now);
  fl.seq = seq_++;
  heap_.push_back(f);
  fl.pos = static_cast<std::uint32_t>(heap_.size() - 1);
  siftUp(fl.pos);
}

void ServiceSelector::charge(FlowId f, double cost, TimeNs now) {
  const double g = inflation(now);
  Flow& fl = flow(f);
  fl.stored = std::max(0.0, fl.stored + cost * g);
  if (fl.pos == kNotQueued) return;
  if (cost > 0) {
    siftDown(fl.pos);
  } else {
    siftUp(fl.pos);
  }
}

void ServiceSelector::remove(FlowId f) {
  if (f >= flows_.size() || flows_[f].pos == kNotQueued) return;
  const std::uint32_t i = flows_[f].pos;
  last_left_ = key(f);
  flows_[f].pos = kNotQueued;
  const FlowId last = heap_.back();
  heap_.pop_back();
  if (i == heap_.size()) return;
  place(i, last);
  siftUp(i);
  siftDown(flows_[last].pos);
}

void ServiceSelector::forget(FlowId f) {
  if (f >= flows_.size()) return;
  remove(f);
  flows_[f] = Flow{};
}

void ServiceSelector::restore(FlowId f, double per_weight, TimeNs elapsed, TimeNs now) {
  if (!(per_weight > 0) || !std::isfinite(per_weight)) return;
  if (half_life_ != 0 && elapsed > 0) {
    per_weight *= std::exp2(-static_cast<double>(elapsed) / static_cast<double>(half_life_));
  }
  const double g = inflation(now);
  Flow& fl = flow(f);
  fl.stored = std::max(fl.stored, per_weight * fl.weight * g);
  if (fl.pos != kNotQueued) siftDown(fl.pos);
}

double ServiceSelector::service(FlowId f, TimeNs now) const {
  if (f >= flows_.size()) return 0.0;
  double g = last_g_;
  if (half_life_ != 0 && now > last_now_) {
    g = std::exp2(static_cast<double>(now - base_) / static_cast<double>(half_life_));
  }
  return key(f) / g;
}

void ServiceSelector::siftUp(std::uint32_t i) {
  const FlowId f = heap_[i];
  while (i > 0) {
    const std::uint32_t parent = (i - 1) / 2;
    if (!less(f, heap_[parent])) break;
    place(i, heap_[parent]);
    i = parent;
  }
  place(i, f);
}

void ServiceSelector::siftDown(std::uint32_t i) {
  const FlowId f = heap_[i];
  const auto n = static_cast<std::uint32_t>(heap_.size());
  for (;;) {
    std::uint32_t child = 2 * i + 1;
    if (child >= n) break;
    if (child + 1 < n && less(heap_[child + 1], heap_[child])) ++child;
    if (!less(heap_[child], f)) break;
    place(i, heap_[child]);
    i = child;
  }
  place(i, f);
}

}  // namespace fairsched::core
