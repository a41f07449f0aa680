#include "tests/support/raw_client.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "shm/shared_word.hpp"
#include "shm/tenant_handle.hpp"
#include "shm/worker_protocol.hpp"

namespace fairsched::testing {
namespace {

// Copies `s` byte for byte into a fixed field, NUL-terminated, truncating;
// unlike shm::setString nothing is checked: the test decides what is sent.
template <std::size_t N>
void setRaw(char (&field)[N], const std::string& s) {
  const std::size_t n = std::min(s.size(), N - 1);
  std::memcpy(field, s.data(), n);
  field[n] = '\0';
}

}  // namespace

RawClient::~RawClient() {
  for (int fd : {fd_, doorbell_, bell_}) {
    if (fd >= 0) close(fd);
  }
}

shm::ControlStatus RawClient::connect(const std::string& path, std::string* why,
                                      const std::string& client_name,
                                      const std::string& worker_endpoint) {
  fd_ = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    return shm::ControlStatus::kInternal;
  }
  auto hello = shm::makeMessage<shm::HelloMessage>(seq_++);
  hello.header.version = hello_control_version_;
  hello.layout_version = hello_layout_version_;
  setRaw(hello.client_name, client_name);
  if (!worker_endpoint.empty()) {
    hello.role = static_cast<std::uint32_t>(shm::PeerRole::kWorker);
    setRaw(hello.endpoint, worker_endpoint);
  }
  if (send(fd_, &hello, sizeof hello, 0) != static_cast<ssize_t>(sizeof hello)) {
    return shm::ControlStatus::kInternal;
  }
  shm::HelloReplyMessage reply;
  int fds[shm::kHelloReplyFds] = {-1, -1, -1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof fds)] = {};
  iovec iov{&reply, sizeof reply};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  const ssize_t n = recvmsg(fd_, &msg, MSG_CMSG_CLOEXEC);
  if (n <= 0) return shm::ControlStatus::kInternal;
  if (shm::decode(
          std::span(reinterpret_cast<const std::byte*>(&reply), static_cast<std::size_t>(n)), reply,
          shm::kOldestControlVersion) != shm::DecodeError::kNone) {
    return shm::ControlStatus::kInternal;
  }
  if (why) *why = std::string(*shm::getString(reply.message));
  const auto status = static_cast<shm::ControlStatus>(reply.status);
  if (status != shm::ControlStatus::kOk) return status;
  cmsghdr* cm = CMSG_FIRSTHDR(&msg);
  if (cm == nullptr) return shm::ControlStatus::kInternal;
  std::memcpy(fds, CMSG_DATA(cm), sizeof fds);
  auto seg = shm::Segment::attach(fds[shm::kFdSegment]);
  close(fds[shm::kFdSegment]);
  doorbell_ = fds[shm::kFdDaemonDoorbell];
  bell_ = fds[shm::kFdCompletionBell];
  if (!seg.ok()) return shm::ControlStatus::kInternal;
  segment_.emplace(std::move(seg).value());
  consumer_.emplace(segment_->completionRing());
  for (std::uint32_t r = 0; r < segment_->layout().geometry.ring_count; ++r) {
    lanes_.emplace_back(segment_->submissionRing(r));
  }
  endpoint_ = reply.endpoints[0].id;
  for (std::uint32_t i = 0; i < reply.endpoint_count; ++i) {
    endpoints_[std::string(*shm::getString(reply.endpoints[i].name))] = reply.endpoints[i].id;
  }
  return status;
}

