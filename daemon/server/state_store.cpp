#include "daemon/server/state_store.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>

#include <spdlog/spdlog.h>

#include "daemon/env.hpp"
#include "fairsched/name.hpp"

namespace fairsched::daemon {
namespace {

constexpr char kMagic[8] = {'F', 'A', 'I', 'R', 'S', 'T', 'A', 'T'};
constexpr std::uint32_t kByteOrder = 0x0A0B0C0D;
constexpr std::size_t kBootIdBytes = 40;
constexpr char kEndpointTag = 'E';
constexpr char kTenantTag = 'T';
// Bounds a record is checked against before anything is applied.
constexpr std::size_t kMaxEndpoints = 4096;
constexpr std::size_t kMaxLimits = 64;
constexpr TimeNs kMaxWindowNs = TimeNs{100} * 366 * 24 * 3600 * kNsPerSec;  // 100 years
constexpr std::uint64_t kMaxCost = std::uint64_t{1} << 48;
constexpr double kMaxExpectedOutput = 1e12;
constexpr double kMaxService = 1e300;
constexpr double kMaxRate = 1e18;
constexpr const char* kFileName = "fairschedd.state";

std::string readBootId() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  if (id.size() >= kBootIdBytes) id.resize(kBootIdBytes - 1);
  return id;
}

TimeNs clockNs(clockid_t id) {
  timespec ts{};
  clock_gettime(id, &ts);
  return static_cast<TimeNs>(ts.tv_sec) * kNsPerSec + ts.tv_nsec;
}

// Reads values off the file, failing (once) at the first that does not fit.
class Reader {
 public:
  explicit Reader(std::span<const char> bytes) : bytes_(bytes) {}
  template <class T>
  bool get(T& v) {
    if (bytes_.size() - pos_ < sizeof(T)) return fail("truncated");
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool getName(std::string_view& s) {
    std::uint8_t n = 0;
    if (!get(n)) return false;
    if (bytes_.size() - pos_ < n) return fail("truncated");
    s = std::string_view(bytes_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  bool atEnd() const { return pos_ == bytes_.size(); }
  bool fail(std::string why) {
    if (error_.empty()) error_ = std::move(why) + " at byte " + std::to_string(pos_);
    return false;
  }
  const std::string& error() const { return error_; }

 private:
  std::span<const char> bytes_;
  std::size_t pos_ = 0;
  std::string error_;
};

bool finiteIn(double v, double lo, double hi) {
  return std::isfinite(v) && v >= lo && v <= hi;
}

// One tenant record into `s` (buckets and windows appended), checked.
bool readTenant(Reader& r, std::string_view& name, std::string_view& tier,
                core::SavedTenantState& s) {
  s.clear();
  if (!r.getName(name) || !r.getName(tier)) return false;
  if (nameError(name)) return r.fail("a tenant name that is not a valid name");
  if (tier.empty() || nameError(tier)) return r.fail("a tier name that is not a valid name");
  std::uint8_t limits = 0;
  if (!r.get(s.expected_output) || !r.get(s.service) || !r.get(limits)) return false;
  if (!(s.expected_output < 0 ? s.expected_output == -1.0
                              : finiteIn(s.expected_output, 0, kMaxExpectedOutput))) {
    return r.fail("an expected output out of range");
  }
  if (!finiteIn(s.service, 0, kMaxService)) return r.fail("a service counter out of range");
  if (limits > kMaxLimits) return r.fail("more limits than a tenant has");
  for (std::uint8_t l = 0; l < limits; ++l) {
    std::uint8_t unit = 0, count = 0;
    core::SavedWindow w;
    if (!r.get(unit) || !r.get(w.window_ns) || !r.get(count)) return false;
    if (unit > static_cast<std::uint8_t>(core::LimitUnit::kTokens))
      return r.fail("an unknown limit unit");
    if (w.window_ns <= 0 || w.window_ns > kMaxWindowNs) return r.fail("a window out of range");
    if (count > core::SlidingWindow::kSlots) return r.fail("more buckets than a window has");
    w.unit = static_cast<core::LimitUnit>(unit);
    w.first = static_cast<std::uint32_t>(s.buckets.size());
    w.count = count;
    for (std::uint8_t b = 0; b < count; ++b) {
      core::SavedBucket bucket;
      if (!r.get(bucket.cost) || !r.get(bucket.age)) return false;
      if (bucket.cost > kMaxCost) return r.fail("a bucket's cost out of range");
      if (bucket.age < 0 || bucket.age > kMaxWindowNs) return r.fail("a bucket's age out of range");
      s.buckets.push_back(bucket);
    }
    s.windows.push_back(w);
  }
  return true;
}

}  // namespace

// 64-bit FNV-1a over 8-byte words, then the tail bytes: a check against
// torn and truncated files, not an adversary (the file is the daemon's own).
std::uint64_t stateChecksum(std::span<const char> bytes) {
  constexpr std::uint64_t kPrime = 0x100000001b3ULL;
  std::uint64_t h = 0xcbf29ce484222325ULL;
  std::size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    std::uint64_t w;
    std::memcpy(&w, bytes.data() + i, 8);
    h = (h ^ w) * kPrime;
  }
  for (; i < bytes.size(); ++i) h = (h ^ static_cast<unsigned char>(bytes[i])) * kPrime;
  return h ^ (h >> 29);
}

StateClock StateClock::now() {
  return StateClock{clockNs(CLOCK_REALTIME), clockNs(CLOCK_MONOTONIC), readBootId()};
}

TimeNs StateClock::elapsedUntil(const StateClock& now) const {
  const bool same_boot = !boot_id.empty() && boot_id == now.boot_id;
  const TimeNs then = same_boot ? mono_ns : wall_ns;
  const TimeNs at = same_boot ? now.mono_ns : now.wall_ns;
  // Clocks are never negative (decodeState refuses such a file), so the
  // difference cannot overflow; a clock that went backwards is no time.
  return at > then && then >= 0 ? at - then : 0;
}

template <class T>
void StateEncoder::put(const T& v) {
  const auto* p = reinterpret_cast<const char*>(&v);
  out_.append(p, sizeof(T));
}

void StateEncoder::putName(std::string_view s) {
  put(static_cast<std::uint8_t>(s.size()));
  out_.append(s);
}

void StateEncoder::begin(std::size_t expected_bytes) {
  out_.clear();
  out_.reserve(std::max(expected_bytes, kStateHeaderBytes));
  states_ = 0;
  out_.append(kMagic, sizeof kMagic);
  put(kStateVersion);
  put(kByteOrder);
  out_.append(kStateHeaderBytes - out_.size(), '\0');  // the rest at finish()
}

void StateEncoder::endpoint(EndpointId e) {
  out_.push_back(kEndpointTag);
  putName(sched_.spec().endpoints[e].name);
  put(sched_.throttle(e).tokensPerSecond());
}

void StateEncoder::add(const core::SavedTenantState& s) {
  const core::TenantTable::Entry& entry = sched_.tenants()[s.tenant];
  out_.push_back(kTenantTag);
  putName(entry.name);
  putName(sched_.spec().tiers[entry.tier].name);
  put(s.expected_output < 0 ? -1.0 : s.expected_output);
  put(s.service);
  put(static_cast<std::uint8_t>(std::min(s.windows.size(), kMaxLimits)));
  for (std::size_t l = 0; l < s.windows.size() && l < kMaxLimits; ++l) {
    const core::SavedWindow& w = s.windows[l];
    put(static_cast<std::uint8_t>(w.unit));
    put(w.window_ns);
    put(static_cast<std::uint8_t>(w.count));
    for (std::uint32_t b = w.first; b < w.first + w.count; ++b) {
      put(s.buckets[b].cost);
      put(s.buckets[b].age);
    }
  }
  ++states_;
}

std::string StateEncoder::finish(const StateClock& at) {
  const std::uint64_t payload = out_.size() - kStateHeaderBytes;
  const std::uint64_t sum =
      stateChecksum(std::span<const char>(out_.data() + kStateHeaderBytes, payload));
  std::memcpy(out_.data() + 16, &payload, 8);
  std::memcpy(out_.data() + 24, &sum, 8);
  std::memcpy(out_.data() + 32, &at.wall_ns, 8);
  std::memcpy(out_.data() + 40, &at.mono_ns, 8);
  std::memcpy(out_.data() + 48, at.boot_id.data(), std::min(at.boot_id.size(), kBootIdBytes - 1));
  return std::move(out_);
}

std::optional<std::string> decodeState(std::span<const char> bytes, StateClock& saved,
                                       StateVisitor* visitor) {
  if (bytes.size() < kStateHeaderBytes) return "shorter than a state file's header";
  if (std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) return "not a fairschedd state file";
  std::uint32_t version = 0, order = 0;
  std::uint64_t payload = 0, sum = 0;
  std::memcpy(&version, bytes.data() + 8, 4);
  std::memcpy(&order, bytes.data() + 12, 4);
  std::memcpy(&payload, bytes.data() + 16, 8);
  std::memcpy(&sum, bytes.data() + 24, 8);
  if (order != kByteOrder) return "written on a machine of another byte order";
  if (version != kStateVersion) {
    return "state file version " + std::to_string(version) + "; this fairschedd reads version " +
           std::to_string(kStateVersion);
  }
  if (payload != bytes.size() - kStateHeaderBytes) {
    return "truncated or padded: the header says " + std::to_string(payload) +
           " bytes of state, the file has " + std::to_string(bytes.size() - kStateHeaderBytes);
  }
  const std::span<const char> body = bytes.subspan(kStateHeaderBytes);
  if (stateChecksum(body) != sum) return "checksum mismatch (the file was changed or torn)";
  std::memcpy(&saved.wall_ns, bytes.data() + 32, 8);
  std::memcpy(&saved.mono_ns, bytes.data() + 40, 8);
  if (saved.wall_ns < 0 || saved.mono_ns < 0) return "a clock before 1970 or before boot";
  const char* boot = bytes.data() + 48;
  saved.boot_id.assign(boot, strnlen(boot, kBootIdBytes));

  // Checked to the end before anything is visited, then visited.
  core::SavedTenantState s;
  auto walk = [&](StateVisitor* v) -> std::optional<std::string> {
    Reader r(body);
    std::size_t endpoints = 0;
    while (!r.atEnd()) {
      char tag = 0;
      if (!r.get(tag)) break;
      if (tag == kEndpointTag) {
        std::string_view name;
        double rate = 0;
        if (!r.getName(name) || !r.get(rate)) break;
        if (name.empty() || nameError(name, kMaxEndpointNameBytes)) {
          r.fail("an endpoint name that is not a valid name");
          break;
        }
        if (!finiteIn(rate, 0, kMaxRate)) {
          r.fail("a service rate out of range");
          break;
        }
        if (++endpoints > kMaxEndpoints) {
          r.fail("more endpoints than a daemon has");
          break;
        }
        if (v) v->endpoint(name, rate);
      } else if (tag == kTenantTag) {
        if (endpoints == 0) {
          r.fail("a tenant before any endpoint");
          break;
        }
        std::string_view name, tier;
        if (!readTenant(r, name, tier, s)) break;
        if (v) v->tenant(name, tier, s);
      } else {
        r.fail("an unknown record");
        break;
      }
    }
    if (!r.error().empty()) return r.error();
    return std::nullopt;
  };
  if (auto err = walk(nullptr)) return err;
  if (visitor == nullptr) return std::nullopt;
  visitor->header(saved);
  return walk(visitor);
}

namespace {

class Restorer final : public StateVisitor {
 public:
  Restorer(core::Scheduler& sched, const StateClock& now_clock, TimeNs now)
      : sched_(sched), now_clock_(now_clock), now_(now) {}
  void header(const StateClock& saved) override {
    summary.elapsed = saved.elapsedUntil(now_clock_);
    summary.saved_wall = saved.wall_ns;
  }
  void endpoint(std::string_view name, double rate) override {
    endpoint_.reset();
    const auto& eps = sched_.spec().endpoints;
    for (std::size_t e = 0; e < eps.size(); ++e) {
      if (eps[e].name == name) endpoint_ = static_cast<EndpointId>(e);
    }
    if (endpoint_) sched_.restoreServiceRate(*endpoint_, rate);
  }
  void tenant(std::string_view name, std::string_view tier,
              const core::SavedTenantState& s) override {
    if (!endpoint_) {
      ++summary.dropped;  // its endpoint is gone
      return;
    }
    std::optional<TierId> hint;
    const auto& tiers = sched_.spec().tiers;
    for (std::size_t t = 0; t < tiers.size(); ++t) {
      if (tiers[t].name == tier) hint = static_cast<TierId>(t);
    }
    const TenantId t = sched_.tenants().acquire(name, hint);
    if (t == kNoTenant) {
      ++summary.dropped;
      return;
    }
    sched_.restoreState(*endpoint_, t, s, summary.elapsed, now_);
    sched_.tenants().release(t);
    ++summary.states;
  }
  RestoreSummary summary;

