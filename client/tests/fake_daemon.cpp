#include "fake_daemon.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <stdexcept>
#include <variant>

#include "shm/doorbell.hpp"
#include "shm/segment.hpp"
#include "shm/shared_word.hpp"

namespace fairsched::testing {

std::uint64_t promptChecksum(std::span<const std::uint32_t> prompt) {
  std::uint64_t h = 1469598103934665603ULL;
  for (std::uint32_t t : prompt) {
    h ^= t;
    h *= 1099511628211ULL;
  }
  return h;
}

std::optional<shm::CompletionSlot> okCompletion(const shm::SubmissionSlot& slot,
                                                std::span<const std::uint32_t> prompt) {
  shm::CompletionSlot c;
  c.request_id = slot.request_id;
  c.tag = slot.tag;
  c.status = static_cast<std::uint32_t>(Status::kOk);
  c.output_tokens = slot.max_output_tokens;
  c.checksum = promptChecksum(prompt);
  c.queue_wait_ns = 1000;
  c.service_ns = 2000;
  return c;
}

std::optional<shm::CompletionSlot> holdAll(const shm::SubmissionSlot&,
                                           std::span<const std::uint32_t>) {
  return std::nullopt;
}

namespace {

template <class T>
T must(shm::Result<T> r, const char* what) {
  if (!r.ok()) {
    throw std::runtime_error(std::string(what) + ": " + r.error().toString());
  }
  return std::move(r).value();
}

}  // namespace

struct FakeDaemon::Conn {
  struct Held {
    shm::SubmissionSlot slot;
    std::vector<std::uint32_t> prompt;
  };
  shm::UniqueFd sock;
  bool close_after_reply = false;
  std::optional<shm::Segment> segment;
  std::optional<shm::EventFd> doorbell;
  std::optional<shm::EventFd> bell;
  std::vector<std::optional<shm::SubmissionConsumer>> consumers;
  std::optional<shm::CompletionProducer> producer;
  std::map<std::uint32_t, std::string> handles;  // open tenant handles → names
  std::deque<shm::CompletionSlot> outbox;
  std::vector<Held> held;
};

FakeDaemon::FakeDaemon(FakeDaemonOptions options) : options_(std::move(options)) {
  if (options_.socket_path.empty()) {
    char tmpl[] = "/tmp/fairsched-client-test-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp");
    dir_ = tmpl;
    path_ = dir_ + "/fairsched.sock";
  } else {
    path_ = options_.socket_path;
  }
  listen_.reset(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path_.c_str(), sizeof(addr.sun_path) - 1);
  ::unlink(path_.c_str());
  if (::bind(listen_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(listen_.get(), 16) != 0) {
    throw std::runtime_error("bind/listen " + path_ + ": " + std::strerror(errno));
  }
  wake_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
}

FakeDaemon::~FakeDaemon() {
  stop();
  listen_.reset();
  ::unlink(path_.c_str());
  if (!dir_.empty()) ::rmdir(dir_.c_str());
}

void FakeDaemon::start() {
  thread_ = std::thread([this] { loop(); });
}

void FakeDaemon::serve() {
  loop();
}

void FakeDaemon::stop() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  wake();
  if (thread_.joinable()) thread_.join();
  std::lock_guard lk(mu_);
  conns_.clear();
}

void FakeDaemon::wake() {
  const std::uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_.get(), &one, sizeof(one));
}

void FakeDaemon::setResponder(Responder responder) {
  {
    std::lock_guard lk(mu_);
    responder_ = std::move(responder);
  }
  wake();
}

void FakeDaemon::setPaused(bool paused) {
  {
    std::lock_guard lk(mu_);
    paused_ = paused;
  }
  wake();
}

void FakeDaemon::dropClients() {
  {
    std::lock_guard lk(mu_);
    conns_.clear();
  }
  wake();
}