std::pair<shm::ControlStatus, std::uint32_t> RawClient::open(const std::string& tenant,
                                                             std::string* why,
                                                             const std::string& tier,
                                                             std::uint32_t handle) {
  auto m = shm::makeMessage<shm::OpenTenantMessage>(seq_++);
  setRaw(m.tenant, tenant);
  setRaw(m.tier, tier);
  m.handle = handle != 0 ? handle : shm::makeTenantHandle(next_slot_++, 1);
  if (send(fd_, &m, sizeof m, 0) != static_cast<ssize_t>(sizeof m)) {
    return {shm::ControlStatus::kInternal, 0};
  }
  shm::OpenTenantReplyMessage reply{};
  const ssize_t n = recv(fd_, &reply, sizeof reply, 0);
  if (n != static_cast<ssize_t>(sizeof reply)) return {shm::ControlStatus::kInternal, 0};
  if (why) *why = std::string(*shm::getString(reply.message));
  return {static_cast<shm::ControlStatus>(reply.status), m.handle};
}

std::pair<shm::ControlStatus, std::uint32_t> RawClient::close(std::uint32_t handle,
                                                              std::string* why) {
  auto m = shm::makeMessage<shm::CloseTenantMessage>(seq_++);
  m.handle = handle;
  if (send(fd_, &m, sizeof m, 0) != static_cast<ssize_t>(sizeof m)) {
    return {shm::ControlStatus::kInternal, 0};
  }
  shm::CloseTenantReplyMessage reply{};
  const ssize_t n = recv(fd_, &reply, sizeof reply, 0);
  if (n != static_cast<ssize_t>(sizeof reply)) return {shm::ControlStatus::kInternal, 0};
  if (why) *why = std::string(*shm::getString(reply.message));
  return {static_cast<shm::ControlStatus>(reply.status), reply.cancelled};
}

bool RawClient::submit(std::uint32_t handle, std::uint64_t id,
                       const std::vector<std::uint32_t>& prompt, std::uint32_t max_out,
                       std::int64_t deadline_ns, std::uint32_t lane) {
  shm::SubmissionSlot s;
  s.request_id = id;
  s.tag = id * 3;
  s.endpoint = endpoint_;
  s.max_output_tokens = max_out;
  s.deadline_ns = deadline_ns;
  s.tenant = handle;
  if (lanes_.at(lane).tryPushPrompt(s, prompt) != shm::PushResult::kOk) return false;
  if (segment_->peerSleepFlag().sleeping()) {
    const std::uint64_t one = 1;
    [[maybe_unused]] const ssize_t w = write(doorbell_, &one, sizeof one);
  }
  return true;
}

bool RawClient::submitWhenRoom(std::uint32_t handle, std::uint64_t id,
                               const std::vector<std::uint32_t>& prompt, std::uint32_t max_out,
                               std::uint32_t lane) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!submit(handle, id, prompt, max_out, 0, lane)) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return true;
}

std::vector<shm::CompletionSlot> RawClient::collect(std::size_t count) {
  std::vector<shm::CompletionSlot> out;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (out.size() < count && std::chrono::steady_clock::now() < until) {
    shm::CompletionSlot s;
    if (consumer_->tryPop(s)) {
      out.push_back(s);
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  return out;
}

void RawClient::scribble(std::mt19937_64& rng) {
  auto* words = reinterpret_cast<std::uint64_t*>(segment_->writablePart());
  const std::size_t n = segment_->layout().writable_size / sizeof(std::uint64_t);
  for (int i = 0; i < 4096; ++i) {
    shm::sharedStore(words[rng() % n], static_cast<std::uint64_t>(rng()),
                     std::memory_order_relaxed);
  }
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t w = write(doorbell_, &one, sizeof one);
}

void RawClient::setCompletionRead(std::uint64_t index) {
  shm::sharedStore(segment_->completionRing().client->completion_read, index,
                   std::memory_order_release);
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t w = write(doorbell_, &one, sizeof one);
}

bool RawClient::connected() const {
  pollfd p{fd_, POLLIN, 0};
  if (::poll(&p, 1, 0) < 0) return false;
  if (p.revents & (POLLHUP | POLLERR)) return false;
  if (p.revents & POLLIN) {  // readable with no message pending means closed
    char b;
    return recv(fd_, &b, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
  }
  return true;
}

}  // namespace fairsched::testing
