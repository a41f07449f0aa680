// The parts of fairschedd's server that hold state of their own, each alone:
// the pending slab, the batch tracker and the connection set.
#include <unistd.h>

#include <gtest/gtest.h>

#include "daemon/server/batch_tracker.hpp"
#include "daemon/server/connection_set.hpp"
#include "daemon/server/pending_slab.hpp"
#include "daemon/server/tenant_handles.hpp"
#include "daemon/server/worker_pool.hpp"
#include "shm/segment.hpp"
#include "shm/tenant_handle.hpp"
#include "shm/worker_protocol.hpp"

namespace fairsched::daemon {
namespace {

TEST(PendingSlab, ReserveReusesReleasedKeysAndEmplaceResetsEveryField) {
  PendingSlab slab;
  const std::uint64_t a = slab.reserve();
  Pending& p = slab.emplace(a);
  EXPECT_TRUE(p.live);
  p.conn = 7;
  p.dispatched = 123;  // a field a field-by-field reset once missed
  p.aborted = true;
  p.worker = 9;
  p.streamed = 5;
  p.first_token = 44;
  p.preempt_asked = 55;
  p.prompt.assign(100, 1);
  p.generated.assign(50, 2);
  const std::size_t prompt_capacity = p.prompt.capacity();
  const std::uint32_t gen = p.gen;
  EXPECT_EQ(slab.find(a), &p);
  slab.release(a);
  EXPECT_EQ(slab.find(a), nullptr);

  const std::uint64_t b = slab.reserve();
  EXPECT_EQ(b, a) << "a released key is handed out again";
  EXPECT_EQ(slab.find(b), nullptr) << "reserved is not live";
  Pending& q = slab.emplace(b);
  EXPECT_EQ(q.conn, 0u);
  EXPECT_EQ(q.dispatched, 0);
  EXPECT_FALSE(q.aborted);
  EXPECT_EQ(q.worker, 0u);
  EXPECT_EQ(q.streamed, 0u);
  EXPECT_EQ(q.first_token, 0);
  EXPECT_EQ(q.preempt_asked, 0);
  EXPECT_TRUE(q.prompt.empty());
  EXPECT_TRUE(q.generated.empty());
  EXPECT_GE(q.prompt.capacity(), prompt_capacity) << "the buffer is kept";
  EXPECT_EQ(q.gen, gen + 1) << "release bumps gen; reset keeps it";
}

TEST(PendingSlab, UnreservedKeyIsHandedOutAgainAndNeverLive) {
  PendingSlab slab;
  const std::uint64_t a = slab.reserve();
  const std::uint64_t b = slab.reserve();
  EXPECT_NE(a, b);
  slab.unreserve(b);
  EXPECT_EQ(slab.reserve(), b);
  int live = 0;
  slab.forEachLive([&](std::uint64_t, const Pending&) { ++live; });
  EXPECT_EQ(live, 0);
  slab.emplace(a);
  slab.forEachLive([&](std::uint64_t key, const Pending&) {
    EXPECT_EQ(key, a);
    ++live;
  });
  EXPECT_EQ(live, 1);
}

TEST(PendingSlab, AssignmentIdOfAnEarlierUseNeverMatches) {
  PendingSlab slab;
  const std::uint64_t key = slab.reserve();
  slab.emplace(key);
  const std::uint64_t first = slab.assignmentId(key);
  EXPECT_EQ(slab.byAssignment(first), slab.find(key));
  slab.release(key);
  EXPECT_EQ(slab.byAssignment(first), nullptr) << "released";
  slab.emplace(slab.reserve());
  EXPECT_EQ(slab.byAssignment(first), nullptr) << "the key in its next use";
  EXPECT_NE(slab.byAssignment(slab.assignmentId(key)), nullptr);
  EXPECT_EQ(slab.byAssignment(std::uint64_t{3} << 32 | 99), nullptr) << "unknown key";
}

TEST(BatchTracker, ReturnedBatchIsFoundOnceAndInFlightCountsDown) {
  BatchTracker t;
  RunningBatch& b = t.open(1);
  b.ids = {4, 5};
  b.endpoint = 0;
  t.submitted();
  EXPECT_EQ(t.inFlight(), 1u);
  RunningBatch* r = t.returned(1);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->ids, (std::vector<std::uint64_t>{4, 5}));
  t.retire(1);
  EXPECT_EQ(t.inFlight(), 0u);
  EXPECT_EQ(t.tracked(), 0u);
  // A reused node starts empty, with no deadline of its earlier batch.
  b.deadline = 10;
  RunningBatch& again = t.open(2);
  EXPECT_TRUE(again.ids.empty());
  EXPECT_EQ(again.deadline, kNever);
}

// Batch `id` of endpoint `e`, handed to its executor.
void submit(BatchTracker& t, std::uint64_t id, EndpointId e, TimeNs deadline = kNever) {
  RunningBatch& b = t.open(id);
  b.endpoint = e;
  b.deadline = deadline;
  t.submitted();
}

TEST(BatchTracker, ExpiredBatchIsGivenUpButStaysInFlightUntilReturned) {
  BatchTracker t;
  submit(t, 1, 0, 100);
  submit(t, 2, 0, 300);
  EXPECT_EQ(t.earliestDeadline(), 100);
  std::vector<std::uint64_t> given_up;
  t.giveUpExpired(200, [&](std::uint64_t id, const RunningBatch&) { given_up.push_back(id); });
  EXPECT_EQ(given_up, (std::vector<std::uint64_t>{1}));
  EXPECT_EQ(t.tracked(), 1u);
  EXPECT_EQ(t.inFlight(), 2u) << "the executor still holds it";
  EXPECT_EQ(t.returned(1), nullptr) << "a late result finds no batch";
  EXPECT_EQ(t.inFlight(), 1u);
  EXPECT_EQ(t.earliestDeadline(), 300);
}

TEST(BatchTracker, BatchesOfALostEndpointAreGivenUpAndNoLongerInFlight) {
  BatchTracker t;
  submit(t, 1, 0);
  submit(t, 2, 1);
  submit(t, 3, 1);
  std::size_t n = 0;
  t.giveUpEndpoint(1, [&](std::uint64_t, const RunningBatch& b) {
    EXPECT_EQ(b.endpoint, 1u);
    ++n;
  });
  EXPECT_EQ(n, 2u);
  EXPECT_EQ(t.inFlight(), 1u);
  EXPECT_EQ(t.tracked(), 1u);
  t.retire(3);  // untracked: nothing happens
  EXPECT_EQ(t.tracked(), 1u);
}

int pipeEnd() {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  close(fds[1]);
  return fds[0];
}

TEST(ConnectionSet, ClosedConnectionLivesUntilItsLastOperation) {
  ConnectionSet set;
  Connection& a = set.add(pipeEnd());
  Connection& b = set.add(pipeEnd());
  EXPECT_NE(a.id, b.id);
  EXPECT_EQ(set.find(a.id), &a);
  a.ops = 2;
  EXPECT_EQ(set.opDone(a.id), &a) << "live: the operation's callback goes on";
  a.closing = true;
  EXPECT_EQ(set.opDone(a.id), nullptr) << "closing: the callback stops";
  a.ops = 1;
  const std::uint64_t id = a.id;
  close(a.fd);
  set.remove(id);
  EXPECT_EQ(set.find(id), nullptr);
  EXPECT_EQ(set.size(), 1u);
  EXPECT_EQ(set.opDone(id), nullptr) << "its last operation frees it";
  EXPECT_EQ(set.opDone(id), nullptr) << "and then it is unknown";
  close(b.fd);
}

TEST(ConnectionSet, DirtyListHoldsEachConnectionOnceAndRemovalTakesItOff) {
  ConnectionSet set;
  Connection& a = set.add(-1);
  Connection& b = set.add(-1);
  set.markDirty(a);
  set.markDirty(a);
  set.markDirty(b);
  EXPECT_EQ(set.dirty().size(), 2u);
  set.remove(b.id);
  ASSERT_EQ(set.dirty().size(), 1u);
  EXPECT_EQ(set.dirty()[0], &a);
  std::vector<Connection*> taken;
  set.takeDirty(taken);
  EXPECT_EQ(taken.size(), 1u);
  EXPECT_TRUE(set.dirty().empty());
  EXPECT_FALSE(a.dirty);
  set.markDirty(a);  // may be marked again while the taken list is worked on
  EXPECT_EQ(set.dirty().size(), 1u);
}

TEST(ConnectionSet, IdleConnectionIsDemotedAndBusyOneStaysActive) {
  ConnectionSet set;
  std::vector<Connection*> conns;
  for (int i = 0; i < 3; ++i) {
    Connection& c = set.add(-1);
    auto seg = shm::Segment::create(shm::Geometry{});
    ASSERT_TRUE(seg.ok());
    c.segment.emplace(std::move(seg).value());
    set.attach(c, 0);
    conns.push_back(&c);
  }
  EXPECT_EQ(set.withSegment().size(), 3u);
  EXPECT_EQ(set.active().size(), 3u);
  conns[1]->pending_rings.push_back(0);  // something still to drain
  for (Connection* c : conns) set.queueDemote(*c);
  EXPECT_TRUE(set.demote()) << "one was busy";
  ASSERT_EQ(set.active().size(), 1u);
  EXPECT_EQ(set.active()[0], conns[1]);
  EXPECT_FALSE(conns[0]->active);
  set.activate(*conns[0], 5);
  EXPECT_EQ(set.active().size(), 2u);
  EXPECT_EQ(conns[0]->last_work, 5);
  // Removing from the middle keeps the dense list consistent.
  set.remove(conns[0]->id);
  ASSERT_EQ(set.withSegment().size(), 2u);
  for (std::size_t i = 0; i < set.withSegment().size(); ++i) {
    EXPECT_EQ(set.withSegment()[i]->shm_index, i);
  }
  EXPECT_EQ(set.active().size(), 1u);
}

// A worker connection of endpoint `e` with a real segment (its assignment
// ring gives sequencesFor its ring room) that stated `seqs` and `kv`.
Connection& addWorker(ConnectionSet& set, EndpointId e, std::uint32_t seqs, std::uint64_t kv) {
  Connection& c = set.add(-1);
  auto seg = shm::Segment::create(shm::workerGeometry(8, 64));
  EXPECT_TRUE(seg.ok());
  c.segment.emplace(std::move(seg).value());
  c.producer.emplace(c.segment->completionRing(), 0);
  WorkerState& w = c.worker.emplace();
  w.endpoint = e;
  w.free_sequences = seqs;
  w.free_kv_tokens = kv;
  return c;
}

TEST(WorkerPool, RoomiestIsTheMostFreeKvThenSequencesOfItsEndpoint) {
  config::Config cfg;
  cfg.endpoints.resize(2);
  cfg.endpoints[0].worker.max_sequences = 4;
  cfg.endpoints[1].worker.max_sequences = 4;
  ServerStats stats;
  WorkerPool pool(cfg, stats);
  ConnectionSet set;
  Connection& small = addWorker(set, 0, 4, 100);
  Connection& big = addWorker(set, 0, 1, 500);
  Connection& same_kv_more_seqs = addWorker(set, 0, 3, 500);
  Connection& other_endpoint = addWorker(set, 1, 8, 9000);
  for (Connection* c : {&small, &big, &same_kv_more_seqs, &other_endpoint}) pool.attach(*c);
  EXPECT_EQ(stats.workers[0], 3u);
  EXPECT_EQ(stats.workers[1], 1u);
  EXPECT_EQ(pool.roomiest(0), &same_kv_more_seqs);
  same_kv_more_seqs.closing = true;
  EXPECT_EQ(pool.roomiest(0), &big) << "a closing worker takes nothing";
  // Its statement less what it was given since: one assignment fills `big`.
  ++big.worker->assigned;
  big.worker->unseen_token_sum = 10;
  EXPECT_EQ(pool.sequencesFor(big), 0u);
  EXPECT_EQ(pool.roomiest(0), &small);
  // The endpoint's max_sequences caps what a worker states.
  small.worker->running = 3;
  EXPECT_EQ(pool.sequencesFor(small), 1u);
  pool.detach(small);
  EXPECT_EQ(stats.workers[0], 2u);
  EXPECT_EQ(pool.roomiest(0), nullptr);
}

TEST(WorkerPool, RunningCountAndChecksAreKeptPerEndpoint) {
  config::Config cfg;
  cfg.endpoints.resize(2);
  ServerStats stats;
  WorkerPool pool(cfg, stats);
  EXPECT_FALSE(pool.runningCheckDue(0)) << "nothing runs: nothing to look at";
  pool.started(1);
  pool.started(1);
  EXPECT_EQ(pool.running(), 2u);
  EXPECT_EQ(stats.running_on_workers[1], 2u);
  EXPECT_TRUE(pool.runningCheckDue(100));
  EXPECT_FALSE(pool.runningCheckDue(100 + kNsPerMs)) << "at most every 10 ms";
  EXPECT_TRUE(pool.runningCheckDue(100 + 10 * kNsPerMs));
  pool.stopped(1);
  pool.stopped(1);
  pool.stopped(1);  // never below zero
  EXPECT_EQ(pool.running(), 0u);
  EXPECT_EQ(stats.running_on_workers[1], 0u);
  EXPECT_TRUE(pool.preemptCheckDue(0, 5, 10));
  EXPECT_FALSE(pool.preemptCheckDue(0, 14, 10));
  EXPECT_TRUE(pool.preemptCheckDue(1, 14, 10)) << "each endpoint its own";
  EXPECT_EQ(pool.preemptOutstanding(0), WorkerPool::kNoPreempt);
}

// ---- TenantHandles -------------------------------------------------------

TEST(TenantHandles, ACellIsTakenOnlyUnderTheHandleItsTenantWasOpenedWith) {
  using daemon::TenantHandles;
  TenantHandles t(4);
  const std::uint32_t h = shm::makeTenantHandle(2, 1);
  ASSERT_FALSE(t.checkOpen(h));
  t.open(h, 77);
  EXPECT_EQ(t.openCount(), 1u);
  TenantHandles::Entry* e = nullptr;
  ASSERT_EQ(t.lookup(h, e), TenantHandles::Found::kOpen);
  EXPECT_EQ(e->tenant, 77u);
  EXPECT_EQ(t.lookup(shm::makeTenantHandle(2, 2), e), TenantHandles::Found::kUnknown)
      << "another generation of the same slot";
  EXPECT_EQ(t.lookup(shm::makeTenantHandle(1, 1), e), TenantHandles::Found::kUnknown)
      << "a slot below, never opened";
  EXPECT_EQ(t.lookup(shm::makeTenantHandle(900, 1), e), TenantHandles::Found::kUnknown)
      << "beyond the table";
  EXPECT_EQ(t.lookup(0, e), TenantHandles::Found::kUnknown);
  EXPECT_TRUE(t.checkOpen(h)) << "the slot is open";
}

TEST(TenantHandles, AClosedHandleEndsItsCellsCancelledAndItsSlotComesBackUnderANewGeneration) {
  using daemon::TenantHandles;
  TenantHandles t(2);
  const std::uint32_t h1 = shm::makeTenantHandle(0, 1);
  t.open(h1, 5);
  const auto closed = t.close(h1);
  ASSERT_TRUE(closed);
  EXPECT_EQ(closed->tenant, 5u);
  EXPECT_FALSE(t.close(h1)) << "closed once";
  TenantHandles::Entry* e = nullptr;
  EXPECT_EQ(t.lookup(h1, e), TenantHandles::Found::kClosed);
  EXPECT_TRUE(t.checkOpen(h1)) << "the just-closed handle may not be reused as it is";
  const std::uint32_t h2 = shm::makeTenantHandle(0, 2);
  ASSERT_FALSE(t.checkOpen(h2));
  t.open(h2, 6);
  EXPECT_EQ(t.lookup(h1, e), TenantHandles::Found::kClosed) << "old cells still end CANCELLED";
  ASSERT_EQ(t.lookup(h2, e), TenantHandles::Found::kOpen);
  EXPECT_EQ(e->tenant, 6u);
}

TEST(TenantHandles, OpeningIsBoundedByMaxTenantsAndNeedsAGeneration) {
  using daemon::TenantHandles;
  TenantHandles t(3);
  EXPECT_TRUE(t.checkOpen(shm::makeTenantHandle(3, 1))) << "slot 3 of 3";
  EXPECT_TRUE(t.checkOpen(2)) << "generation 0";
  EXPECT_TRUE(t.checkOpen(0));
  for (std::uint32_t i = 0; i < 3; ++i) t.open(shm::makeTenantHandle(i, 1), i);
  EXPECT_EQ(t.openCount(), 3u);
  std::uint32_t seen = 0;
  t.forEachOpen([&](TenantHandles::Entry&) { ++seen; });
  EXPECT_EQ(seen, 3u);
}

}  // namespace
}  // namespace fairsched::daemon
