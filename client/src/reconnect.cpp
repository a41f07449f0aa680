// ClientCore's control connection: the first session, tenants, reconnects,
// and what happens to outstanding requests when the daemon goes away.
#include <sys/epoll.h>
#include <sys/socket.h>

#include <algorithm>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "client_core.hpp"
#include "fairsched/name.hpp"

namespace fairsched::client_detail {

ClientCore::ClientCore(ClientOptions options, CompletionFds fds)
    : options_(std::move(options)),
      reconnect_delay_(options_.reconnect.initial_delay),
      router_(std::move(fds)) {}

ClientCore::~ClientCore() {
  if (birth_.inherited()) return;  // the parent's connection: it still uses it
  if (auto s = session_.load()) {
    ::shutdown(s->sock, SHUT_RDWR);
  }
}

void ClientCore::shutdown() {
  if (birth_.inherited()) return;
  closed_.store(true, std::memory_order_release);
  // As a loss: the daemon sees EOF, and every thread blocked on the socket,
  // the bell or completionFd() wakes up and finds closed_ set.
  if (std::shared_ptr<Session> s = current()) handleLoss(s);
  router_.signalNotify();
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
  if (std::optional<Error> e = unusable()) return *e;
  std::lock_guard lk(control_mu_);
  return reconnectLocked(true);
}

Result<void> ClientCore::reconnectLocked(bool force) {
  if (std::optional<Error> e = unusable()) return *e;
  std::shared_ptr<Session> cur = current();
  if (live(cur)) return {};
  if (cur) return notConnected();  // another thread is still tearing the old one down
  const auto now = Clock::now();
  if (!force && now < next_reconnect_) return notConnected();
  Result<std::shared_ptr<Session>> opened = openSessionLocked();
  if (opened) {
    std::shared_ptr<Session> s = std::move(opened).value();
    // Every tenant again, under its handle, in one pipelined batch.
    std::vector<TenantCall> calls;
    calls.reserve(tenants_.size());
    tenants_.forEach([&](std::uint32_t handle, const TenantRegistry::Entry& e) {
      calls.push_back(TenantCall{false, *e.name, tenants_.tierOf(e), handle, std::nullopt});
    });
    if (calls.size() > s->max_tenants) {
      opened = Error{ErrorCode::kNoCapacity, 0,
                     "the daemon now allows " + std::to_string(s->max_tenants) +
                         " tenants per connection; this client holds " +
                         std::to_string(calls.size()) + " open"};
    } else if (Result<void> r = s->tenantCalls(calls, next_seq_, options_.control_timeout); !r) {
      opened = std::move(r).error();
    } else {
      // A refusal leaves that tenant closed; submit() says kUnknownTenant.
      for (const TenantCall& c : calls) tenants_.setOpen(c.handle, !c.error.has_value());
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
  std::vector<std::pair<RequestId, Pending>> lost = pending_.takeGeneration(s->generation);
  std::unordered_map<RequestId, std::uint32_t> streamed;
  {
    std::lock_guard lk(s->consumer_mu);
    streamed.swap(s->streamed);
  }
  for (auto& [id, p] : lost) {
    Completion c;
    c.request_id = id;
    c.tag = p.tag;
    c.status = Status::kShuttingDown;
    c.local = true;
    // A stream ends with what reached this client of it.
    if (auto it = streamed.find(id); it != streamed.end()) c.output_tokens = it->second;
    bump(counters_.local_completions);
    deliver(c, p, nullptr);
  }
  std::shared_ptr<Session> expected = s;
  session_.compare_exchange_strong(expected, nullptr, std::memory_order_acq_rel);
  bump(counters_.connections_lost);
  router_.signalNotify();  // wakes epoll users even when nothing was outstanding
}

std::vector<Result<Tenant>> ClientCore::openTenants(std::span<const std::string_view> names,
                                                    std::optional<std::string_view> tier) {
  std::vector<Result<Tenant>> out(names.size(), Result<Tenant>(Tenant{}));
  if (std::optional<Error> e = unusable()) {
    for (auto& r : out) r = *e;
    return out;
  }
  // The daemon refuses a name that breaks the rule; say so before asking it.
  std::optional<Error> bad_tier;
  if (tier && !tier->empty()) {
    if (auto err = nameError(*tier))
      bad_tier = Error{ErrorCode::kInvalidArgument, 0, "tier " + *err};
  }
  std::lock_guard lk(control_mu_);
  std::shared_ptr<Session> s = current();
  if (!live(s)) {
    std::optional<Error> down;
    if (!options_.reconnect.enabled) {
      down = notConnected();
    } else if (Result<void> r = reconnectLocked(false); !r) {
      down = std::move(r).error();
    }
    if (down) {
      for (auto& r : out) r = *down;
      return out;
    }
    s = current();
  }
  std::vector<TenantCall> calls;
  std::vector<std::size_t> call_of;  // index into `names` of each call
  std::vector<bool> added;           // the call registered its tenant
  std::unordered_set<std::uint32_t> asked;
  for (std::size_t i = 0; i < names.size(); ++i) {
    const std::string_view name = names[i];
    if (auto err = nameError(name)) {
      out[i] = Error{ErrorCode::kInvalidArgument, 0, "tenant " + *err};
      continue;
    }
    if (bad_tier) {
      out[i] = *bad_tier;
      continue;
    }
    if (std::optional<std::uint32_t> h = tenants_.find(name)) {
      // Registered: open already, or refused on the last reconnect (ask again).
      if (tenants_.isOpen(*h)) {
        out[i] = Tenant{*h};
        continue;
      }
      const TenantRegistry::Entry* e = tenants_.entry(*h);
      if (asked.insert(*h).second) {  // the same name twice in one batch: one call
        calls.push_back(TenantCall{false, *e->name, tenants_.tierOf(*e), *h, std::nullopt});
        call_of.push_back(i);
        added.push_back(false);
      }
      out[i] = Tenant{*h};
      continue;
    }
    Result<std::uint32_t> h = tenants_.add(name, tier.value_or(""), s->max_tenants);
    if (!h) {
      out[i] = std::move(h).error();
      continue;
    }
    const TenantRegistry::Entry* e = tenants_.entry(*h);
    calls.push_back(TenantCall{false, *e->name, tenants_.tierOf(*e), *h, std::nullopt});
    call_of.push_back(i);
    added.push_back(true);
    asked.insert(*h);
    out[i] = Tenant{*h};
  }
  if (calls.empty()) return out;
  Result<void> sent = s->tenantCalls(calls, next_seq_, options_.control_timeout);
  if (!sent) {
    // Which of the pipelined opens the daemon took is unknown now: the
    // connection goes (the daemon lets go of all of them), and a reconnect
    // opens what is registered, under the same handles.
    const Error e = std::move(sent).error();
    handleLoss(s);
    for (std::size_t k = 0; k < calls.size(); ++k) {
      if (added[k]) tenants_.remove(calls[k].handle);
    }
    for (std::size_t k = 0; k < calls.size(); ++k) out[call_of[k]] = e;
    // A name given twice whose first call failed: the same error.
    for (std::size_t i = 0; i < names.size(); ++i) {
      if (out[i] && !tenants_.entry(out[i]->index)) out[i] = e;
    }
    return out;
  }
  for (std::size_t k = 0; k < calls.size(); ++k) {
    if (calls[k].error) {
      if (added[k]) tenants_.remove(calls[k].handle);
      out[call_of[k]] = *calls[k].error;
    } else {
      tenants_.setOpen(calls[k].handle, true);
    }
  }
  for (std::size_t i = 0; i < names.size(); ++i) {  // duplicates follow their first call
    if (out[i] && !tenants_.isOpen(out[i]->index)) {
      for (std::size_t k = 0; k < calls.size(); ++k) {
        if (calls[k].handle == out[i]->index && calls[k].error) out[i] = *calls[k].error;
      }
    }
  }
  return out;
}

std::vector<Result<void>> ClientCore::closeTenants(std::span<const Tenant> tenants) {
  std::vector<Result<void>> out(tenants.size());
  if (std::optional<Error> e = unusable()) {
    for (auto& r : out) r = *e;
    return out;
  }
  std::lock_guard lk(control_mu_);
  std::shared_ptr<Session> s = current();
  std::vector<TenantCall> calls;
  std::vector<std::size_t> call_of;
  std::unordered_set<std::uint32_t> seen;  // the same handle twice in one batch: closed once
  for (std::size_t i = 0; i < tenants.size(); ++i) {
    const std::uint32_t h = tenants[i].index;
    const TenantRegistry::Entry* e = tenants_.entry(h);
    if (e == nullptr || !seen.insert(h).second) {
      out[i] = Error{ErrorCode::kUnknownTenant, 0, "not a tenant this client holds open"};
      continue;
    }
    const bool was_open = tenants_.isOpen(h);
    // From here submit() refuses the handle; what it already wrote ends CANCELLED.
    tenants_.setOpen(h, false);
    if (live(s) && was_open) {
      calls.push_back(TenantCall{true, *e->name, {}, h, std::nullopt});
      call_of.push_back(i);
    } else {
      tenants_.remove(h);  // not open on this connection: only forgotten
    }
  }
  if (calls.empty()) return out;
  Result<void> sent = s->tenantCalls(calls, next_seq_, options_.control_timeout);
  // Lost, timed out or garbled: which closes the daemon took is unknown, so
  // the connection goes, and with it every tenant the daemon held for it;
  // these are closed either way.
  if (!sent) handleLoss(s);
  for (std::size_t k = 0; k < calls.size(); ++k) {
    if (sent && calls[k].error) {
      tenants_.setOpen(calls[k].handle, true);
      out[call_of[k]] = *calls[k].error;
    } else {
      tenants_.remove(calls[k].handle);
    }
  }
  return out;
}

}  // namespace fairsched::client_detail
