// A fake fairschedd for the client library's tests: the real control
// protocol (shm/control_protocol.hpp) on a listening AF_UNIX SOCK_SEQPACKET
// socket in a temp dir, a real sealed segment from shm::Segment::create(),
// real eventfds passed with SCM_RIGHTS, SubmissionConsumer on every opened
// ring and CompletionProducer back, with the daemon's half of the sleep/wake
// protocol. No scheduling: a Responder decides each request's completion,
// or holds it until releaseHeld().
//
// Threading: start() serves on a background thread; serve() serves on the
// calling thread (a forked child). Every other method may be called from any
// thread while it serves; they take the fake's one mutex, which the serving
// thread holds except while it blocks.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "shm/control_protocol.hpp"
#include "shm/layout.hpp"
#include "shm/unique_fd.hpp"

namespace fairsched::testing {

struct FakeEndpoint {
  std::string name;
  std::uint16_t id = 0;
  std::uint32_t max_output_tokens = 0;
  std::uint32_t max_batch_tokens = 0;
};

struct FakeDaemonOptions {
  std::string socket_path;  // empty: <fresh temp dir>/fairsched.sock
  shm::Geometry geometry{4, 16, 64, 64};
  std::uint32_t max_tenants = 1024;  // the HelloReply's max_tenants; beyond: NO_CAPACITY
  bool answer_tenants = true;        // false: OpenTenant gets no reply (a stuck daemon)
  std::vector<FakeEndpoint> endpoints{{"chat", 7, 4096, 0}, {"embed", 9, 0, 0}};
  std::uint64_t client_id = 42;
  // Hello: answered with this status (and message; no descriptors unless OK).
  shm::ControlStatus hello_status = shm::ControlStatus::kOk;
  std::string hello_message;
  // The protocol version written into every reply's header.
  std::uint16_t reply_version = shm::kControlVersion;
  std::set<std::string> refused_tenants;  // OpenTenant → UNAUTHORIZED
  // true: when idle, announce daemon_sleeping and block on the doorbells.
  // false: never announce; nap 1 ms between scans (and never read doorbells).
  bool sleep_when_idle = true;
};

// The completion for one submission, or nullopt to hold it.
using Responder = std::function<std::optional<shm::CompletionSlot>(
    const shm::SubmissionSlot&, std::span<const std::uint32_t> prompt)>;

// Deterministic checksum of a prompt (FNV-1a over the token ids).
std::uint64_t promptChecksum(std::span<const std::uint32_t> prompt);
// OK, output_tokens = max_output_tokens, checksum = promptChecksum(prompt).
std::optional<shm::CompletionSlot> okCompletion(const shm::SubmissionSlot& slot,
                                                std::span<const std::uint32_t> prompt);
// Holds every request.
std::optional<shm::CompletionSlot> holdAll(const shm::SubmissionSlot&,
                                           std::span<const std::uint32_t>);

class FakeDaemon {
 public:
  explicit FakeDaemon(FakeDaemonOptions options = {});
  ~FakeDaemon();
  FakeDaemon(const FakeDaemon&) = delete;
  FakeDaemon& operator=(const FakeDaemon&) = delete;

  const std::string& socketPath() const { return path_; }

  void start();
  void serve();
  void stop();

  void setResponder(Responder responder);
  // Paused: submissions stay in the rings (they fill up).
  void setPaused(bool paused);
  // Closes every client connection, as a dying daemon would; keeps listening.
  void dropClients();
  // Answers every held request with `responder`; returns how many.
  std::size_t releaseHeld(const Responder& responder = okCompletion);

  std::size_t hellos() const;
  std::size_t connections() const;
  std::size_t submissions() const;
  std::size_t held() const;
  std::size_t doorbellWakes() const;  // wake-ups that found the doorbell rung
  std::size_t bellWrites() const;     // completion eventfd writes
  // (tenant, tier) of every successful OpenTenant, in order.
  std::vector<std::pair<std::string, std::string>> tenantsOpened() const;
  // Flags in the newest connection's segment; false without one.
  bool daemonSleeping() const;
  bool clientSleeping() const;
  // Reads (and resets) the newest connection's doorbell counter; meaningful
  // with sleep_when_idle = false, when the fake never reads it itself.
  std::uint64_t takeDoorbellCount();

  // Blocks until pred() holds (checked under the fake's mutex after each
  // serving iteration) or `timeout`; returns pred().
  bool waitFor(const std::function<bool()>& pred, std::chrono::milliseconds timeout);
  // waitFor() until exactly `n` submissions are held.
  bool waitHeld(std::size_t n, std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    return waitFor([this, n] { return held() == n; }, timeout);
  }

 private:
  struct Conn;
  void loop();
  bool acceptNew();
  bool readControl(Conn& c);
  void handleHello(Conn& c, const shm::HelloMessage& m);
  void handleOpenTenant(Conn& c, const shm::OpenTenantMessage& m);
  void handleCloseTenant(Conn& c, const shm::CloseTenantMessage& m);
  bool drainRings(Conn& c);
  bool flush(Conn& c);
  void wake();

  FakeDaemonOptions options_;
  std::string dir_;
  std::string path_;
  shm::UniqueFd listen_;
  shm::UniqueFd wake_;

  mutable std::mutex mu_;
  std::condition_variable progress_;
  std::vector<std::unique_ptr<Conn>> conns_;  // guarded by mu_
  Responder responder_ = okCompletion;        // guarded by mu_
  bool paused_ = false;                       // guarded by mu_
  bool stop_ = false;                         // guarded by mu_
  std::size_t hellos_ = 0, submissions_ = 0, doorbell_wakes_ = 0, bell_writes_ = 0;
  std::vector<std::pair<std::string, std::string>> tenants_opened_;
  std::thread thread_;
};

}  // namespace fairsched::testing