 private:
  core::Scheduler& sched_;
  const StateClock& now_clock_;
  TimeNs now_;
  std::optional<EndpointId> endpoint_;
};

}  // namespace

fairsched::Result<RestoreSummary, std::string> restoreState(std::span<const char> bytes,
                                                            core::Scheduler& sched,
                                                            const StateClock& now_clock,
                                                            TimeNs now) {
  StateClock saved;
  Restorer restorer(sched, now_clock, now);
  if (auto err = decodeState(bytes, saved, &restorer)) return std::move(*err);
  return restorer.summary;
}

std::optional<std::string> writeFileAtomically(const std::string& path, std::string_view bytes) {
  const std::string tmp = path + ".tmp";
  auto sys = [](const std::string& what) { return what + ": " + std::strerror(errno); };
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return sys("open " + tmp);
  std::size_t off = 0;
  while (off < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + off, bytes.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      std::string err = sys("write " + tmp);
      ::close(fd);
      ::unlink(tmp.c_str());
      return err;
    }
    off += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) {
    std::string err = sys("fsync " + tmp);
    ::close(fd);
    ::unlink(tmp.c_str());
    return err;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    std::string err = sys("rename " + tmp + " to " + path);
    ::unlink(tmp.c_str());
    return err;
  }
  // The rename itself is durable once the directory is.
  const std::string dir = path.substr(0, path.rfind('/') == 0 ? 1 : path.rfind('/'));
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
  return std::nullopt;
}

StateStore::~StateStore() {
  if (writer_.joinable()) writer_.join();
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

void StateStore::open(const std::string& dir, TimeNs interval, core::Scheduler& sched, TimeNs now) {
  interval_ = interval;
  if (dir.empty()) {
    status_.problem = "off ([daemon] state_dir = \"\")";
    spdlog::info("keeping no state across restarts ([daemon] state_dir is empty)");
    return;
  }
  path_ = dir + "/" + kFileName;
  status_.path = path_;
  auto off = [&](const std::string& why) {
    status_.problem = why;
    spdlog::warn(
        "state is not kept across restarts: {}; a restart starts every limit window empty. Set "
        "[daemon] state_dir to a directory the daemon can write (under systemd, "
        "StateDirectory=fairsched makes /var/lib/fairsched), or to \"\" to keep none",
        why);
  };
  if (::mkdir(dir.c_str(), 0750) == 0) {
    spdlog::info("created the state directory {}", dir);
  } else if (errno != EEXIST) {
    off("cannot create " + dir + " (" + std::strerror(errno) + ")");
    return;
  }
  // One daemon per state directory: a second would overwrite the first's file.
  const std::string lock = path_ + ".lock";
  const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    off("cannot open " + lock + " (" + std::strerror(errno) + ")");
    return;
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd);
    off(dir + " is in use by another fairschedd (" + lock + " is locked)");
    return;
  }
  lock_fd_ = fd;

