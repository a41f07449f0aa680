#include "gateway/daemon_bridge.hpp"

#include <map>

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <random>
#include <span>

#include "gateway/upstream_call.hpp"

namespace fairsched::gateway {

DaemonBridge::DaemonBridge(asio::io_context& io, const GatewayConfig& cfg, daemon::Env& env)
    : io_(io), cfg_(cfg), env_(env) {
  std::random_device rd;
  instance_ = "fsgw " + std::to_string(::getpid()) + "." + std::to_string(rd()) + " ";
}

bool DaemonBridge::start() {
  ClientOptions co;
  co.socket_path = cfg_.socket;
  co.client_name = cfg_.name;
  co.connect_timeout = std::chrono::seconds(2);
  co.control_timeout = std::chrono::seconds(2);
  co.spin = std::chrono::nanoseconds(0);
  co.reconnect.enabled = true;
  co.reconnect.initial_delay = milliseconds(100);
  co.reconnect.max_delay = std::chrono::seconds(2);
  auto c = Client::connect(co);
  if (!c) {
    spdlog::error("cannot connect to fairschedd at {}: {}", cfg_.socket, c.error().toString());
    return false;
  }
  client_.emplace(std::move(*c));
  bool found = false;
  for (const EndpointDescription& e : client_->endpoints()) {
    if (e.name == cfg_.endpoint) {
      found = true;
      max_output_tokens_ = e.max_output_tokens;
    }
  }
  if (!found) {
    spdlog::error("fairschedd has no endpoint '{}'", cfg_.endpoint);
    return false;
  }
  syncTenants();
  return connectWorker(true);
}

void DaemonBridge::syncTenants() {
  if (!client_) return;
  std::map<std::string_view, const ApiKeyConfig*> wanted;  // tenant → its first key
  for (const ApiKeyConfig& k : cfg_.keys) wanted.emplace(k.tenant, &k);
  std::vector<std::string> gone;
  std::vector<Tenant> gone_handles;
  for (const auto& [name, t] : tenants_) {
    if (wanted.count(name) == 0) {
      gone.push_back(name);
      gone_handles.push_back(t);
    }
  }
  const std::vector<Result<void>> closed_r = client_->closeTenants(gone_handles);
  for (std::size_t i = 0; i < gone.size(); ++i) {
    if (!closed_r[i]) {
      spdlog::warn("closing tenant '{}' (no key names it now): {}", gone[i],
                   closed_r[i].error().toString());
    }
    tenants_.erase(gone[i]);
  }
  const std::size_t closed = gone.size();
  // One batch per tier hint ("" for none).
  std::map<std::string, std::vector<std::string_view>> by_tier;
  for (const auto& [tenant, key] : wanted) {
    if (tenants_.count(std::string(tenant)) == 0) by_tier[key->tier.value_or("")].push_back(tenant);
  }
  std::size_t opened = 0, refused = 0;
  for (const auto& [tier, names] : by_tier) {
    std::optional<std::string_view> hint;
    if (!tier.empty()) hint = tier;
    std::vector<Result<Tenant>> got = client_->openTenants(names, hint);
    for (std::size_t i = 0; i < names.size(); ++i) {
      if (got[i]) {
        tenants_.emplace(std::string(names[i]), *got[i]);
        ++opened;
      } else {
        ++refused;
        spdlog::warn("cannot open tenant '{}': {}", names[i], got[i].error().toString());
      }
    }
  }
  spdlog::info("tenants: {} held open ({} opened, {} closed, {} refused)", tenants_.size(), opened,
               closed, refused);
}

void DaemonBridge::run() {
  spawn(io_, completionLoop());
  spawn(io_, workerLoop());
}

void DaemonBridge::loadLimits() {
  if (cfg_.daemon_config.empty()) return;
  auto r = config::loadConfigFile(cfg_.daemon_config);
  if (auto* e = r.errorOrNull()) {
    spdlog::warn("gateway.daemon_config: {}; no x-ratelimit-limit headers", e->toString());
    return;
  }
  const config::Config& daemon_cfg = r.value();
  for (const ApiKeyConfig& k : cfg_.keys) {
    limits_.setLimits(k.tenant, effectiveLimits(daemon_cfg, cfg_.endpoint, k.tenant,
                                                k.tier ? std::optional<std::string_view>(*k.tier)
                                                       : std::nullopt));
  }
}

std::string_view DaemonBridge::unready() const {
  if (!worker_) return "not attached as the worker";
  if (!client_ || !client_->connected()) return "no connection to fairschedd";
  return "";
}

// --- the client side ----------------------------------------------------------

awaitable<void> DaemonBridge::completionLoop() {
  asio::posix::stream_descriptor sd(io_, ::dup(client_->completionFd()));
  asio::steady_timer t(io_);
  std::vector<Completion> done;
  error_code ec;
  for (;;) {
    done.clear();
    client_->poll(done, 256);
    for (Completion& c : done) onCompletion(std::move(c));
    if (!done.empty()) continue;
    auto r = client_->prepareToBlock();
    if (!r) {
      t.expires_after(milliseconds(100));
      co_await t.async_wait(asio::redirect_error(use_awaitable, ec));
      continue;
    }
    if (!*r) continue;
    co_await sd.async_wait(asio::posix::descriptor_base::wait_read,
                           asio::redirect_error(use_awaitable, ec));
    if (ec && ec != asio::error::interrupted) co_return;
  }
}

void DaemonBridge::onCompletion(Completion c) {
  if (c.partial) return;  // counts-only, not streamed through the daemon
  const auto it = by_serial_.find(c.tag);
  if (it == by_serial_.end()) return;
  std::shared_ptr<Exchange> ex = it->second;
  by_serial_.erase(it);
  spdlog::debug("request {} completed {} ({} output tokens)", ex->serial, toString(c.status),
                c.output_tokens);
  const bool refused = c.status == Status::kRateLimited || c.status == Status::kOverloaded ||
                       c.status == Status::kQueueFull || c.status == Status::kInvalid ||
                       c.status == Status::kUnauthorized;
  // The daemon's settlement: the prompt as the upstream's usage counted it
  // (input_tokens, when the worker reported one), else the estimate.
  const std::uint32_t prompt = c.input_tokens != 0 ? c.input_tokens : ex->req.prompt_tokens;
  const std::uint64_t used = std::uint64_t{prompt} + c.output_tokens;
  const std::uint64_t reserved = std::uint64_t{ex->req.prompt_tokens} + ex->req.max_tokens;
  limits_.refund(ex->tenant, ex->sent, refused, reserved > used ? reserved - used : 0);
  ex->final = std::move(c);
  ex->notify();
}

std::variant<Tenant, ErrorReply> DaemonBridge::tenantFor(const ApiKeyConfig& key) {
  if (auto it = tenants_.find(key.tenant); it != tenants_.end()) return it->second;
  auto t = client_->openTenant(
      key.tenant, key.tier ? std::optional<std::string_view>(*key.tier) : std::nullopt);
  if (!t) {
    spdlog::warn("cannot open tenant '{}' (key '{}'): {}", key.tenant, key.name,
                 t.error().toString());
    return errorForSubmit(t.error());
  }
  tenants_.emplace(key.tenant, *t);
  return *t;
}

std::variant<std::shared_ptr<Exchange>, ErrorReply> DaemonBridge::submit(const ApiKeyConfig& key,
                                                                         Route route,
                                                                         GenerateRequest req,
                                                                         milliseconds timeout) {
  auto ex = std::make_shared<Exchange>(io_.get_executor());
  ex->req = std::move(req);
  ex->tenant = key.tenant;
  ex->route = route;
  auto tenant = tenantFor(key);
  if (auto* e = std::get_if<ErrorReply>(&tenant)) return std::move(*e);
  ex->serial = next_serial_++;
  const std::string params = instance_ + std::to_string(ex->serial);
  SubmitRequest sr;
  sr.tenant = std::get<Tenant>(tenant);
  sr.endpoint = cfg_.endpoint;
  sr.max_output_tokens = ex->req.max_tokens;
  sr.priority = key.priority;
  sr.timeout = timeout;
  sr.tag = ex->serial;
  sr.params = std::as_bytes(std::span(params.data(), params.size()));
  sr.prompt_token_count = ex->req.prompt_tokens;
  auto id = client_->submit(sr);
  if (!id) {
    if (id.error().code == ErrorCode::kUnknownTenant) tenants_.erase(key.tenant);
    return errorForSubmit(id.error());
  }
  ex->request_id = *id;
  ex->sent = limits_.add(ex->tenant, std::uint64_t{ex->req.prompt_tokens} + ex->req.max_tokens,
                         env_.now());
  by_serial_[ex->serial] = ex;
  return ex;
}

void DaemonBridge::callerGone(Exchange& ex) {
  if (ex.caller_gone) return;
  ex.caller_gone = true;
  spdlog::debug("caller of request {} hung up; cancelling it", ex.serial);
  if (!ex.final && client_) (void)client_->cancel(ex.request_id);
  if (ex.upstream != nullptr) ex.upstream->close();
  ex.notify();
}

std::vector<HttpHeader> DaemonBridge::limitHeaders(
    const Exchange& ex, std::optional<std::chrono::nanoseconds> retry_after) {
  if (!limits_.hasLimits(ex.tenant)) return {};
  return limits_.headers(ex.tenant, env_.now(), retry_after,
                         std::uint64_t{ex.req.prompt_tokens} + ex.req.max_tokens);
}

// --- the worker side ----------------------------------------------------------

bool DaemonBridge::connectWorker(bool first) {
  WorkerOptions wo;
  wo.socket_path = cfg_.socket;
  wo.endpoint = cfg_.endpoint;
  wo.worker_name = cfg_.name;
  wo.connect_timeout = std::chrono::seconds(2);
  auto w = Worker::connect(wo);
  if (!w) {
    if (first) {
      spdlog::error("cannot attach as the worker of endpoint '{}': {}", cfg_.endpoint,
                    w.error().toString());
    }
    return false;
  }
  worker_.emplace(std::move(*w));
  stated_.reset();
  stateCapacity();
  spdlog::info("attached as worker {} of endpoint '{}' ({} sequences, {} tokens upstream)",
               worker_->workerId(), cfg_.endpoint, cfg_.upstream.max_sequences,
               cfg_.upstream.max_tokens);
  return true;
}

void DaemonBridge::stateCapacity() {
  if (!worker_) return;
  const std::uint32_t seqs =
      running_ >= cfg_.upstream.max_sequences ? 0 : cfg_.upstream.max_sequences - running_;
  const std::uint64_t kv =
      reserved_ >= cfg_.upstream.max_tokens ? 0 : cfg_.upstream.max_tokens - reserved_;
  const std::pair<std::uint32_t, std::uint64_t> now{seqs, kv};
  if (stated_ == now) return;
  spdlog::debug("capacity: {} sequences, {} tokens", seqs, kv);
  if (worker_->setCapacity(seqs, kv)) stated_ = now;
}

void DaemonBridge::workerLost() {
  spdlog::error("the worker connection to fairschedd was lost; reconnecting");
  worker_.reset();
  worker_fd_.reset();
  // The daemon has ended or requeued what this worker ran.
  auto running = std::move(by_assignment_);
  by_assignment_.clear();
  for (auto& [id, ex] : running) {
    ex->worker_finished = true;
    ex->aborted = true;
    if (ex->upstream != nullptr) ex->upstream->close();
    ex->notify();
  }
  running_ = 0;
  reserved_ = 0;
}

awaitable<void> DaemonBridge::workerLoop() {
  asio::steady_timer t(io_);
  std::vector<WorkItem> items;
  error_code ec;
  for (;;) {
    if (stopping_) co_return;
    if (!worker_) {
      if (!connectWorker(false)) {
        t.expires_after(milliseconds(500));
        co_await t.async_wait(asio::redirect_error(use_awaitable, ec));
        continue;
      }
    }
    if (!worker_fd_) {
      worker_fd_.emplace(io_, ::dup(worker_->eventFd()));
    }
    items.clear();
    worker_->poll(items, 256);
    for (WorkItem& item : items) onWorkItem(item);
    stateCapacity();
    if (!items.empty()) continue;
    auto r = worker_->prepareToBlock();
    if (!r) {
      workerLost();
      continue;
    }
    if (!*r) continue;
    co_await worker_fd_->async_wait(asio::posix::descriptor_base::wait_read,
                                    asio::redirect_error(use_awaitable, ec));
    if (worker_ && !worker_->connected()) workerLost();
  }
}

void DaemonBridge::onWorkItem(WorkItem& item) {
  // An upstream's stream cannot be given back and resumed: PREEMPT is
  // ignored (the daemon stops asking this worker after a second).
  if (item.kind == WorkItem::Kind::kPreempt) return;
  if (item.kind == WorkItem::Kind::kAbort) {
    const auto it = by_assignment_.find(item.id);
    if (it == by_assignment_.end()) return;  // already finished
    Exchange& ex = *it->second;
    ex.aborted = true;
    if (ex.upstream != nullptr) ex.upstream->close();
    ex.notify();
    return;
  }
  Assignment& a = item.assignment;
  running_ += 1;
  reserved_ += std::uint64_t{a.prompt_tokens} + a.max_output_tokens;
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
    endAssignment(a.id, std::uint64_t{a.prompt_tokens} + a.max_output_tokens,
                  Status::kExecutorFailed, 0, "not a request of this gateway instance");
    return;
  }
  spdlog::debug("request {} assigned as {} (prompt {}, max output {})", ex->serial, a.id,
                a.prompt_tokens, a.max_output_tokens);
  ex->assignment = a.id;
  ex->reserved_kv = std::uint64_t{a.prompt_tokens} + a.max_output_tokens;
  by_assignment_[a.id] = ex;
  if (ex->caller_gone) {  // assigned while its cancel was on the way
    spawn(io_, [](DaemonBridge& b, std::shared_ptr<Exchange> e) -> awaitable<void> {
      co_await b.finishCancelled(*e, 0);
    }(*this, std::move(ex)));
    return;
  }
  ex->notify();
}

