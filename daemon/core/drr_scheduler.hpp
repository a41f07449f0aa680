// Deficit round robin across the tenants ("flows") of one tier.
//
// Each backlogged flow gets `quantum` (= endpoint quantum × tenant weight)
// added to its deficit once per round, and may dispatch its head request while
// its deficit covers the head's cost. A flow that cannot afford its head at
// the end of its turn waits for the round in which it will: the next round
// (FIFO, O(1)) or a later one (a heap keyed by that round, O(log flows)). When
// no flow can dispatch in the coming round, the round counter jumps straight
// to the first round in which one can, and every flow is credited the rounds
// it skipped. So a decision costs O(1), or O(log flows) for a flow whose head
// costs more than one quantum — never a spin through empty rounds, however the
// costs compare with the quantum.
//
// A flow that empties leaves the rotation and keeps no credit (a negative
// deficit — debt from an adaptive correction — is kept). A flow that returns
// in the round in which it already had its turn waits for the next round, so
// no flow gets more than one quantum per round by going idle and back.
//
// Fairness bound. Let Q be the quantum of weight 1, w_i a flow's weight,
// Max_i the largest cost among its requests. For any two flows i and j that
// stay backlogged over an interval (with costs known at dispatch: the
// `requests` and `tokens` cost models),
//     | S_i / w_i  -  S_j / w_j |  <=  2·Q + Max_i / w_i + Max_j / w_j
// where S is the cost dispatched in the interval. (Each flow's "virtual
// deficit" — deficit plus the rounds it is owed — stays in [0, Max_i), and
// the two flows' turns in the interval differ by at most one.) Under the
// adaptive model the bound holds for the charged costs; corrections at
// completion add at most the estimation error of the requests in flight.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace fairsched::core {

class DrrScheduler {
 public:
  using FlowId = std::uint32_t;
  static constexpr FlowId kNone = UINT32_MAX;

  // REQUIRES: quantum >= 1. May be called at any time; takes effect from the
  // flow's next grant.
  void setQuantum(FlowId f, std::int64_t quantum);

  // An idle flow becomes backlogged with a head request of cost `head_cost`.
  // REQUIRES: f is not backlogged.
  void enqueue(FlowId f, std::int64_t head_cost);

  // The head request of a backlogged flow changed (a new, more urgent request,
  // or the old head was cancelled).
  void headChanged(FlowId f, std::int64_t head_cost);

  // The flow whose head request is to be dispatched next, or kNone when no
  // flow is backlogged. Calling select() again without consume() returns the
  // same flow: a batch that cannot take the request leaves the flow first in
  // line for the next batch.
  FlowId select();

  // Dispatch the head of `f` (the flow select() returned) at `cost`.
  // `has_next` and `next_head_cost` describe the flow's new head.
  void consume(FlowId f, std::int64_t cost, bool has_next, std::int64_t next_head_cost);

  // Correct a flow's deficit after the fact (adaptive cost: charged - actual).
  void adjust(FlowId f, std::int64_t delta);

  // A backlogged flow emptied without a dispatch (its requests were cancelled).
  void remove(FlowId f);

  // Reset an idle flow's state (deficit, debt, rounds) so its id can be reused
  // for another tenant. REQUIRES: !backlogged(f).
  void forget(FlowId f);

  bool backlogged(FlowId f) const { return f < flows_.size() && flows_[f].where != Where::kIdle; }
  bool anyBacklogged() const { return backlogged_ != 0; }
  std::size_t backloggedCount() const { return backlogged_; }
  std::int64_t deficit(FlowId f) const { return f < flows_.size() ? flows_[f].deficit : 0; }
  std::int64_t round() const { return round_; }
  // The flows due after the active one in this round (kNone when unknown).
  FlowId upcoming() const { return current_.head; }
  FlowId after(FlowId f) const { return f == kNone ? kNone : flows_[f].next; }
  void prefetch(FlowId f) const { __builtin_prefetch(&flows_[f]); }

 private:
  // kListed: in current_ when turn_round == round_, else in next_.
  enum class Where : std::uint8_t { kIdle, kActive, kListed, kLater };
  struct Flow {
    std::int64_t deficit = 0;
    std::int64_t head_cost = 0;
    std::int64_t quantum = 1;
    std::int64_t granted_round = -1;  // last round whose quantum was added
    std::int64_t turn_round = 0;      // round of the next turn, while kListed
    std::uint32_t prev = kNone, next = kNone;
    std::uint32_t epoch = 0;  // invalidates stale heap entries
    Where where = Where::kIdle;
    bool wheeled = false;  // kLater: in wheel_[turn_round & kWheelMask], else in overflow_
  };
  struct List {
    FlowId head = kNone, tail = kNone;
    bool empty() const { return head == kNone; }
  };
  struct Later {
    std::int64_t round;
    std::uint64_t seq;
    FlowId flow;
    std::uint32_t epoch;
    bool operator>(const Later& o) const {
      return round != o.round ? round > o.round : seq > o.seq;
    }
  };

  Flow& flow(FlowId f);
  List& listOf(const Flow& fl) { return fl.turn_round == round_ ? current_ : next_; }
  void pushBack(List& l, FlowId f);
  void unlink(List& l, FlowId f);
  // Place a flow that cannot afford its head now by the round in which it can.
  void park(FlowId f);
  void pullLater();
  void detach(FlowId f);

  std::vector<Flow> flows_;
  List current_;  // flows still to get their turn in round_
  List next_;     // flows whose turn is in round_ + 1
  static constexpr std::int64_t kWheel = 256;
  static constexpr std::int64_t kWheelMask = kWheel - 1;
  std::array<List, kWheel> wheel_{};  // flows whose turn is round r in (round_+1, round_+kWheel)
  std::array<std::uint64_t, kWheel / 64> occupied_{};
  std::size_t wheeled_ = 0;
  std::vector<Later> later_;  // min-heap: flows whose turn is kWheel or more rounds ahead
  void toWheel(FlowId f, std::int64_t turn);
  void refillWheel();
  std::int64_t nextWheelRound() const;  // earliest round with a wheeled flow; REQUIRES wheeled_ > 0
  FlowId active_ = kNone;               // the flow having its turn
  std::int64_t round_ = 0;
  std::uint64_t seq_ = 0;
  std::size_t backlogged_ = 0;
};

}  // namespace fairsched::core