  std::ifstream in(path_, std::ios::binary);
  if (!in) {
    status_.restored_from = "no state file: started clean";
    spdlog::info("no state file {}: starting with every limit window empty", path_);
    return;
  }
  std::string bytes;
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  std::optional<std::string> problem;
  if (size < 0 || static_cast<std::uint64_t>(size) > kMaxStateFileBytes) {
    problem = "larger than " + std::to_string(kMaxStateFileBytes) + " bytes";
  } else {
    bytes.resize(static_cast<std::size_t>(size));
    in.seekg(0);
    if (!in.read(bytes.data(), size)) problem = "cannot be read";
  }
  if (!problem) {
    auto restored = restoreState(bytes, sched, StateClock::now(), now);
    if (const std::string* err = restored.errorOrNull()) {
      problem = *err;
    } else {
      const RestoreSummary& s = restored.value();
      status_.restored_from = "restored " + std::to_string(s.states) + " tenant states";
      spdlog::info(
          "restored {} tenant states from {} (written {:.1f} s ago; {} dropped: their endpoint "
          "is gone)",
          s.states, path_, static_cast<double>(s.elapsed) / kNsPerSec, s.dropped);
      status_.states = s.states;
      status_.bytes = bytes.size();
      status_.saved_wall = s.saved_wall;
      return;
    }
  }
  // Set aside, never trusted and never deleted: an operator may want to look.
  const std::string aside = path_ + ".bad-" + std::to_string(clockNs(CLOCK_REALTIME) / kNsPerSec);
  if (::rename(path_.c_str(), aside.c_str()) == 0) {
    spdlog::warn("state file {} is unusable ({}): set aside as {}; starting clean", path_, *problem,
                 aside);
    status_.restored_from = "set aside " + aside + " (" + *problem + "): started clean";
  } else {
    spdlog::warn("state file {} is unusable ({}) and cannot be set aside ({}); starting clean",
                 path_, *problem, std::strerror(errno));
    status_.restored_from = "unusable (" + *problem + "): started clean";
  }
}