std::size_t FakeDaemon::releaseHeld(const Responder& responder) {
  std::size_t n = 0;
  {
    std::lock_guard lk(mu_);
    for (auto& c : conns_) {
      for (Conn::Held& h : c->held) {
        if (auto done = responder(h.slot, h.prompt)) c->outbox.push_back(*done);
        ++n;
      }
      c->held.clear();
    }
  }
  wake();
  return n;
}

std::size_t FakeDaemon::hellos() const {
  std::lock_guard lk(mu_);
  return hellos_;
}
std::size_t FakeDaemon::connections() const {
  std::lock_guard lk(mu_);
  return conns_.size();
}
std::size_t FakeDaemon::submissions() const {
  std::lock_guard lk(mu_);
  return submissions_;
}
std::size_t FakeDaemon::held() const {
  std::lock_guard lk(mu_);
  std::size_t n = 0;
  for (const auto& c : conns_) n += c->held.size();
  return n;
}
std::size_t FakeDaemon::doorbellWakes() const {
  std::lock_guard lk(mu_);
  return doorbell_wakes_;
}
std::size_t FakeDaemon::bellWrites() const {
  std::lock_guard lk(mu_);
  return bell_writes_;
}
std::vector<std::pair<std::string, std::string>> FakeDaemon::tenantsOpened() const {
  std::lock_guard lk(mu_);
  return tenants_opened_;
}

bool FakeDaemon::daemonSleeping() const {
  std::lock_guard lk(mu_);
  if (conns_.empty() || !conns_.back()->segment) return false;
  return (shm::sharedLoad(conns_.back()->segment->completionRing().control->daemon_sleeping,
                          std::memory_order_relaxed) &
          1u) != 0;  // odd: asleep (doorbell.hpp's epochs)
}

bool FakeDaemon::clientSleeping() const {
  std::lock_guard lk(mu_);
  if (conns_.empty() || !conns_.back()->segment) return false;
  return conns_.back()->segment->peerSleepFlag().sleepingAfterFence();  // odd: asleep
}

std::uint64_t FakeDaemon::takeDoorbellCount() {
  std::lock_guard lk(mu_);
  if (conns_.empty() || !conns_.back()->doorbell) return 0;
  return conns_.back()->doorbell->drain();
}

bool FakeDaemon::waitFor(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (pred()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::unique_lock lk(mu_);
    progress_.wait_for(lk, std::chrono::milliseconds(1));
  }
}

bool FakeDaemon::acceptNew() {
  bool any = false;
  for (;;) {
    const int fd = ::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return any;
    auto c = std::make_unique<Conn>();
    c->sock.reset(fd);
    conns_.push_back(std::move(c));
    any = true;
  }
}

template <class M>
static M replyTo(const shm::MessageHeader& h, std::uint16_t version) {
  M m = shm::makeMessage<M>(h.seq);
  m.header.version = version;
  return m;
}

void FakeDaemon::handleHello(Conn& c, const shm::HelloMessage& m) {
  ++hellos_;
  auto reply = replyTo<shm::HelloReplyMessage>(m.header, options_.reply_version);
  shm::ControlStatus status = options_.hello_status;
  if (status == shm::ControlStatus::kOk && m.layout_version != shm::kLayoutVersion) {
    status = shm::ControlStatus::kVersionMismatch;
  }
  reply.status = static_cast<std::uint32_t>(status);
  shm::setString(reply.message, options_.hello_message);
  if (status != shm::ControlStatus::kOk) {
    ::send(c.sock.get(), &reply, sizeof(reply), MSG_NOSIGNAL);
    c.close_after_reply = true;
    return;
  }
  c.segment.emplace(must(shm::Segment::create(options_.geometry), "Segment::create"));
  c.doorbell.emplace(must(shm::EventFd::create(), "doorbell"));
  c.bell.emplace(must(shm::EventFd::create(), "bell"));
  for (std::uint32_t r = 0; r < options_.geometry.ring_count; ++r) {
    c.consumers.emplace_back(std::in_place, c.segment->submissionRing(r), 0);
  }
  c.producer.emplace(c.segment->completionRing(), 0);
  reply.client_id = options_.client_id;
  reply.ring_count = options_.geometry.ring_count;
  reply.max_tenants = options_.max_tenants;
  reply.endpoint_count = static_cast<std::uint32_t>(options_.endpoints.size());
  for (std::size_t i = 0; i < options_.endpoints.size(); ++i) {
    shm::setString(reply.endpoints[i].name, options_.endpoints[i].name);
    reply.endpoints[i].id = options_.endpoints[i].id;
    reply.endpoints[i].max_output_tokens = options_.endpoints[i].max_output_tokens;
    reply.endpoints[i].max_batch_tokens = options_.endpoints[i].max_batch_tokens;
  }
  int fds[shm::kHelloReplyFds];
  fds[shm::kFdSegment] = c.segment->fd();
  fds[shm::kFdDaemonDoorbell] = c.doorbell->fd();
  fds[shm::kFdCompletionBell] = c.bell->fd();
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(fds))] = {};
  iovec iov{&reply, sizeof(reply)};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  cmsghdr* cm = CMSG_FIRSTHDR(&msg);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(fds));
  std::memcpy(CMSG_DATA(cm), fds, sizeof(fds));
  if (::sendmsg(c.sock.get(), &msg, MSG_NOSIGNAL) < 0) {
    c.close_after_reply = true;
    return;
  }
  c.segment->closeFd();
}

