// What fairschedd keeps across a restart: every local limit window of every
// tenant on every endpoint, the fairness service counters and the learned
// cost estimates (core::SavedTenantState), and each endpoint's measured
// service rate — so a restart (an upgrade, Restart=on-failure, the
// watchdog) hands no tenant a fresh day or month of quota.
//
// The state file, `<state_dir>/fairschedd.state`, is written atomically
// (temporary file, fsync, rename, fsync of the directory) every
// state_interval_s while anything changes, and at stop; a crash loses at
// most one interval. It is read once at start, with the time that passed
// applied: within one boot the monotonic clock says how long the daemon was
// down, across a reboot the wall clock does (time that went backwards
// counts as none, which only keeps usage longer). A missing file starts
// clean; one that is corrupt, truncated, of another version or another
// machine's byte order is renamed `fairschedd.state.bad-<unix seconds>`,
// with a warning naming it, and the daemon starts clean — it never refuses
// to start for its state and never trusts the file blindly: every size,
// count and value is bounded before anything is applied. State for
// endpoints or limits the config no longer has is dropped; a limit whose
// amount changed keeps its usage (as at a reload).
//
// The event loop never waits for the disk and never serializes for long:
// a snapshot is taken kStatesPerPass tenant states per loop pass, and a
// thread of its own writes the file.
//
// Format (native byte order, checked by a marker; docs/operations.md):
//   header  magic "FAIRSTAT", u32 version, u32 byte-order marker,
//           u64 payload bytes, u64 payload checksum, i64 wall-clock ns,
//           i64 monotonic ns, char[40] boot id  (88 bytes)
//   payload records: 'E' endpoint (u8 length, name, f64 service rate),
//           then its tenants: 'T' (u8 length, name, u8 length, tier,
//           f64 expected output, f64 service per weight, u8 limits,
//           each: u8 unit, i64 window ns, u8 buckets, each: u64 cost,
//           i64 age ns)
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>

#include "daemon/core/saved_state.hpp"
#include "daemon/core/scheduler.hpp"
#include "daemon/core/types.hpp"
#include "fairsched/error.hpp"

namespace fairsched::daemon {

inline constexpr std::uint32_t kStateVersion = 1;
inline constexpr std::size_t kStateHeaderBytes = 88;
// A file larger than this is not read (about 8 million tenant states).
inline constexpr std::uint64_t kMaxStateFileBytes = std::uint64_t{1} << 30;

// When a snapshot was taken, in the clocks that tell how long ago it was.
struct StateClock {
  TimeNs wall_ns = 0;   // CLOCK_REALTIME
  TimeNs mono_ns = 0;   // CLOCK_MONOTONIC
  std::string boot_id;  // /proc/sys/kernel/random/boot_id; empty when unknown

  static StateClock now();
  // How long before `now` this was: the monotonic clock within one boot,
  // the wall clock across boots; never negative.
  TimeNs elapsedUntil(const StateClock& now) const;
};

// Builds a state file from a scheduler's saved states.
class StateEncoder final : public core::SavedStateSink {
 public:
  explicit StateEncoder(const core::Scheduler& sched) : sched_(sched) {}
  // Starts a file; `expected_bytes` is reserved (the last file's size), so
  // a slice does not copy what the earlier ones wrote.
  void begin(std::size_t expected_bytes = 0);
  // The states added next belong to endpoint `e`.
  void endpoint(EndpointId e);
  void add(const core::SavedTenantState& s) override;
  // The file's bytes, stamped `at` (take it after the last add(): ages are
  // as of the moment each state was added); the encoder is empty afterwards.
  std::string finish(const StateClock& at);
  std::size_t states() const { return states_; }

