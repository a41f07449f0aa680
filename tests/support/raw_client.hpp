// The client side of fairschedd's protocol written directly against shm/ —
// no libfairsched — so a test can send what a hostile or broken peer would:
// any client name, any tenant name, hand-made slots, scribbled memory.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "shm/control_protocol.hpp"
#include "shm/segment.hpp"

namespace fairsched::testing {

class RawClient {
 public:
  RawClient() = default;
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;
  ~RawClient();

  // Connects and says Hello with `client_name` (copied as bytes, truncated to
  // the field). The daemon's status; `why` gets its message. kInternal when
  // the socket could not be reached or the reply was malformed.
  // A non-empty `worker_endpoint` says Hello in the worker role for it.
  shm::ControlStatus connect(const std::string& path, std::string* why = nullptr,
                             const std::string& client_name = "test",
                             const std::string& worker_endpoint = "");
  // Opens `tenant` (bytes as given) with an optional tier hint under
  // `handle` (0: the next slot, generation 1): the status and the handle.
  std::pair<shm::ControlStatus, std::uint32_t> open(const std::string& tenant,
                                                    std::string* why = nullptr,
                                                    const std::string& tier = "",
                                                    std::uint32_t handle = 0);
  // CloseTenant: the status and how many queued requests ended CANCELLED.
  std::pair<shm::ControlStatus, std::uint32_t> close(std::uint32_t handle,
                                                     std::string* why = nullptr);
  // Publishes one request for tenant `handle` (any value: a hostile client's
  // choice) on `lane`; false when the lane is full.
  bool submit(std::uint32_t handle, std::uint64_t id, const std::vector<std::uint32_t>& prompt,
              std::uint32_t max_out = 8, std::int64_t deadline_ns = 0, std::uint32_t lane = 0);
  // submit(), waiting while the lane is full: a full lane is back-pressure,
  // not an error. False only when the lane stayed full for 60 s (a daemon
  // that stopped reading it).
  bool submitWhenRoom(std::uint32_t handle, std::uint64_t id,
                      const std::vector<std::uint32_t>& prompt, std::uint32_t max_out = 8,
                      std::uint32_t lane = 0);
  // Completions until `count` arrived or 20 s passed.
  std::vector<shm::CompletionSlot> collect(std::size_t count);
  shm::SubmissionRingMemory ringMemory(std::uint32_t ring) {
    return segment_->submissionRing(ring);
  }
  // Random bytes over the whole client-writable part, with the doorbell rung.
  void scribble(std::mt19937_64& rng);
  // Stores `index` as its completion (a worker's: assignment) ring's read
  // index, as a hostile peer may, and rings the doorbell.
  void setCompletionRead(std::uint64_t index);
  std::uint16_t endpoint() const { return endpoint_; }
  // Later submissions go to the daemon's endpoint `name` (the first by default).
  void useEndpoint(const std::string& name) { endpoint_ = endpoints_.at(name); }
  // The versions the next connect()'s Hello claims (an older client's).
  void claimVersions(std::uint16_t control, std::uint32_t layout) {
    hello_control_version_ = control;
    hello_layout_version_ = layout;
  }
  // True while the daemon keeps the control connection open.
  bool connected() const;

 private:
  int fd_ = -1, doorbell_ = -1, bell_ = -1;
  std::optional<shm::Segment> segment_;
  std::optional<shm::CompletionConsumer> consumer_;
  std::vector<shm::SubmissionProducer> lanes_;
  std::uint32_t next_slot_ = 0;
  std::uint16_t endpoint_ = 0;
  std::map<std::string, std::uint16_t> endpoints_;
  std::uint16_t hello_control_version_ = shm::kControlVersion;
  std::uint32_t hello_layout_version_ = shm::kLayoutVersion;
  std::uint32_t seq_ = 1;
};

}  // namespace fairsched::testing