awaitable<void> DaemonBridge::finishCancelled(Exchange& ex, std::uint32_t output) {
  using Clock = std::chrono::steady_clock;  // asio's timers' clock
  const auto until = Clock::now() + milliseconds(1000);
  error_code ec;
  while (!ex.aborted && !ex.final && !ex.worker_finished && client_ && client_->connected() &&
         Clock::now() < until) {
    ex.wake.expires_at(until);
    co_await ex.wake.async_wait(asio::redirect_error(use_awaitable, ec));
  }
  finish(ex, Status::kCancelled, output, "");
}

void DaemonBridge::endAssignment(std::uint64_t id, std::uint64_t kv, Status status,
                                 std::uint32_t output, std::string_view message,
                                 std::uint32_t input) {
  spdlog::debug("assignment {} ends {} after {} tokens", id, toString(status), output);
  running_ -= std::min<std::uint32_t>(running_, 1);
  reserved_ -= std::min(reserved_, kv);
  if (worker_) {
    if (auto r = worker_->finish(id, status, output, message, input); !r) {
      spdlog::warn("finish of assignment {}: {}", id, r.error().toString());
    }
  }
  stateCapacity();
}

void DaemonBridge::finish(Exchange& ex, Status status, std::uint32_t output, std::string_view msg,
                          std::uint32_t input) {
  if (ex.worker_finished || !ex.assignment) return;
  ex.worker_finished = true;
  by_assignment_.erase(*ex.assignment);
  endAssignment(*ex.assignment, ex.reserved_kv, status, std::min(output, ex.req.max_tokens), msg,
                input);
}

void DaemonBridge::emitTokens(Exchange& ex, std::uint32_t n) {
  if (ex.worker_finished || !ex.assignment || !worker_) return;
  n = std::min(n, ex.req.max_tokens - std::min(ex.emitted, ex.req.max_tokens));
  if (n == 0) return;
  static const std::vector<std::uint32_t> kZeros(256, 0);
  while (n > 0) {
    const std::uint32_t k = std::min<std::uint32_t>(n, 256);
    if (!worker_->emit(*ex.assignment, std::span(kZeros.data(), k))) return;
    ex.emitted += k;
    n -= k;
  }
}

}  // namespace fairsched::gateway