void FakeDaemon::handleOpenTenant(Conn& c, const shm::OpenTenantMessage& m) {
  if (!options_.answer_tenants) return;
  auto reply = replyTo<shm::OpenTenantReplyMessage>(m.header, options_.reply_version);
  const std::string tenant(*shm::getString(m.tenant));
  const std::string tier(*shm::getString(m.tier));
  if (!c.segment) {
    reply.status = static_cast<std::uint32_t>(shm::ControlStatus::kBadRequest);
    shm::setString(reply.message, "Hello first");
  } else if (options_.refused_tenants.count(tenant) != 0) {
    reply.status = static_cast<std::uint32_t>(shm::ControlStatus::kUnauthorized);
    shm::setString(reply.message, "tenant '" + tenant + "' is not allowed for this client");
  } else if (c.handles.count(m.handle) != 0) {
    reply.status = static_cast<std::uint32_t>(shm::ControlStatus::kBadRequest);
    shm::setString(reply.message, "handle already open");
  } else if (c.handles.size() >= options_.max_tenants) {
    reply.status = static_cast<std::uint32_t>(shm::ControlStatus::kNoCapacity);
    shm::setString(reply.message, "no more tenants on this connection");
  } else {
    c.handles[m.handle] = tenant;
    reply.handle = m.handle;
    tenants_opened_.emplace_back(tenant, tier);
  }
  ::send(c.sock.get(), &reply, sizeof(reply), MSG_NOSIGNAL);
}

void FakeDaemon::handleCloseTenant(Conn& c, const shm::CloseTenantMessage& m) {
  auto reply = replyTo<shm::CloseTenantReplyMessage>(m.header, options_.reply_version);
  if (c.handles.erase(m.handle) == 0) {
    reply.status = static_cast<std::uint32_t>(shm::ControlStatus::kBadRequest);
    shm::setString(reply.message, "not open");
  }
  ::send(c.sock.get(), &reply, sizeof(reply), MSG_NOSIGNAL);
}

// False when the connection is gone.
bool FakeDaemon::readControl(Conn& c) {
  for (;;) {
    alignas(8) std::byte buf[4096];
    const ssize_t n = ::recv(c.sock.get(), buf, sizeof(buf), MSG_DONTWAIT);
    if (n == 0) return false;
    if (n < 0) return errno == EAGAIN || errno == EINTR;
    const std::span<const std::byte> bytes(buf, static_cast<std::size_t>(n));
    shm::MessageHeader h;
    if (shm::peekHeader(bytes, h) != shm::DecodeError::kNone) return false;
    if (h.type == static_cast<std::uint16_t>(shm::MessageType::kHello)) {
      shm::HelloMessage m;
      if (shm::decode(bytes, m) != shm::DecodeError::kNone) return false;
      handleHello(c, m);
    } else if (h.type == static_cast<std::uint16_t>(shm::MessageType::kOpenTenant)) {
      shm::OpenTenantMessage m;
      if (shm::decode(bytes, m) != shm::DecodeError::kNone) return false;
      handleOpenTenant(c, m);
    } else if (h.type == static_cast<std::uint16_t>(shm::MessageType::kCloseTenant)) {
      shm::CloseTenantMessage m;
      if (shm::decode(bytes, m) != shm::DecodeError::kNone) return false;
      handleCloseTenant(c, m);
    } else {
      return false;
    }
  }
}

