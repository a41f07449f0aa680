// The physical limit of a round trip between two processes on this machine:
// a bare shared-memory ping-pong (two 64-bit words in an anonymous shared
// mapping, each side busy-polling the other's), measured in the same run as
// the path it is compared with, since absolute figures differ several times
// between machines of one kind while ratios measured together hold.
#pragma once

#include <vector>

namespace fairsched::bench {

// Pins the calling thread (and what it forks afterwards) to `cpu`, where the
// machine has at least two CPUs; a no-op on one.
void pinTo(int cpu);

// `iterations` round-trip times in nanoseconds (after a warm-up), the
// parent on CPU `parent_cpu` and a forked child on `child_cpu` where the
// machine has two CPUs. Empty if the child could not be started.
std::vector<double> rawPingPong(int iterations, int parent_cpu = 0, int child_cpu = 1);

// The limit of handing one word to a busy-polling reader from a process
// that sleeps between writes on the reader's CPU (as a paced engine shares
// a CPU with its client when three processes have two): a forked child on
// CPU `cpu` sleeps `step_us`, stores the time, sleeps again; the parent,
// on the same CPU, spins until it sees the store. `iterations` store →
// sight delays in nanoseconds; empty if the child could not be started.
std::vector<double> rawSleepingHandoff(int iterations, int cpu, int step_us);

}  // namespace fairsched::bench