void StateStore::beginSnapshot(core::Scheduler& sched, std::uint64_t activity) {
  encoder_.emplace(sched);
  // Room for the last file and a tenth more, or ~100 bytes a state.
  encoder_->begin(std::max(last_bytes_ + last_bytes_ / 10, sched.activeTenantStates() * 100));
  snapshot_activity_ = activity;
  snapshot_loop_ns_ = 0;
  endpoint_ = 0;
  cursor_ = 0;
}

bool StateStore::continueSnapshot(core::Scheduler& sched, TimeNs now, std::size_t budget) {
  const TimeNs t0 = monotonicNow();
  StateEncoder& enc = *encoder_;
  const std::size_t endpoints = sched.spec().endpoints.size();
  bool done = false;
  while (budget > 0) {
    if (endpoint_ >= endpoints) {
      done = true;
      break;
    }
    if (cursor_ == 0) enc.endpoint(endpoint_);
    const std::size_t before = cursor_;
    if (sched.saveStates(endpoint_, cursor_, budget, now, enc)) {
      ++endpoint_;
      cursor_ = 0;
    }
    const std::size_t looked = cursor_ > before ? cursor_ - before : 1;
    budget = budget > looked ? budget - looked : 0;
  }
  const TimeNs took = monotonicNow() - t0;
  snapshot_loop_ns_ += took;
  status_.slice_max_ns = std::max(status_.slice_max_ns, took);
  return done;
}

