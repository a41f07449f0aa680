#include "daemon/core/drr_scheduler.hpp"

#include <algorithm>
#include <cassert>
#include <functional>

namespace fairsched::core {

DrrScheduler::Flow& DrrScheduler::flow(FlowId f) {
  if (f >= flows_.size()) flows_.resize(static_cast<std::size_t>(f) + 1);
  return flows_[f];
}

void DrrScheduler::setQuantum(FlowId f, std::int64_t quantum) {
  flow(f).quantum = std::max<std::int64_t>(1, quantum);
}

void DrrScheduler::pushBack(List& l, FlowId f) {
  Flow& fl = flows_[f];
  fl.prev = l.tail;
  fl.next = kNone;
  if (l.tail != kNone) flows_[l.tail].next = f; else l.head = f;
  l.tail = f;
}

void DrrScheduler::unlink(List& l, FlowId f) {
  Flow& fl = flows_[f];
  if (fl.prev != kNone) flows_[fl.prev].next = fl.next; else l.head = fl.next;
  if (fl.next != kNone) flows_[fl.next].prev = fl.prev; else l.tail = fl.prev;
  fl.prev = fl.next = kNone;
}

void DrrScheduler::park(FlowId f) {
  Flow& fl = flows_[f];
  const std::int64_t need = fl.head_cost - fl.deficit;
  const std::int64_t k = need > 0 ? (need + fl.quantum - 1) / fl.quantum : 1;
  // The first round whose grant lets the flow afford its head; never the
  // round of a turn it already had.
  const std::int64_t turn = std::max(fl.granted_round + std::max<std::int64_t>(k, 1), round_);
  if (turn <= round_ + 1) {
    fl.where = Where::kListed;
    fl.turn_round = turn;
    pushBack(listOf(fl), f);
  } else {
    fl.where = Where::kLater;
    later_.push_back({turn, seq_++, f, fl.epoch});
    std::push_heap(later_.begin(), later_.end(), std::greater<>{});
  }
}

void DrrScheduler::enqueue(FlowId f, std::int64_t head_cost) {
  Flow& fl = flow(f);
  assert(fl.where == Where::kIdle);
  fl.deficit = std::min<std::int64_t>(fl.deficit, 0);  // idle time banks no credit
  fl.head_cost = head_cost;
  // A flow that already had its turn in this round waits for the next one.
  if (fl.granted_round != round_) fl.granted_round = round_ - 1;
  ++backlogged_;
  park(f);
}

void DrrScheduler::headChanged(FlowId f, std::int64_t head_cost) {
  Flow& fl = flows_[f];
  fl.head_cost = head_cost;
  // Active and listed flows check their head at their turn; a flow waiting for
  // a later round may now be due earlier (or later).
  if (fl.where == Where::kLater) {
    ++fl.epoch;
    park(f);
  }
}

void DrrScheduler::pullLater() {
  while (!later_.empty() && later_.front().round <= round_) {
    const Later top = later_.front();
    std::pop_heap(later_.begin(), later_.end(), std::greater<>{});
    later_.pop_back();
    Flow& fl = flows_[top.flow];
    if (fl.epoch != top.epoch || fl.where != Where::kLater) continue;  // stale
    fl.where = Where::kListed;
    fl.turn_round = round_;
    pushBack(current_, top.flow);
  }
}

DrrScheduler::FlowId DrrScheduler::select() {
  for (;;) {
    if (active_ != kNone) {
      Flow& a = flows_[active_];
      if (a.deficit >= a.head_cost) return active_;
      const FlowId f = active_;  // its turn ends
      active_ = kNone;
      park(f);
    }
    if (current_.empty()) {
      // Drop stale heap entries so an empty heap is seen as empty.
      while (!later_.empty()) {
        const Later& top = later_.front();
        const Flow& fl = flows_[top.flow];
        if (fl.epoch == top.epoch && fl.where == Where::kLater) break;
        std::pop_heap(later_.begin(), later_.end(), std::greater<>{});
        later_.pop_back();
      }
      if (next_.empty()) {
        if (later_.empty()) return kNone;
        round_ = later_.front().round;  // skip rounds in which nobody could dispatch
      } else {
        ++round_;
      }
      current_ = next_;
      next_ = List{};
      pullLater();
    }
    const FlowId f = current_.head;
    unlink(current_, f);
    Flow& fl = flows_[f];
    fl.deficit += (round_ - fl.granted_round) * fl.quantum;
    fl.granted_round = round_;
    fl.where = Where::kActive;
    active_ = f;
  }
}

void DrrScheduler::detach(FlowId f) {
  Flow& fl = flows_[f];
  switch (fl.where) {
    case Where::kIdle: return;
    case Where::kActive: active_ = kNone; break;
    case Where::kListed: unlink(listOf(fl), f); break;
    case Where::kLater: ++fl.epoch; break;
  }
  fl.where = Where::kIdle;
  fl.deficit = std::min<std::int64_t>(fl.deficit, 0);
  --backlogged_;
}

void DrrScheduler::consume(FlowId f, std::int64_t cost, bool has_next, std::int64_t next_head_cost) {
  assert(f == active_);
  Flow& fl = flows_[f];
  fl.deficit -= cost;
  if (has_next) {
    fl.head_cost = next_head_cost;
  } else {
    detach(f);
  }
}

void DrrScheduler::adjust(FlowId f, std::int64_t delta) {
  if (f < flows_.size()) flows_[f].deficit += delta;
}

void DrrScheduler::forget(FlowId f) {
  if (f >= flows_.size()) return;
  assert(flows_[f].where == Where::kIdle);
  const std::uint32_t epoch = flows_[f].epoch + 1;  // keep stale heap entries stale
  flows_[f] = Flow{};
  flows_[f].epoch = epoch;
}

void DrrScheduler::remove(FlowId f) {
  if (f < flows_.size()) detach(f);
}

}  // namespace fairsched::core
