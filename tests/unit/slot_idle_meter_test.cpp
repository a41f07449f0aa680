// SlotIdleMeter (daemon/server/slot_idle_meter.hpp): a slot's time serving
// batches, and its time free while a batch was due — never counted before
// the slot freed nor before the batch was due.
#include "daemon/server/slot_idle_meter.hpp"

#include <gtest/gtest.h>

namespace fairsched::daemon {
namespace {

constexpr TimeNs kMs = 1'000'000;

TEST(SlotIdleMeter, CountsFreeTimeOnlyWhileABatchWasDue) {
  SlotIdleMeter m;
  m.dispatched(10 * kMs, 10 * kMs);  // a slot never used before: nothing known
  EXPECT_EQ(m.starvedNs(), 0u);
  m.batchEnded(12 * kMs, 2 * kMs);  // freed at 12 ms after 2 ms of service
  EXPECT_EQ(m.busyNs(), static_cast<std::uint64_t>(2 * kMs));
  // Work due since 11 ms (before the slot freed): starved from 12 to 15.
  m.dispatched(15 * kMs, 11 * kMs);
  EXPECT_EQ(m.starvedNs(), static_cast<std::uint64_t>(3 * kMs));
  m.batchEnded(17 * kMs, 2 * kMs);
  // Work that became due at 20 ms after the slot freed at 17: from 20 to 21.
  m.dispatched(21 * kMs, 20 * kMs);
  EXPECT_EQ(m.starvedNs(), static_cast<std::uint64_t>(4 * kMs));
  m.batchEnded(23 * kMs, 2 * kMs);
  // Dispatched the moment it was due and free: nothing.
  m.dispatched(23 * kMs, 23 * kMs);
  EXPECT_EQ(m.starvedNs(), static_cast<std::uint64_t>(4 * kMs));
  EXPECT_EQ(m.busyNs(), static_cast<std::uint64_t>(6 * kMs));
}

TEST(SlotIdleMeter, ADispatchTakesTheSlotThatFreedFirst) {
  SlotIdleMeter m;
  m.batchEnded(5 * kMs, kMs);
  m.batchEnded(2 * kMs, kMs);
  m.dispatched(6 * kMs, 0);  // due long ago: the slot free since 2 ms
  EXPECT_EQ(m.starvedNs(), static_cast<std::uint64_t>(4 * kMs));
  m.dispatched(6 * kMs, 0);  // then the one free since 5 ms
  EXPECT_EQ(m.starvedNs(), static_cast<std::uint64_t>(5 * kMs));
}

}  // namespace
}  // namespace fairsched::daemon