 private:
  template <class T>
  void put(const T& v);
  void putName(std::string_view s);
  const core::Scheduler& sched_;
  std::string out_;
  std::size_t states_ = 0;
};

// What a valid state file holds, one record at a time.
class StateVisitor {
 public:
  virtual ~StateVisitor() = default;
  // The header's clocks, before the first record.
  virtual void header(const StateClock& saved) { (void)saved; }
  virtual void endpoint(std::string_view name, double service_rate) = 0;
  virtual void tenant(std::string_view name, std::string_view tier,
                      const core::SavedTenantState& s) = 0;
};

// The payload checksum the header carries.
std::uint64_t stateChecksum(std::span<const char> payload);

// Checks the whole file first; only a valid one is visited (nullptr: check
// only). The error says what is wrong, for the operator.
std::optional<std::string> decodeState(std::span<const char> bytes, StateClock& saved,
                                       StateVisitor* visitor);

struct RestoreSummary {
  std::size_t states = 0;   // tenant states restored
  std::size_t dropped = 0;  // of endpoints the config no longer has, or tenants refused
  TimeNs elapsed = 0;       // how long before `now` the file was written
  TimeNs saved_wall = 0;    // when, by the wall clock
};
// Applies a valid state file to `sched` (before its first submit). Errors as decodeState.
fairsched::Result<RestoreSummary, std::string> restoreState(std::span<const char> bytes,
                                                            core::Scheduler& sched,
                                                            const StateClock& now_clock,
                                                            TimeNs now);

// Writes `bytes` to `path` atomically (temporary file, fsync, rename, fsync
// of the directory). The error names the step that failed.
std::optional<std::string> writeFileAtomically(const std::string& path, std::string_view bytes);

// The daemon's side: open at start, a slice per loop pass, a last write at stop.
class StateStore {
 public:
  static constexpr std::size_t kStatesPerPass = 2048;

  StateStore() = default;
  ~StateStore();
  StateStore(const StateStore&) = delete;
  StateStore& operator=(const StateStore&) = delete;

  // Takes `dir` (its last level is created when missing; an empty dir keeps
  // nothing), locks it against a second daemon, and restores its state file
  // into `sched`. Never fails: what goes wrong is logged, and the daemon
  // runs without state (or starts clean).
  void open(const std::string& dir, TimeNs interval, core::Scheduler& sched, TimeNs now);
  void setInterval(TimeNs interval) { interval_ = interval; }
  bool enabled() const { return lock_fd_ >= 0; }

  // One loop pass: collects a finished write, takes the next slice of a
  // snapshot, or starts one when it is due and `activity` (anything that
  // changes the state counts it up) moved since the last one.
  void tick(core::Scheduler& sched, TimeNs now, std::uint64_t activity);
  // When tick() wants to run next (kNever: nothing to do until activity).
  TimeNs dueAt(TimeNs now, std::uint64_t activity) const;
  // At stop: waits for a write in progress, then writes the whole state.
  void saveNow(core::Scheduler& sched, TimeNs now);

  struct Status {
    bool enabled = false;
    std::string path;        // the state file
    std::string problem;     // why nothing is kept, or the last write's error
    TimeNs saved_wall = 0;   // CLOCK_REALTIME of the state on disk; 0: none
    std::size_t states = 0;  // tenant states in it
    std::size_t bytes = 0;
    TimeNs slice_max_ns = 0;     // the longest slice a snapshot took on the loop
    TimeNs snapshot_ns = 0;      // the last snapshot's loop time, all slices
    std::uint64_t writes = 0;    // files written
    std::uint64_t failures = 0;  // writes that failed
    std::string restored_from;   // what the start did with the file, for operators
    bool up_to_date = false;     // nothing changed since the state on disk was taken
  };
  // `activity` as tick() is given it.
  Status status(std::uint64_t activity) const;

 private:
  void beginSnapshot(core::Scheduler& sched, std::uint64_t activity);
  // Encodes up to `budget` states; true when the snapshot is complete.
  bool continueSnapshot(core::Scheduler& sched, TimeNs now, std::size_t budget);
  void collectWrite(bool wait);
  void startWrite();

  std::string path_;
  int lock_fd_ = -1;
  TimeNs interval_ = 5 * kNsPerSec;
  TimeNs next_at_ = 0;
  // The activity the state on disk was taken at; at start, what was read
  // (or nothing, without a file) is all there is.
  std::uint64_t saved_activity_ = 0;
  bool have_saved_activity_ = true;
  // The snapshot being taken.
  std::optional<StateEncoder> encoder_;
  EndpointId endpoint_ = 0;
  std::size_t cursor_ = 0;
  std::uint64_t snapshot_activity_ = 0;
  TimeNs snapshot_loop_ns_ = 0;
  // The write in progress (its thread owns `writing_`).
  std::thread writer_;
  std::atomic<bool> written_{false};
  std::string writing_;
  std::optional<std::string> write_error_;
  StateClock writing_clock_;
  std::size_t writing_states_ = 0;
  std::uint64_t writing_activity_ = 0;
  Status status_;
  std::size_t last_bytes_ = 0;  // the last file's size
};

}  // namespace fairsched::daemon
