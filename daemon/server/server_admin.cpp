// fairschedctl's side of the control socket: status, tenants, reload, drain
// and resume, for peers whose [[clients]] rule says admin = true. Replies are
// JSON, split over as many AdminReply records as they need and sent without
// ever blocking the loop (what the socket does not take now is sent when it
// has room). Kept apart from server.cpp so the JSON library stays out of the
// hot path's translation unit.
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "daemon/fleet/redis_topology.hpp"
#include "daemon/metrics/stats_json.hpp"
#include "daemon/server/server.hpp"
#include "fairsched/name.hpp"

#ifndef FAIRSCHED_VERSION
#define FAIRSCHED_VERSION "0.1.0"
#endif

namespace fairsched::daemon {
namespace {

using nlohmann::json;

// JSON text of `j`; never throws: a string that is not UTF-8 (none should
// reach here: names follow fairsched/name.hpp) is written with U+FFFD.
std::string dumpJson(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

double seconds(TimeNs ns) {
  return static_cast<double>(ns) / static_cast<double>(kNsPerSec);
}

std::string_view commandName(std::uint32_t c) {
  switch (static_cast<shm::AdminCommand>(c)) {
    case shm::AdminCommand::kStatus:
      return "status";
    case shm::AdminCommand::kTenants:
      return "tenants";
    case shm::AdminCommand::kReload:
      return "reload";
    case shm::AdminCommand::kDrain:
      return "drain";
    case shm::AdminCommand::kResume:
      return "resume";
  }
  return "?";
}

}  // namespace

void Server::handleAdmin(Connection& c, const shm::AdminRequestMessage& m) {
  const std::uint32_t seq = m.header.seq;
  if (!c.rule || !c.rule->admin) {
    const std::string why = "uid " + std::to_string(c.cred.uid) + " gid " +
                            std::to_string(c.cred.gid) +
                            " is not allowed admin commands (no [[clients]] rule with admin = true "
                            "names it)";
    spdlog::warn("admin {} refused: {}", commandName(m.command), why);
    sendAdmin(c, seq, shm::ControlStatus::kUnauthorized, dumpJson(json{{"error", why}}));
    return;
  }
  spdlog::info("admin {} from uid {} pid {}", commandName(m.command), c.cred.uid, c.cred.pid);
  // A failure serving one command answers that command; the daemon goes on.
  try {
    serveAdmin(c, m);
  } catch (const std::exception& e) {
    spdlog::error("admin {} failed: {}", commandName(m.command), escapeForDisplay(e.what()));
    sendAdmin(c, seq, shm::ControlStatus::kFailed,
              dumpJson(json{{"error", std::string("internal error: ") + e.what()}}));
  }
}

void Server::serveAdmin(Connection& c, const shm::AdminRequestMessage& m) {
  const std::uint32_t seq = m.header.seq;
  switch (static_cast<shm::AdminCommand>(m.command)) {
    case shm::AdminCommand::kStatus:
      sendAdmin(c, seq, shm::ControlStatus::kOk, statusJson());
      return;
    case shm::AdminCommand::kTenants: {
      const std::string_view only = *shm::getString(m.tenant);
      if (!only.empty()) {
        if (auto err = nameError(only)) {
          sendAdmin(c, seq, shm::ControlStatus::kBadRequest, dumpJson(json{{"error", *err}}));
          return;
        }
      }
      sendAdmin(c, seq, shm::ControlStatus::kOk, tenantsJson(m.limit, only));
      return;
    }
    case shm::AdminCommand::kReload: {
      if (shutting_down_) {
        sendAdmin(c, seq, shm::ControlStatus::kShuttingDown,
                  dumpJson(json{{"error", "the daemon is stopping"}}));
        return;
      }
      const Result<> r = reload();
      // On success cfg_ is the reloaded file's, so source_path is the path it was read from.
      json j = r.ok() ? json{{"reloaded", true}, {"message", "reloaded " + cfg_.source_path}}
                      : json{{"reloaded", false}, {"error", r.error().message}};
      j["config"] = cfg_.source_path;
      sendAdmin(c, seq, r.ok() ? shm::ControlStatus::kOk : shm::ControlStatus::kFailed,
                dumpJson(j));
      return;
    }
    case shm::AdminCommand::kDrain:
    case shm::AdminCommand::kResume: {
      const bool drain = m.command == static_cast<std::uint32_t>(shm::AdminCommand::kDrain);
      if (draining_ != drain) {
        draining_ = drain;
        spdlog::warn("{}: {}", drain ? "draining (admitting nothing new)" : "resumed admitting",
                     statusLine());
        notifier_->status(statusLine());
      }
      sendAdmin(c, seq, shm::ControlStatus::kOk, statusJson());
      return;
    }
  }
}

void Server::sendAdmin(Connection& c, std::uint32_t seq, shm::ControlStatus status,
                       const std::string& text) {
  std::size_t off = 0;
  do {
    auto m =
        std::make_unique<shm::AdminReplyMessage>(shm::makeMessage<shm::AdminReplyMessage>(seq));
    const std::size_t n = std::min(text.size() - off, shm::kAdminPayloadBytes);
    m->status = static_cast<std::uint32_t>(status);
    m->bytes = static_cast<std::uint32_t>(n);
    std::memcpy(m->text, text.data() + off, n);
    off += n;
    m->more = off < text.size() ? 1 : 0;
    const auto bytes = shm::bytesOf(*m);
    c.outbox.emplace_back(bytes.begin(), bytes.end());
  } while (off < text.size());
  pumpOutbox(c);
}

void Server::pumpOutbox(Connection& c) {
  while (!c.outbox.empty()) {
    const std::vector<std::byte>& msg = c.outbox.front();
    const ssize_t n = send(c.fd, msg.data(), msg.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n == static_cast<ssize_t>(msg.size())) {
      c.outbox.pop_front();
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (c.out_armed) return;
      c.out_armed = true;
      ++c.ops;
      const std::uint64_t id = c.id;
      c.out_op = loop_->pollOut(c.fd, [this, id](int res) {
        Connection* live = conns_.opDone(id);
        if (!live) return;
        live->out_armed = false;
        if (res < 0 && res != -EINTR) {
          dropConnection(id, "admin reply could not be sent");
          return;
        }
        pumpOutbox(*live);
      });
      return;
    }
    dropConnection(c.id, "admin reply could not be sent");
    return;
  }
}

std::string Server::statusJson() const {
  const TimeNs now = env_.now();
  json j;
  j["version"] = FAIRSCHED_VERSION;
  j["pid"] = getpid();
  j["state"] = shutting_down_ ? "stopping" : draining_ ? "draining" : "serving";
  j["uptime_s"] = started_at_ > 0 ? seconds(now - started_at_) : 0.0;
  j["socket"] = socket_path_;
  j["config"] = cfg_.source_path;
  j["policy"] = cfg_.daemon.policy == Policy::kFair ? "fair" : "fifo";
  j["reloads"] = {
      {"ok", reloads_ok_}, {"failed", reloads_failed_}, {"last_error", last_reload_error_}};
  {
    // What a restart keeps (docs/operations.md, "What survives a restart").
    const StateStore::Status st = state_.status(stateActivity());
    timespec wall{};
    clock_gettime(CLOCK_REALTIME, &wall);
    const TimeNs wall_now = static_cast<TimeNs>(wall.tv_sec) * kNsPerSec + wall.tv_nsec;
    j["state_file"] = {
        {"enabled", st.enabled},
        {"path", st.path},
        {"age_s", st.saved_wall > 0 ? json(seconds(std::max<TimeNs>(0, wall_now - st.saved_wall)))
                                    : json(nullptr)},
        {"tenant_states", st.states},
        {"bytes", st.bytes},
        {"writes", st.writes},
        {"up_to_date", st.up_to_date},
        {"failures", st.failures},
        {"problem", st.problem},
        {"at_start", st.restored_from},
        {"slice_max_ms", seconds(st.slice_max_ns) * 1e3},
        {"snapshot_ms", seconds(st.snapshot_ns) * 1e3}};
  }
  j["clients"] = clients_;
  j["connects_waiting"] = set_ups_.waiting();  // Hellos waiting for their uid's budget
  j["tenants"] = sched_.tenants().size();
  j["active_tenant_states"] = sched_.activeTenantStates();
  j["in_flight"] = sched_.inFlight();
  j["in_flight_batches"] = batches_.inFlight();
  std::size_t queued = 0;
  json endpoints = json::array();
  for (std::size_t e = 0; e < executors_.size(); ++e) {
    const auto eid = static_cast<EndpointId>(e);
    queued += sched_.queued(eid);
    endpoints.push_back(
        {{"name", cfg_.endpoints[e].name},
         {"executor", std::string(executors_[e]->name())},
         {"queued", sched_.queued(eid)},
         {"queued_tokens", sched_.queuedTokens(eid)},
         {"free_executor_slots", executors_[e]->freeSlots()},
         {"executor_error",
          executors_[e]->fatal() ? executors_[e]->fatal()->message : std::string()},
         {"tokens_last_10s", sched_.recentTokens(eid, now)},
         // Its slots' time serving batches, and free while a
         // batch was due (slot_idle_meter.hpp).
         {"executor_busy_s", seconds(static_cast<TimeNs>(slot_meters_[e].busyNs()))},
         {"executor_starved_s", seconds(static_cast<TimeNs>(slot_meters_[e].starvedNs()))}});
  }
  j["queued"] = queued;
  j["endpoints"] = std::move(endpoints);
  // Engines attached as workers (docs/worker.md), in attach order.
  std::vector<const Connection*> attached;
  conns_.forEach([&](const Connection& c) {
    if (c.worker && !c.closing) attached.push_back(&c);
  });
  std::sort(attached.begin(), attached.end(),
            [](const Connection* a, const Connection* b) { return a->id < b->id; });
  json workers = json::array();
  for (const Connection* c : attached) {
    const WorkerState& w = *c->worker;
    workers.push_back({{"id", c->id},
                       {"endpoint", cfg_.endpoints[w.endpoint].name},
                       {"name", w.name},
                       {"pid", c->cred.pid},
                       {"running", w.running},
                       // What the daemon may still assign: the statement
                       // capped by max_sequences and its ring (as assignToWorkers
                       // does); the statement as made, beside it.
                       {"free_sequences", workers_.sequencesShown(*c)},
                       {"free_kv_tokens", w.freeKvTokens()},
                       {"stated_free_sequences", w.free_sequences},
                       {"stated_free_kv_tokens", w.free_kv_tokens},
                       {"assigned", w.assigned},
                       {"finished", w.finished},
                       {"tokens", w.tokens},
                       // Prefix routing: what the daemon knows the engine
                       // holds (from its KV events: "events", or from what it
                       // was sent: "sent"), and of the prompt blocks it was
                       // assigned, how many it held then.
                       {"prefix_cache",
                        {{"source", w.cache_events ? "events" : "sent"},
                         {"blocks", w.cache.size()},
                         {"capacity_blocks", w.cache.capacity()},
                         {"kv_events", w.cache_reports},
                         {"assigned_blocks", w.prefix_blocks},
                         {"hit_blocks", w.prefix_hits}}}});
  }
  j["workers"] = std::move(workers);
  j["running_on_workers"] = workers_.running();
  std::vector<std::string> endpoint_names;
  std::vector<bool> worker_endpoint;
  for (std::size_t e = 0; e < cfg_.endpoints.size(); ++e) {
    endpoint_names.push_back(cfg_.endpoints[e].name);
    worker_endpoint.push_back(isWorkerEndpoint(e));
  }
  j.update(serverStatsJson(stats_, endpoint_names, worker_endpoint));
  if (fleet_)
    j["fleet"] = fleetStatsJson(fleet_->stats(), cfg_.fleet ? cfg_.fleet->redacted_url : "");
  return dumpJson(j);
}

std::string Server::tenantsJson(std::uint32_t limit, std::string_view only) {
  const TimeNs now = env_.now();
  struct Row {
    TenantId tenant;
    EndpointId endpoint;
    std::optional<core::TenantView> view;
    std::uint64_t activity;  // what "busiest first" sorts by
  };
  std::vector<Row> rows;
  const core::TenantTable& table = sched_.tenants();
  TenantId first = 0, last = static_cast<TenantId>(table.capacity());
  if (!only.empty()) {  // one tenant: no scan of the whole table
    const std::optional<TenantId> id = table.find(only);
    first = id.value_or(0);
    last = id ? *id + 1 : 0;
  }
  for (TenantId t = first; t < last; ++t) {
    if (!table.valid(t)) continue;
    for (std::size_t e = 0; e < executors_.size(); ++e) {
      const auto eid = static_cast<EndpointId>(e);
      auto v = sched_.view(t, eid, now);
      if (!v && !table[t].listed) continue;  // unlisted tenants show where they have state
      const std::uint64_t activity =
          v ? std::uint64_t{v->queued} + v->in_flight + v->recent_tokens : 0;
      rows.push_back({t, eid, std::move(v), activity});
    }
  }
  const std::size_t total = rows.size();
  const std::size_t keep = limit == 0 ? total : std::min<std::size_t>(limit, total);
  auto busier = [&](const Row& a, const Row& b) {
    if (a.activity != b.activity) return a.activity > b.activity;
    if (table[a.tenant].name != table[b.tenant].name)
      return table[a.tenant].name < table[b.tenant].name;
    return a.endpoint < b.endpoint;
  };
  std::partial_sort(rows.begin(), rows.begin() + static_cast<std::ptrdiff_t>(keep), rows.end(),
                    busier);
  rows.resize(keep);

  // Where each tenant's fleet limits live: a cluster keeps all of a tenant's
  // keys in the slot of its hash tag.
  const std::optional<fleet::FleetStats> fleet =
      fleet_ ? std::optional(fleet_->stats()) : std::nullopt;
  json out = json::array();
  for (const Row& r : rows) {
    const core::TenantTable::Entry& entry = table[r.tenant];
    const core::TenantView v = r.view.value_or(core::TenantView{});
    const std::uint64_t endpoint_recent = sched_.recentTokens(r.endpoint, now);
    json limits = json::array();
    std::vector<core::LimitUsage> usage = sched_.limitUsage(r.tenant, r.endpoint, now);
    if (usage.empty() && entry.limits && r.endpoint < entry.limits->size()) {
      for (const core::LimitSpec& spec : (*entry.limits)[r.endpoint]) {
        if (spec.amount != 0) usage.push_back({spec, 0});
      }
    }
    for (const core::LimitUsage& u : usage) {
      limits.push_back({{"limit", core::toString(u.spec)},
                        {"used", u.used},
                        {"remaining", u.spec.amount > u.used ? u.spec.amount - u.used : 0}});
    }
    const core::TenantStats& st = v.stats;
    out.push_back(
        {{"tenant", entry.name},
         {"endpoint", cfg_.endpoints[r.endpoint].name},
         {"tier", entry.tier < cfg_.tiers.size() ? cfg_.tiers[entry.tier].name : ""},
         {"listed", entry.listed},
         {"weight", entry.weight},
         {"queue_limit", entry.queue_limit},
         {"queued", v.queued},
         {"in_flight", v.in_flight},
         {"queued_tokens", v.queued_tokens},
         {"deficit", v.deficit},
         {"tokens_last_10s", v.recent_tokens},
         {"share_last_10s", endpoint_recent == 0 ? 0.0
                                                 : static_cast<double>(v.recent_tokens) /
                                                       static_cast<double>(endpoint_recent)},
         {"submitted", st.submitted},
         {"admitted", st.admitted},
         {"rejected",
          {{"rate_limited", st.rejected_rate_limited},
           {"overloaded", st.rejected_overloaded},
           {"queue_full", st.rejected_queue_full},
           {"invalid", st.rejected_invalid}}},
         {"completed", st.completed},
         {"expired", st.expired},
         {"cancelled", st.cancelled},
         {"tokens_served", st.tokens_served},
         {"limits", std::move(limits)}});
    if (fleet) out.back()["fleet_node"] = fleet::nodeOfKey(fleet->topology, "{" + entry.name + "}");
  }
  return dumpJson(
      json{{"total_rows", total}, {"truncated", keep < total}, {"tenants", std::move(out)}});
}

}  // namespace fairsched::daemon
