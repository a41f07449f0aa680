// ClientCore's control connection: the first session, tenants, reconnects,
// and what happens to outstanding requests when the daemon goes away.
#include <sys/epoll.h>
#include <sys/socket.h>

#include <algorithm>
#include <string>
#include <utility>

#include "client_core.hpp"
#include "fairsched/name.hpp"

namespace fairsched::client_detail {

ClientCore::ClientCore(ClientOptions options, CompletionFds fds)
    : options_(std::move(options)),
      reconnect_delay_(options_.reconnect.initial_delay),
      router_(std::move(fds)) {}

ClientCore::~ClientCore() {
  if (auto s = session_.load()) {
    ::shutdown(s->sock, SHUT_RDWR);
  }
}

Result<std::unique_ptr<ClientCore>> ClientCore::connect(ClientOptions options) {
  if (!options.client_name.empty()) {
    if (auto err = nameError(options.client_name)) {
      return Error{ErrorCode::kInvalidArgument, 0, "client " + *err};
    }
  }
  if (options.spin.count() < 0) options.spin = std::chrono::nanoseconds(0);
  Result<CompletionFds> fds = openCompletionFds();
  if (!fds) return std::move(fds).error();
  std::unique_ptr<ClientCore> core(new ClientCore(std::move(options), std::move(fds).value()));
  {
    std::lock_guard lk(core->control_mu_);
    Result<std::shared_ptr<Session>> s = core->openSessionLocked();
    if (!s) return std::move(s).error();
    core->install(*s);
  }
  return core;
}

Result<std::shared_ptr<Session>> ClientCore::openSessionLocked() {
  return Session::open(options_, next_generation_++, next_seq_++);
}

void ClientCore::install(const std::shared_ptr<Session>& s) {
  if (fd_mode_.load(std::memory_order_acquire)) s->arm();
  router_.watchSession(s->bell.fd(), s->sock);
  session_.store(s, std::memory_order_release);
}

Result<void> ClientCore::reconnect() {
  std::lock_guard lk(control_mu_);
  return reconnectLocked(true);
}

Result<void> ClientCore::reconnectLocked(bool force) {
  std::shared_ptr<Session> cur = current();
  if (live(cur)) return {};
  if (cur) return notConnected();  // another thread is still tearing the old one down
  const auto now = Clock::now();
  if (!force && now < next_reconnect_) return notConnected();
  Result<std::shared_ptr<Session>> opened = openSessionLocked();
  if (opened) {
    std::shared_ptr<Session> s = std::move(opened).value();
    for (std::uint32_t i = 0; i < tenants_.size(); ++i) {
      Result<std::uint32_t> ring =
          s->openTenant(tenants_[i].name, tenants_[i].tier, next_seq_++, options_.control_timeout);
      if (ring) {
        s->tenant_ring[i].store(static_cast<std::int32_t>(*ring), std::memory_order_relaxed);
      } else if (ring.code() == ErrorCode::kDaemonLost || ring.code() == ErrorCode::kTimedOut) {
        opened = std::move(ring).error();
        break;
      }
      // Other refusals leave this tenant closed; submit() says kUnknownTenant.
    }
    if (opened) {
      install(s);
      reconnect_delay_ = options_.reconnect.initial_delay;
      next_reconnect_ = Clock::time_point::min();
      bump(counters_.reconnects);
      return {};
    }
  }
  next_reconnect_ = now + reconnect_delay_;
  reconnect_delay_ = std::min(reconnect_delay_ * 2, options_.reconnect.max_delay);
  return std::move(opened).error();
}

bool ClientCore::tryReconnect() {
  if (!options_.reconnect.enabled) return false;
  std::unique_lock lk(control_mu_, std::try_to_lock);
  if (!lk.owns_lock()) return false;
  return reconnectLocked(false).ok();
}

bool ClientCore::probe(const std::shared_ptr<Session>& s) {
  std::unique_lock lk(control_mu_, std::try_to_lock);
  if (!lk.owns_lock()) return true;
  if (!s->alive.load(std::memory_order_acquire)) return false;
  return socketAlive(s->sock);
}

void ClientCore::handleLoss(const std::shared_ptr<Session>& s) {
  if (!s->alive.exchange(false, std::memory_order_acq_rel)) return;
  loss_epoch_.fetch_add(1, std::memory_order_acq_rel);
  // Makes the daemon see EOF (it cancels what it holds) and wakes any
  // thread blocked on this socket; the descriptor stays open while the
  // Session is referenced, so no other thread reads a reused number.
  ::shutdown(s->sock, SHUT_RDWR);
  router_.unwatchSession(s->bell.fd(), s->sock);
  drainRing(*s);
  // A submit() that inserts after this scan sees alive == false afterwards
  // (two seq_cst fences order it: pending_table.hpp) and withdraws its
  // request itself.
  for (auto& [id, p] : pending_.takeGeneration(s->generation)) {
    Completion c;
    c.request_id = id;
    c.tag = p.tag;
    c.status = Status::kShuttingDown;
    c.local = true;
    bump(counters_.local_completions);
    deliver(c, p, nullptr);
  }
  std::shared_ptr<Session> expected = s;
  session_.compare_exchange_strong(expected, nullptr, std::memory_order_acq_rel);
  bump(counters_.connections_lost);
  router_.signalNotify();  // wakes epoll users even when nothing was outstanding
}

Result<Tenant> ClientCore::openTenant(std::string_view name, std::optional<std::string_view> tier) {
  // The daemon refuses a name that breaks the rule; say so before asking it.
  if (auto err = nameError(name)) return Error{ErrorCode::kInvalidArgument, 0, "tenant " + *err};
  if (tier && !tier->empty()) {
    if (auto err = nameError(*tier)) return Error{ErrorCode::kInvalidArgument, 0, "tier " + *err};
  }
  std::lock_guard lk(control_mu_);
  std::optional<std::uint32_t> index;
  for (std::uint32_t i = 0; i < tenants_.size(); ++i) {
    if (tenants_[i].name == name) index = i;
  }
  std::shared_ptr<Session> s = current();
  if (!live(s)) {
    if (!options_.reconnect.enabled) return notConnected();
    if (Result<void> r = reconnectLocked(false); !r) return std::move(r).error();
    s = current();
  }
  if (index && s->tenant_ring[*index].load(std::memory_order_relaxed) >= 0) {
    return Tenant{*index};
  }
  if (!index && tenants_.size() >= kMaxTenants) {
    return Error{ErrorCode::kNoCapacity, 0, "this client has opened the most tenants it can"};
  }
  const std::string tier_name = index ? tenants_[*index].tier : std::string(tier.value_or(""));
  Result<std::uint32_t> ring =
      s->openTenant(name, tier_name, next_seq_++, options_.control_timeout);
  if (!ring) {
    if (ring.code() == ErrorCode::kDaemonLost) handleLoss(s);
    return std::move(ring).error();
  }
  for (std::uint32_t i = 0; i < kMaxTenants; ++i) {
    if (s->tenant_ring[i].load(std::memory_order_relaxed) == static_cast<std::int32_t>(*ring) &&
        (!index || i != *index)) {
      return Error{ErrorCode::kProtocol, 0,
                   "the daemon gave tenant '" + std::string(name) + "' ring " +
                       std::to_string(*ring) + ", which serves another tenant"};
    }
  }
  if (!index) {
    index = static_cast<std::uint32_t>(tenants_.size());
    tenants_.push_back(TenantEntry{std::string(name), tier_name});
    tenant_count_.store(static_cast<std::uint32_t>(tenants_.size()), std::memory_order_release);
  }
  s->tenant_ring[*index].store(static_cast<std::int32_t>(*ring), std::memory_order_release);
  return Tenant{*index};
}

}  // namespace fairsched::client_detail