void StateStore::startWrite() {
  // Stamped at the end: every age was taken at or before this moment, so
  // the next start counts each admission as at least as recent as it was.
  writing_clock_ = StateClock::now();
  writing_ = encoder_->finish(writing_clock_);
  writing_states_ = encoder_->states();
  writing_activity_ = snapshot_activity_;
  status_.snapshot_ns = snapshot_loop_ns_;
  encoder_.reset();
  written_.store(false, std::memory_order_relaxed);
  writer_ = std::thread([this] {
    write_error_ = writeFileAtomically(path_, writing_);
    written_.store(true, std::memory_order_release);
  });
}

void StateStore::collectWrite(bool wait) {
  if (!writer_.joinable()) return;
  if (!wait && !written_.load(std::memory_order_acquire)) return;
  writer_.join();
  if (write_error_) {
    ++status_.failures;
    if (status_.problem != *write_error_) {
      spdlog::error("state not saved: {} (the previous state file, if any, is kept)",
                    *write_error_);
    }
    status_.problem = *write_error_;
  } else {
    ++status_.writes;
    if (!status_.problem.empty()) spdlog::info("state saved again to {}", path_);
    status_.problem.clear();
    status_.saved_wall = writing_clock_.wall_ns;
    status_.states = writing_states_;
    status_.bytes = writing_.size();
    last_bytes_ = writing_.size();
    saved_activity_ = writing_activity_;
    have_saved_activity_ = true;
  }
  writing_.clear();
  writing_.shrink_to_fit();
}

void StateStore::tick(core::Scheduler& sched, TimeNs now, std::uint64_t activity) {
  if (!enabled()) return;
  collectWrite(false);
  if (encoder_) {
    if (continueSnapshot(sched, now, kStatesPerPass)) startWrite();
    return;
  }
  if (writer_.joinable() || now < next_at_) return;
  if (have_saved_activity_ && activity == saved_activity_) return;  // the file says it all
  next_at_ = now + interval_;
  beginSnapshot(sched, activity);
  if (continueSnapshot(sched, now, kStatesPerPass)) startWrite();
}

TimeNs StateStore::dueAt(TimeNs now, std::uint64_t activity) const {
  if (!enabled()) return kNever;
  if (encoder_) return now;
  if (writer_.joinable()) return now + 10 * kNsPerMs;  // collect it soon
  if (have_saved_activity_ && activity == saved_activity_) return kNever;
  return next_at_;
}

void StateStore::saveNow(core::Scheduler& sched, TimeNs now) {
  if (!enabled()) return;
  collectWrite(true);
  if (!encoder_) beginSnapshot(sched, 0);
  while (!continueSnapshot(sched, now, SIZE_MAX)) {
  }
  startWrite();
  collectWrite(true);
  if (status_.problem.empty()) {
    spdlog::info("state of {} tenants saved to {}", status_.states, path_);
  }
}

StateStore::Status StateStore::status(std::uint64_t activity) const {
  Status s = status_;
  s.enabled = enabled();
  s.up_to_date = enabled() && have_saved_activity_ && activity == saved_activity_ && !encoder_ &&
                 !writer_.joinable();
  return s;
}

}  // namespace fairsched::daemon