bool FakeDaemon::drainRings(Conn& c) {
  if (!c.segment || paused_) return false;
  bool any = false;
  c.segment->readyBitmap().takeEach([&](std::uint32_t ring) {
    if (ring >= c.consumers.size() || !c.consumers[ring]) return;
    c.consumers[ring]->drain(
        SIZE_MAX, [&](const shm::SubmissionSlot& slot, std::span<const std::uint32_t> prompt) {
          ++submissions_;
          any = true;
          if (auto done = responder_(slot, prompt)) {
            c.outbox.push_back(*done);
          } else {
            c.held.push_back(Conn::Held{slot, {prompt.begin(), prompt.end()}});
          }
        });
  });
  return any;
}

bool FakeDaemon::flush(Conn& c) {
  if (!c.producer || c.outbox.empty()) return false;
  std::vector<shm::CompletionSlot> batch(c.outbox.begin(), c.outbox.end());
  const std::size_t n = c.producer->tryPushBatch(batch);
  c.outbox.erase(c.outbox.begin(), c.outbox.begin() + static_cast<std::ptrdiff_t>(n));
  if (n > 0 && c.segment->peerSleepFlag().sleeping()) {
    c.bell->signal();
    ++bell_writes_;
  }
  return n > 0;
}

void FakeDaemon::loop() {
  std::unique_lock lk(mu_);
  while (!stop_) {
    bool work = acceptNew();
    for (auto it = conns_.begin(); it != conns_.end();) {
      Conn& c = **it;
      if (!readControl(c) || c.close_after_reply) {
        it = conns_.erase(it);
        work = true;
        continue;
      }
      work |= drainRings(c);
      work |= flush(c);
      ++it;
    }
    progress_.notify_all();
    if (work) continue;

    bool backlog = false;
    for (auto& c : conns_) backlog |= !c->outbox.empty();
    const bool sleep = options_.sleep_when_idle;
    if (sleep) {
      for (auto& c : conns_) {
        if (c->segment) c->segment->ownSleepFlag().announceSleep();
      }
      bool ready = false;
      for (auto& c : conns_) {
        if (c->segment && !paused_) ready |= c->segment->readyBitmap().anySet();
      }
      if (ready) {
        for (auto& c : conns_) {
          if (c->segment) c->segment->ownSleepFlag().clear();
        }
        continue;
      }
    }
    std::vector<pollfd> fds;
    fds.push_back({listen_.get(), POLLIN, 0});
    fds.push_back({wake_.get(), POLLIN, 0});
    for (auto& c : conns_) {
      fds.push_back({c->sock.get(), POLLIN, 0});
      if (sleep && c->doorbell) fds.push_back({c->doorbell->fd(), POLLIN, 0});
    }
    const int timeout_ms = (!sleep || backlog) ? 1 : -1;
    lk.unlock();
    ::poll(fds.data(), fds.size(), timeout_ms);
    lk.lock();
    std::uint64_t drained = 0;
    [[maybe_unused]] ssize_t r = ::read(wake_.get(), &drained, sizeof(drained));
    for (auto& c : conns_) {
      if (!c->segment) continue;
      if (sleep) {
        c->segment->ownSleepFlag().clear();
        if (c->doorbell->drain() != 0) ++doorbell_wakes_;
      }
    }
  }
  progress_.notify_all();
}

}  // namespace fairsched::testing
