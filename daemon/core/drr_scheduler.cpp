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
  if (l.tail != kNone)
    flows_[l.tail].next = f;
  else
    l.head = f;
  l.tail = f;
}

void DrrScheduler::unlink(List& l, FlowId f) {
  Flow& fl = flows_[f];
  if (fl.prev != kNone)
    flows_[fl.prev].next = fl.next;
  else
    l.head = fl.next;
  if (fl.next != kNone)
    flows_[fl.next].prev = fl.prev;
  else
    l.tail = fl.prev;
  fl.prev = fl.next = kNone;
}

void DrrScheduler::toWheel(FlowId f, std::int64_t turn) {
  Flow& fl = flows_[f];
  fl.where = Where::kLater;
  fl.wheeled = true;
  fl.turn_round = turn;
  const auto b = static_cast<std::size_t>(turn & kWheelMask);
  pushBack(wheel_[b], f);
  occupied_[b / 64] |= std::uint64_t{1} << (b % 64);
  ++wheeled_;
}

void DrrScheduler::park(FlowId f) {
  Flow& fl = flows_[f];
  const std::int64_t need = fl.head_cost - fl.deficit;
  const std::int64_t k = need > 0 ? (need + fl.quantum - 1) / fl.quantum : 1;
  const std::int64_t turn = std::max(fl.granted_round + std::max<std::int64_t>(k, 1), round_);
  if (turn <= round_ + 1) {
    fl.where = Where::kListed;
    fl.wheeled = false;
    fl.turn_round = turn;
    pushBack(listOf(fl), f);
  } else if (turn < round_ + kWheel) {
    toWheel(f, turn);
  } else {
    fl.where = Where::kLater;
    fl.wheeled = false;
    later_.push_back({turn, seq_++, f, fl.epoch});
    std::push_heap(later_.begin(), later_.end(), std::greater<>{});
  }
}

void DrrScheduler::refillWheel() {
  while (!later_.empty() && later_.front().round < round_ + kWheel) {
    const Later top = later_.front();
    std::pop_heap(later_.begin(), later_.end(), std::greater<>{});
    later_.pop_back();
    Flow& fl = flows_[top.flow];
    if (fl.epoch != top.epoch || fl.where != Where::kLater || fl.wheeled) continue;  // stale
    toWheel(top.flow, std::max(top.round, round_));
  }
}

std::int64_t DrrScheduler::nextWheelRound() const {
  // Rounds in the wheel lie in (round_, round_ + kWheel): scan buckets from round_ + 1 on.
  for (std::int64_t d = 1; d < kWheel;) {
    const auto b = static_cast<std::size_t>((round_ + d) & kWheelMask);
    const std::uint64_t word = occupied_[b / 64] >> (b % 64);
    if (word != 0) return round_ + d + __builtin_ctzll(word);
    d += 64 - static_cast<std::int64_t>(b % 64);
  }
  return round_ + kWheel;  // unreachable while wheeled_ > 0
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
    if (fl.wheeled) {
      const auto b = static_cast<std::size_t>(fl.turn_round & kWheelMask);
      unlink(wheel_[b], f);
      if (wheel_[b].empty()) occupied_[b / 64] &= ~(std::uint64_t{1} << (b % 64));
      --wheeled_;
    }
    ++fl.epoch;
    park(f);
  }
}

void DrrScheduler::pullLater() {
  refillWheel();
  const auto b = static_cast<std::size_t>(round_ & kWheelMask);
  List& l = wheel_[b];
  while (!l.empty()) {
    const FlowId f = l.head;
    unlink(l, f);
    --wheeled_;
    Flow& fl = flows_[f];
    fl.where = Where::kListed;
    fl.wheeled = false;
    fl.turn_round = round_;
    pushBack(current_, f);
  }
  occupied_[b / 64] &= ~(std::uint64_t{1} << (b % 64));
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
        if (wheeled_ > 0) {
          round_ = nextWheelRound();
        } else {
          if (later_.empty()) return kNone;
          round_ = later_.front().round;  // skip rounds in which nobody could dispatch
        }
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
    case Where::kIdle:
      return;
    case Where::kActive:
      active_ = kNone;
      break;
    case Where::kListed:
      unlink(listOf(fl), f);
      break;
    case Where::kLater:
      if (fl.wheeled) {
        const auto b = static_cast<std::size_t>(fl.turn_round & kWheelMask);
        unlink(wheel_[b], f);
        if (wheel_[b].empty()) occupied_[b / 64] &= ~(std::uint64_t{1} << (b % 64));
        --wheeled_;
        fl.wheeled = false;
      }
      ++fl.epoch;
      break;
  }
  fl.where = Where::kIdle;
  fl.deficit = std::min<std::int64_t>(fl.deficit, 0);
  --backlogged_;
}

void DrrScheduler::consume(FlowId f, std::int64_t cost, bool has_next,
                           std::int64_t next_head_cost) {
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
