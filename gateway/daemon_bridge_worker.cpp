// DaemonBridge (daemon_bridge.hpp), each replica's worker of the endpoint:
// attaching, the capacity it states, its assignments and aborts, the end of
// each assignment (and the tokens reported before it), a lost connection,
// and detaching once a removed replica has drained.
#include "gateway/daemon_bridge.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <span>
#include <string_view>
#include <vector>

#include "fairsched/name.hpp"
#include "gateway/daemon_bridge_internal.hpp"
#include "gateway/upstream_call.hpp"

namespace fairsched::gateway {

bool DaemonBridge::connectWorker(Replica& r, bool first) {
  WorkerOptions wo;
  wo.socket_path = cfg_.socket;
  wo.endpoint = cfg_.endpoint;
  wo.worker_name = cfg_.upstreams.size() == 1 && replicas_.size() == 1
                       ? cfg_.name
                       : (cfg_.name + "/" + r.cfg.name).substr(0, kMaxNameBytes);
  wo.connect_timeout = std::chrono::seconds(2);
  auto w = Worker::connect(wo);
  if (!w) {
    if (first) {
      spdlog::error("cannot attach as the worker of endpoint '{}' for upstream {}: {}",
                    cfg_.endpoint, r.cfg.name, w.error().toString());
    }
    return false;
  }
  r.worker.emplace(std::move(*w));
  r.stated.reset();
  stateCapacity(r, !anyUsable());
  spdlog::info(
      "attached as worker {} of endpoint '{}' for upstream {} ({}: {} sequences, {} tokens)",
      r.worker->workerId(), cfg_.endpoint, r.cfg.name, r.cfg.url, r.cfg.max_sequences,
      r.cfg.max_tokens);
  return true;
}

bool DaemonBridge::anyUsable() const {
  const TimeNs now = env_.now();
  return std::any_of(replicas_.begin(), replicas_.end(),
                     [&](const auto& r) { return !r->removed && r->health.usable(now); });
}

void DaemonBridge::stateCapacity() {
  const bool panic = !anyUsable();
  for (const auto& r : replicas_) stateCapacity(*r, panic);
}

void DaemonBridge::stateCapacity(Replica& r, bool panic) {
  if (!r.worker) return;
  // Ejected (unless every replica is) or removed: no new work.
  const bool open = !r.removed && (panic || r.health.usable(env_.now()));
  const std::uint32_t max_seqs = open ? r.maxSequences() : 0;
  const std::uint64_t max_kv = open ? r.cfg.max_tokens : 0;
  const std::uint32_t seqs = r.running >= max_seqs ? 0 : max_seqs - r.running;
  const std::uint64_t kv = r.reserved >= max_kv ? 0 : max_kv - r.reserved;
  const std::pair<std::uint32_t, std::uint64_t> now{seqs, kv};
  if (r.stated == now) return;
  spdlog::debug("upstream {}: capacity {} sequences, {} tokens", r.cfg.name, seqs, kv);
  if (r.worker->setCapacity(seqs, kv)) r.stated = now;
}

void DaemonBridge::release(Replica& r, std::uint64_t kv) {
  r.running -= std::min<std::uint32_t>(r.running, 1);
  r.reserved -= std::min(r.reserved, kv);
}

void DaemonBridge::workerLost(Replica& r) {
  spdlog::error("the worker connection of upstream {} to fairschedd was lost; reconnecting",
                r.cfg.name);
  r.worker.reset();
  r.worker_fd.reset();
  // The daemon has ended or requeued what this worker ran.
  for (auto it = by_assignment_.begin(); it != by_assignment_.end();) {
    Assigned& a = it->second;
    if (a.replica.get() != &r) {
      ++it;
      continue;
    }
    if (a.via.get() != &r) release(*a.via, a.kv);
    atHome(a.ex, [](Exchange& e) {
      e.worker_finished = true;
      e.aborted = true;
      if (e.upstream != nullptr) e.upstream->close();
      e.notify();
    });
    it = by_assignment_.erase(it);
  }
  r.running = 0;
  r.reserved = 0;
  stateCapacity();
}

void DaemonBridge::detachIfDrained(Replica& r) {
  if (!r.removed || r.running > 0 || r.detached) return;
  spdlog::info("upstream {} drained; its worker detaches", r.cfg.name);
  r.detached = true;
  r.worker.reset();  // the daemon drops the worker connection; nothing ran on it
  for (const auto& x : replicas_) {
    if (x.get() != &r) continue;
    asio::post(io_, [x] {  // its loops, on the bridge's thread, end
      if (x->worker_fd) x->worker_fd->cancel();
      x->kick.cancel();
      x->scrape.cancel();
    });
  }
  std::erase_if(replicas_, [&](const auto& x) { return x.get() == &r; });
}

awaitable<void> DaemonBridge::workerLoop(std::shared_ptr<Replica> r) {
  SteadyTimer t(io_);
  std::vector<WorkItem> items;
  error_code ec;
  for (;;) {
    enum class Next { kReturn, kRetryLater, kAgain, kBlock };
    Next next = Next::kBlock;
    {
      const std::lock_guard lock(mu_);
      if (stopping_ || r->detached) {
        next = Next::kReturn;
      } else if (!r->worker && r->removed) {
        detachIfDrained(*r);
        next = Next::kAgain;
      } else if (!r->worker && !connectWorker(*r, false)) {
        next = Next::kRetryLater;
      } else {
        if (!r->worker_fd) r->worker_fd.emplace(io_, ::dup(r->worker->eventFd()));
        items.clear();
        r->worker->poll(items, 256);
        for (WorkItem& item : items) onWorkItem(r, item);
        // The daemon counts the room stated from the assignments taken when
        // it was stated: having taken some, the same figures must be stated
        // again (assignments that ended within this batch left them
        // unchanged).
        if (!items.empty()) r->stated.reset();
        stateCapacity(*r, !anyUsable());
        if (!items.empty()) {
          next = Next::kAgain;
        } else if (auto ready = r->worker->prepareToBlock(); !ready) {
          workerLost(*r);
          next = Next::kAgain;
        } else if (!*ready) {
          next = Next::kAgain;
        }
      }
    }
    if (next == Next::kReturn) co_return;
    if (next == Next::kAgain) continue;
    if (next == Next::kRetryLater) {
      t.expires_after(milliseconds(500));
      co_await t.async_wait(asio::redirect_error(use_awaitable, ec));
      continue;
    }
    co_await r->worker_fd->async_wait(asio::posix::descriptor_base::wait_read,
                                      asio::redirect_error(use_awaitable, ec));
    const std::lock_guard lock(mu_);
    if (r->worker && !r->worker->connected()) workerLost(*r);
  }
}

void DaemonBridge::onWorkItem(const std::shared_ptr<Replica>& r, WorkItem& item) {
  // An upstream's stream cannot be given back and resumed: PREEMPT is
  // ignored (the daemon stops asking this worker after a second).
  if (item.kind == WorkItem::Kind::kPreempt) return;
  if (item.kind == WorkItem::Kind::kAbort) {
    const auto it = by_assignment_.find(item.id);
    if (it == by_assignment_.end()) return;  // already finished
    atHome(it->second.ex, [](Exchange& e) {
      e.aborted = true;
      if (e.upstream != nullptr) e.upstream->close();
      e.notify();
    });
    return;
  }
  Assignment& a = item.assignment;
  r->running += 1;
  r->reserved += std::uint64_t{a.prompt_tokens} + a.max_output_tokens;
  std::shared_ptr<Exchange> ex;
  const std::string_view params(reinterpret_cast<const char*>(a.params.data()), a.params.size());
  if (params.starts_with(instance_)) {
    const std::uint64_t serial =
        std::strtoull(std::string(params.substr(instance_.size())).c_str(), nullptr, 10);
    if (auto it = by_serial_.find(serial); it != by_serial_.end()) ex = it->second;
  } else {
    spdlog::warn(
        "assignment {} was not submitted by this gateway (another gateway on endpoint '{}'?)", a.id,
        cfg_.endpoint);
  }
  if (!ex) {
    endAssignment(*r, a.id, std::uint64_t{a.prompt_tokens} + a.max_output_tokens,
                  Status::kExecutorFailed, 0, "not a request of this gateway instance");
    return;
  }
  spdlog::debug("request {} assigned as {} on upstream {} (prompt {}, max output {})", ex->serial,
                a.id, r->cfg.name, a.prompt_tokens, a.max_output_tokens);
  const std::uint64_t kv = std::uint64_t{a.prompt_tokens} + a.max_output_tokens;
  by_assignment_[a.id] = Assigned{ex, r, r, kv};
  atHome(ex, [this, self = ex, id = a.id, kv, r](Exchange& e) {
    e.assignment = id;
    e.reserved_kv = kv;
    e.replica = r;
    e.via = r;
    if (e.caller_gone) {  // assigned while its cancel was on the way
      spawn(e.home(), [](DaemonBridge& b, std::shared_ptr<Exchange> x) -> awaitable<void> {
        co_await b.finishCancelled(*x, 0);
      }(*this, self));
      return;
    }
    e.notify();
  });
}

awaitable<void> DaemonBridge::finishCancelled(Exchange& ex, std::uint32_t output) {
  using Clock = std::chrono::steady_clock;  // asio's timers' clock
  const auto until = Clock::now() + milliseconds(1000);
  error_code ec;
  while (!ex.aborted && !ex.final && !ex.worker_finished && daemonConnected() &&
         Clock::now() < until) {
    ex.wake.expires_at(until);
    co_await ex.wake.async_wait(asio::redirect_error(use_awaitable, ec));
  }
  finish(ex, Status::kCancelled, output, "");
}

void DaemonBridge::endAssignment(Replica& r, std::uint64_t id, std::uint64_t kv, Status status,
                                 std::uint32_t output, std::string_view message,
                                 std::uint32_t input) {
  spdlog::debug("assignment {} ends {} after {} tokens", id, toString(status), output);
  release(r, kv);
  if (r.worker) {
    if (auto res = r.worker->finish(id, status, output, message, input); !res) {
      spdlog::warn("finish of assignment {}: {}", id, res.error().toString());
    }
  }
  stateCapacity(r, !anyUsable());
  detachIfDrained(r);
}

void DaemonBridge::finish(Exchange& ex, Status status, std::uint32_t output, std::string_view msg,
                          std::uint32_t input) {
  if (ex.worker_finished || !ex.assignment) return;
  ex.worker_finished = true;
  const std::lock_guard lock(mu_);
  const auto it = by_assignment_.find(*ex.assignment);
  if (it == by_assignment_.end()) return;  // its worker connection was lost: the daemon ended it
  const Assigned a = std::move(it->second);
  by_assignment_.erase(it);
  if (a.via != a.replica) {  // taken over: its room there is free again
    release(*a.via, a.kv);
    stateCapacity(*a.via, !anyUsable());
    detachIfDrained(*a.via);
  }
  endAssignment(*a.replica, *ex.assignment, a.kv, status, std::min(output, ex.req.max_tokens), msg,
                input);
}

void DaemonBridge::emitTokens(Exchange& ex, std::uint32_t n, bool finish_follows) {
  if (ex.worker_finished || !ex.assignment) return;
  n = std::min(n, ex.req.max_tokens - std::min(ex.emitted, ex.req.max_tokens));
  if (n == 0) return;
  ex.emitted += n;
  if (finish_follows) return;
  // The first tokens go at once (the daemon's time to first token), later
  // ones at most every kReportEvery, and what is left with the finish: a
  // fast stream costs a ring event or two, not one per read.
  const TimeNs now = env_.now();
  if (ex.reported > 0 && now - ex.reported_at < kReportEvery) return;
  const std::lock_guard lock(mu_);
  const auto it = by_assignment_.find(*ex.assignment);
  if (it == by_assignment_.end() || !it->second.replica->worker) return;
  reportLocked(ex, *it->second.replica->worker);
  ex.reported_at = now;
}

void DaemonBridge::reportLocked(Exchange& ex, Worker& w) {
  static const std::vector<std::uint32_t> kZeros(256, 0);
  while (ex.reported < ex.emitted) {
    const std::uint32_t k = std::min<std::uint32_t>(ex.emitted - ex.reported, 256);
    if (!w.emit(*ex.assignment, std::span(kZeros.data(), k))) return;  // charged by the finish
    ex.reported += k;
  }
}

}  // namespace fairsched::gateway
