#include "daemon/config/config.hpp"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "daemon/config/account_lookup.hpp"
#include "daemon/config/scheduler_setup.hpp"
#include "shm/worker_protocol.hpp"

namespace fairsched::config {
namespace {

using core::LimitSpec;
using core::LimitUnit;

constexpr TimeNs kMinute = 60 * kNsPerSec;
constexpr TimeNs kDay = 24 * 60 * kMinute;

// Ten lines, so the first line of a snippet appended by withBase() is line 11.
constexpr std::string_view kBase =
    "[[tiers]]\n"
    "name = \"paid\"\n"
    "[[tiers]]\n"
    "name = \"trial\"\n"
    "[endpoints.chat]\n"
    "kind = \"streaming\"\n"
    "cost = \"tokens\"\n"
    "limits = [\"600 requests/minute\"]\n"
    "[endpoints.embed]\n"
    "kind = \"batch\"\n";

std::string withBase(std::string_view snippet) {
  return std::string(kBase) + std::string(snippet);
}

std::string errorOf(std::string_view text) {
  auto r = parseConfig(text, "cfg.toml");
  if (auto* e = r.errorOrNull()) return e->toString();
  return "<no error>";
}

Config parsedOk(std::string_view text) {
  auto r = parseConfig(text, "cfg.toml");
  if (auto* e = r.errorOrNull()) {
    ADD_FAILURE() << "unexpected error: " << e->toString();
    return {};
  }
  return r.value();
}

LimitSpec limit(LimitUnit unit, std::uint64_t amount, TimeNs window) {
  return LimitSpec{unit, amount, window};
}

// --- whole document ----------------------------------------------------------

TEST(ConfigParse, MinimalConfigGetsDefaults) {
  const Config cfg = parsedOk(kBase);
  EXPECT_EQ(cfg.daemon.socket, "/run/fairsched/fairsched.sock");
  EXPECT_EQ(cfg.daemon.socket_mode, 0660u);
  EXPECT_EQ(cfg.daemon.socket_group, "");
  EXPECT_EQ(cfg.daemon.log_level, "info");
  EXPECT_EQ(cfg.daemon.policy, Policy::kFair);
  EXPECT_EQ(cfg.daemon.tenant_idle_timeout_s, 600u);
  EXPECT_EQ(cfg.daemon.shutdown_grace_ms, 5000u);
  ASSERT_EQ(cfg.tiers.size(), 2u);
  EXPECT_EQ(cfg.tiers[0].name, "paid");
  EXPECT_EQ(cfg.tiers[1].name, "trial");
  EXPECT_EQ(cfg.tiers[0].default_weight, 1.0);
  EXPECT_EQ(cfg.tiers[0].default_queue_limit, 10000u);
  EXPECT_TRUE(cfg.tenants.empty());
  EXPECT_TRUE(cfg.clients.empty());
}

TEST(ConfigParse, FullSchemaParses) {
  const Config cfg = parsedOk(R"(default_tier = "trial"
[daemon]
socket = "/tmp/fs.sock"
socket_mode = "0600"
socket_group = "fairsched"
log_level = "debug"
policy = "fifo"
tenant_idle_timeout_s = 30
shutdown_grace_ms = 100
[[tiers]]
name = "paid"
min_share = 0.0
default_weight = 1.5
default_queue_limit = 500
[tiers.limits]
chat = ["6000 requests/minute", "4M tokens/minute"]
[[tiers]]
name = "trial"
min_share = 0.25
[endpoints.chat]
kind = "streaming"
cost = "adaptive"
quantum = 512
max_batch_requests = 16
max_batch_tokens = 8192
max_wait_us = 1500
max_output_tokens = 1024
latency_target_ms = 2000
executor = "cuda"
limits = ["600 requests/minute"]
[endpoints.chat.cpu]
per_batch_us = 150.5
per_token_us = 1
threads = 4
workload = false
[endpoints.chat.cuda]
device = 1
streams = 3
staging_bytes = 1048576
fallback = "cpu"
[tenants.acme]
tier = "paid"
weight = 2.0
queue_limit = 5000
[tenants.acme.limits]
chat = ["600 requests/minute", "2M tokens/minute"]
[[clients]]
name = "frontend"
uids = [1000]
gids = []
users = ["root"]
groups = []
tenants = ["*"]
endpoints = ["*"]
assign_tiers = ["paid", "trial"]
admin = true
)");
  EXPECT_EQ(cfg.default_tier, "trial");
  EXPECT_EQ(cfg.daemon.socket, "/tmp/fs.sock");
  EXPECT_EQ(cfg.daemon.socket_mode, 0600u);
  EXPECT_EQ(cfg.daemon.socket_group, "fairsched");
  EXPECT_EQ(cfg.daemon.log_level, "debug");
  EXPECT_EQ(cfg.daemon.policy, Policy::kFifo);
  EXPECT_EQ(cfg.daemon.tenant_idle_timeout_s, 30u);
  EXPECT_EQ(cfg.daemon.shutdown_grace_ms, 100u);

  ASSERT_EQ(cfg.tiers.size(), 2u);
  const TierConfig& paid = cfg.tiers[0];
  EXPECT_EQ(paid.default_weight, 1.5);
  EXPECT_EQ(paid.default_queue_limit, 500u);
  ASSERT_EQ(paid.limits.size(), 1u);
  EXPECT_EQ(paid.limits[0].endpoint, "chat");
  EXPECT_EQ(paid.limits[0].limits,
            (std::vector<LimitSpec>{limit(LimitUnit::kRequests, 6000, kMinute),
                                    limit(LimitUnit::kTokens, 4'000'000, kMinute)}));
  EXPECT_EQ(cfg.tiers[1].min_share, 0.25);

  ASSERT_EQ(cfg.endpoints.size(), 1u);
  const EndpointConfig& chat = cfg.endpoints[0];
  EXPECT_EQ(chat.name, "chat");
  EXPECT_EQ(chat.kind, EndpointKind::kStreaming);
  EXPECT_EQ(chat.cost, CostModel::kAdaptive);
  EXPECT_EQ(chat.quantum, 512u);
  EXPECT_EQ(chat.max_batch_requests, 16u);
  EXPECT_EQ(chat.max_batch_tokens, 8192u);
  EXPECT_EQ(chat.max_wait_us, 1500u);
  EXPECT_EQ(chat.max_output_tokens, 1024u);
  EXPECT_EQ(chat.latency_target_ms, 2000u);
  EXPECT_EQ(chat.executor, ExecutorKind::kCuda);
  EXPECT_EQ(chat.limits, (std::vector<LimitSpec>{limit(LimitUnit::kRequests, 600, kMinute)}));
  EXPECT_EQ(chat.cpu.per_batch_us, 150.5);
  EXPECT_EQ(chat.cpu.per_token_us, 1.0);
  EXPECT_EQ(chat.cpu.threads, 4u);
  EXPECT_FALSE(chat.cpu.workload);
  EXPECT_EQ(chat.cuda.device, 1);
  EXPECT_EQ(chat.cuda.streams, 3u);
  EXPECT_EQ(chat.cuda.staging_bytes, 1048576u);
  EXPECT_EQ(chat.cuda.fallback, ExecutorKind::kCpu);

  ASSERT_EQ(cfg.tenants.size(), 1u);
  const TenantConfig& acme = cfg.tenants[0];
  EXPECT_EQ(acme.name, "acme");
  EXPECT_EQ(acme.tier, "paid");
  EXPECT_EQ(acme.weight, 2.0);
  EXPECT_EQ(acme.queue_limit, 5000u);
  ASSERT_EQ(acme.limits.size(), 1u);
  EXPECT_EQ(acme.limits[0].limits,
            (std::vector<LimitSpec>{limit(LimitUnit::kRequests, 600, kMinute),
                                    limit(LimitUnit::kTokens, 2'000'000, kMinute)}));

  ASSERT_EQ(cfg.clients.size(), 1u);
  const ClientRule& rule = cfg.clients[0];
  EXPECT_EQ(rule.name, "frontend");
  EXPECT_EQ(rule.uids, (std::vector<std::uint32_t>{1000, 0}));
  EXPECT_TRUE(rule.gids.empty());
  EXPECT_EQ(rule.tenants, (std::vector<std::string>{"*"}));
  EXPECT_EQ(rule.endpoints, (std::vector<std::string>{"*"}));
  EXPECT_EQ(rule.assign_tiers, (std::vector<std::string>{"paid", "trial"}));
  EXPECT_TRUE(rule.admin);
}

TEST(ConfigParse, SyntaxErrorNamesTheLine) {
  EXPECT_EQ(errorOf(withBase("[daemon\n")),
            "cfg.toml:11: Error while parsing table header: expected ']', saw '\\n'");
}

TEST(ConfigParse, RedefinedTableIsASyntaxError) {
  EXPECT_EQ(errorOf(withBase("[endpoints.chat]\n")),
            "cfg.toml:11: Error while parsing table header: cannot redefine existing table "
            "'endpoints.chat'");
}

TEST(ConfigParse, UnknownTopLevelKeyIsRejectedWithItsPath) {
  EXPECT_EQ(errorOf(withBase("[deamon]\n")),
            "cfg.toml:11: deamon: unknown key (did you mean 'daemon'?)");
}

TEST(ConfigParse, UnknownKeyFarFromAnyKnownOneGetsNoSuggestion) {
  EXPECT_EQ(errorOf(withBase("[telemetry]\nport = 1\n")), "cfg.toml:11: telemetry: unknown key");
}

TEST(ConfigParse, FirstUnknownKeyInFileOrderIsReported) {
  EXPECT_EQ(errorOf(withBase("[daemon]\nzzz = 1\naaa = 2\n")),
            "cfg.toml:12: daemon.zzz: unknown key");
}

TEST(ConfigParse, MissingTiersIsRejected) {
  EXPECT_EQ(errorOf("[endpoints.chat]\n"), "cfg.toml: tiers: at least one tier is required");
}

TEST(ConfigParse, EmptyTiersArrayIsRejected) {
  EXPECT_EQ(errorOf("tiers = []\n[endpoints.chat]\n"),
            "cfg.toml:1: tiers: at least one tier is required");
}

TEST(ConfigParse, TiersWrittenAsATableAreRejected) {
  EXPECT_EQ(
      errorOf("[endpoints.chat]\n[tiers]\nname = \"paid\"\n"),
      "cfg.toml:2: tiers: expected array of tables (write each tier as [[tiers]]), got table");
}

TEST(ConfigParse, MissingEndpointsIsRejected) {
  EXPECT_EQ(errorOf("[[tiers]]\nname = \"paid\"\n"),
            "cfg.toml: endpoints: at least one endpoint is required");
}

TEST(ConfigParse, EmptyEndpointsTableIsRejected) {
  EXPECT_EQ(errorOf("[[tiers]]\nname = \"paid\"\n[endpoints]\n"),
            "cfg.toml:3: endpoints: at least one endpoint is required");
}

TEST(ConfigParse, EndpointsOfTheWrongTypeAreRejected) {
  EXPECT_EQ(errorOf("endpoints = 3\n"), "cfg.toml:1: endpoints: expected table, got integer");
}

TEST(ConfigParse, EmptyDocumentNamesTheMissingEndpoints) {
  EXPECT_EQ(errorOf(""), "cfg.toml: endpoints: at least one endpoint is required");
}

// --- [daemon] ------------------------------------------------------------------

TEST(ConfigDaemon, DaemonWrittenAsAValueIsRejected) {
  EXPECT_EQ(errorOf("daemon = \"x\"\n"), "cfg.toml:1: daemon: expected table, got string");
}

TEST(ConfigDaemon, MisspelledKeyGetsASuggestion) {
  EXPECT_EQ(errorOf(withBase("[daemon]\nsokcet = \"/tmp/x\"\n")),
            "cfg.toml:12: daemon.sokcet: unknown key (did you mean 'socket'?)");
}

TEST(ConfigDaemon, SocketOfTheWrongTypeIsRejected) {
  EXPECT_EQ(errorOf(withBase("[daemon]\nsocket = 1\n")),
            "cfg.toml:12: daemon.socket: expected string, got integer");
}

TEST(ConfigDaemon, EmptySocketPathIsRejected) {
  EXPECT_EQ(errorOf(withBase("[daemon]\nsocket = \"\"\n")),
            "cfg.toml:12: daemon.socket: must not be empty");
}

TEST(ConfigDaemon, SocketPathLongerThanSunPathIsRejected) {
  const std::string path = "/" + std::string(107, 'x');
  EXPECT_EQ(errorOf(withBase("[daemon]\nsocket = \"" + path + "\"\n")),
            "cfg.toml:12: daemon.socket: path is 108 bytes; a unix socket path holds at most 107");
  EXPECT_EQ(
      parsedOk(withBase("[daemon]\nsocket = \"" + path.substr(1) + "\"\n")).daemon.socket.size(),
      107u);
}

TEST(ConfigDaemon, SocketPathWithNulIsRejected) {
  EXPECT_EQ(errorOf(withBase("[daemon]\nsocket = \"/tmp/a\\u0000b\"\n")),
            "cfg.toml:12: daemon.socket: path must not contain a NUL byte");
}

TEST(ConfigDaemon, SocketModeIsReadAsOctal) {
  EXPECT_EQ(parsedOk(withBase("[daemon]\nsocket_mode = \"0660\"\n")).daemon.socket_mode, 0660u);
  EXPECT_EQ(parsedOk(withBase("[daemon]\nsocket_mode = \"750\"\n")).daemon.socket_mode, 0750u);
  EXPECT_EQ(parsedOk(withBase("[daemon]\nsocket_mode = \"7777\"\n")).daemon.socket_mode, 07777u);
}

TEST(ConfigDaemon, SocketModeAsAnIntegerIsRejected) {
  EXPECT_EQ(errorOf(withBase("[daemon]\nsocket_mode = 660\n")),
            "cfg.toml:12: daemon.socket_mode: expected string, got integer "
            "(write the mode as octal digits in quotes, e.g. \"0660\")");
}

TEST(ConfigDaemon, SocketModeWithNonOctalDigitsIsRejected) {
  EXPECT_EQ(errorOf(withBase("[daemon]\nsocket_mode = \"0680\"\n")),
            "cfg.toml:12: daemon.socket_mode: expected octal digits like \"0660\", got '0680'");
}

TEST(ConfigDaemon, SocketModeWithMoreThanFourDigitsIsRejected) {
  EXPECT_EQ(errorOf(withBase("[daemon]\nsocket_mode = \"00660\"\n")),
            "cfg.toml:12: daemon.socket_mode: expected octal digits like \"0660\", got '00660'");
}

TEST(ConfigDaemon, EmptySocketModeIsRejected) {
  EXPECT_EQ(errorOf(withBase("[daemon]\nsocket_mode = \"\"\n")),
            "cfg.toml:12: daemon.socket_mode: expected octal digits like \"0660\", got ''");
}

TEST(ConfigDaemon, SocketGroupOfTheWrongTypeIsRejected) {
  EXPECT_EQ(errorOf(withBase("[daemon]\nsocket_group = 100\n")),
            "cfg.toml:12: daemon.socket_group: expected string, got integer");
}

TEST(ConfigDaemon, EveryLogLevelIsAccepted) {
  for (const char* level : {"trace", "debug", "info", "warn", "error", "critical", "off"}) {
    EXPECT_EQ(parsedOk(withBase(std::string("[daemon]\nlog_level = \"") + level + "\"\n"))
                  .daemon.log_level,
              level);
  }
}

TEST(ConfigDaemon, UnknownLogLevelIsRejected) {
  EXPECT_EQ(
      errorOf(withBase("[daemon]\nlog_level = \"verbose\"\n")),
      "cfg.toml:12: daemon.log_level: expected one of trace|debug|info|warn|error|critical|off, "
      "got 'verbose'");
}

TEST(ConfigDaemon, UnknownPolicyIsRejected) {
  EXPECT_EQ(errorOf(withBase("[daemon]\npolicy = \"round-robin\"\n")),
            "cfg.toml:12: daemon.policy: expected one of fair|fifo, got 'round-robin'");
}

TEST(ConfigDaemon, EventLoopDefaultsToAutoAndTakesIoUringOrEpoll) {
  EXPECT_EQ(parsedOk(withBase("")).daemon.event_loop, EventLoopKind::kAuto);
  EXPECT_EQ(parsedOk(withBase("[daemon]\nevent_loop = \"epoll\"\n")).daemon.event_loop,
            EventLoopKind::kEpoll);
  EXPECT_EQ(parsedOk(withBase("[daemon]\nevent_loop = \"io_uring\"\n")).daemon.event_loop,
            EventLoopKind::kIoUring);
  EXPECT_EQ(errorOf(withBase("[daemon]\nevent_loop = \"select\"\n")),
            "cfg.toml:12: daemon.event_loop: expected one of auto|io_uring|epoll, got 'select'");
}

TEST(ConfigDaemon, BusyPollDefaultsTo500UsAndIsBounded) {
  EXPECT_EQ(parsedOk(withBase("")).daemon.busy_poll_us, 500u);
  EXPECT_EQ(parsedOk(withBase("[daemon]\nbusy_poll_us = 0\n")).daemon.busy_poll_us, 0u);
  const std::string err = errorOf(withBase("[daemon]\nbusy_poll_us = 2000000\n"));
  EXPECT_NE(err.find("cfg.toml:12: daemon.busy_poll_us"), std::string::npos) << err;
  config::Config a = parsedOk(withBase("")), b = a;
  b.daemon.busy_poll_us = 0;
  EXPECT_EQ(config::reloadBlockers(a, b), std::vector<std::string>{"daemon.busy_poll_us"});
}

TEST(ConfigDaemon, MaxConnectsPerSecondDefaultsTo500AndIsBoundedAndRestartOnly) {
  EXPECT_EQ(parsedOk(withBase("")).daemon.max_connects_per_s, 500u);
  EXPECT_EQ(parsedOk(withBase("[daemon]\nmax_connects_per_s = 0\n")).daemon.max_connects_per_s, 0u);
  EXPECT_EQ(errorOf(withBase("[daemon]\nmax_connects_per_s = 2000000\n")),
            "cfg.toml:12: daemon.max_connects_per_s: must be at most 1000000, got 2000000");
  EXPECT_EQ(errorOf(withBase("[daemon]\nmax_connects_per_s = \"many\"\n")),
            "cfg.toml:12: daemon.max_connects_per_s: expected integer, got string");
  config::Config a = parsedOk(withBase("")), b = a;
  b.daemon.max_connects_per_s = 10;
  EXPECT_EQ(config::reloadBlockers(a, b), std::vector<std::string>{"daemon.max_connects_per_s"});
}

TEST(ConfigDaemon, PolicyOfTheWrongTypeIsRejected) {
  EXPECT_EQ(errorOf(withBase("[daemon]\npolicy = true\n")),
            "cfg.toml:12: daemon.policy: expected string, got boolean");
}

TEST(ConfigDaemon, NegativeIdleTimeoutIsRejected) {
  EXPECT_EQ(errorOf(withBase("[daemon]\ntenant_idle_timeout_s = -1\n")),
            "cfg.toml:12: daemon.tenant_idle_timeout_s: must not be negative, got -1");
}

TEST(ConfigDaemon, IdleTimeoutPastTheNanosecondRangeIsRejected) {
  EXPECT_EQ(
      errorOf(withBase("[daemon]\ntenant_idle_timeout_s = 9223372037\n")),
      "cfg.toml:12: daemon.tenant_idle_timeout_s: must be at most 9223372036, got 9223372037");
  EXPECT_EQ(parsedOk(withBase("[daemon]\ntenant_idle_timeout_s = 9223372036\n"))
                .daemon.tenant_idle_timeout_s,
            9223372036u);
}

TEST(ConfigDaemon, ZeroIdleTimeoutIsAccepted) {
  EXPECT_EQ(
      parsedOk(withBase("[daemon]\ntenant_idle_timeout_s = 0\n")).daemon.tenant_idle_timeout_s, 0u);
}

TEST(ConfigDaemon, ShutdownGraceAsAStringIsRejected) {
  EXPECT_EQ(errorOf(withBase("[daemon]\nshutdown_grace_ms = \"5s\"\n")),
            "cfg.toml:12: daemon.shutdown_grace_ms: expected integer, got string");
}

TEST(ConfigDaemon, ShutdownGraceAsAFloatIsRejected) {
  EXPECT_EQ(errorOf(withBase("[daemon]\nshutdown_grace_ms = 1.5\n")),
            "cfg.toml:12: daemon.shutdown_grace_ms: expected integer, got float");
}

TEST(ConfigDaemon, ShutdownGracePastTheNanosecondRangeIsRejected) {
  EXPECT_EQ(
      errorOf(withBase("[daemon]\nshutdown_grace_ms = 9223372036855\n")),
      "cfg.toml:12: daemon.shutdown_grace_ms: must be at most 9223372036854, got 9223372036855");
}

// --- [endpoints.NAME] ----------------------------------------------------------

TEST(ConfigEndpoint, UnknownKeyIsRejectedWithItsPath) {
  EXPECT_EQ(errorOf(withBase("[endpoints.x]\nbatch_size = 4\n")),
            "cfg.toml:12: endpoints.x.batch_size: unknown key");
}

TEST(ConfigEndpoint, EndpointThatIsNotATableIsRejected) {
  EXPECT_EQ(errorOf("endpoints = { chat = 1 }\n"),
            "cfg.toml:1: endpoints.chat: expected table, got integer");
}

TEST(ConfigEndpoint, WildcardNameIsRejected) {
  EXPECT_EQ(errorOf(withBase("[endpoints.\"*\"]\n")),
            "cfg.toml:11: endpoints.\"*\": '*' is reserved (it means 'every')");
}

TEST(ConfigEndpoint, NameWithWhiteSpaceIsRejected) {
  EXPECT_EQ(
      errorOf(withBase("[endpoints.\"a b\"]\n")),
      "cfg.toml:11: endpoints.\"a b\": name \"a b\": ' ' at byte 1 is not allowed "
      "(a name is 1 to 63 characters, each an ASCII letter, a digit or one of . _ - : @ / +)");
}

TEST(ConfigEndpoint, EmptyNameIsRejected) {
  EXPECT_EQ(errorOf(withBase("[endpoints.\"\"]\n")),
            "cfg.toml:11: endpoints.\"\": name must not be empty");
}

TEST(ConfigEndpoint, NameLongerThan31BytesIsRejected) {
  const std::string name(32, 'e');
  EXPECT_EQ(errorOf(withBase("[endpoints." + name + "]\n")),
            "cfg.toml:11: endpoints." + name +
                ": name \"eeeeeeeeeeeeeeee...\" is 32 bytes, longer "
                "than 31");
}

TEST(ConfigTenant, NamesWithInvalidUtf8OrEscapesAreRejectedAndShownEscaped) {
  EXPECT_EQ(errorOf(withBase("[tenants.\"\u00e9t\u00e9\"]\n")),
            "cfg.toml:11: tenants.\"\u00e9t\u00e9\": name \"\\xc3\\xa9t\\xc3\\xa9\": '\\xc3' at "
            "byte 0 is not allowed (a name is 1 to 63 characters, each an ASCII letter, a digit or "
            "one of . _ - : @ / +)");
  EXPECT_EQ(
      errorOf(withBase("[[clients]]\nuids = [0]\ntenants = [\"evil\\u001b[2J\"]\n")),
      "cfg.toml:13: clients[0].tenants: name \"evil\\x1b[2J\": '\\x1b' at byte 4 is not "
      "allowed (a name is 1 to 63 characters, each an ASCII letter, a digit or one of . _ - : "
      "@ / +)");
}

TEST(ConfigEndpoint, UnknownKindIsRejected) {
  EXPECT_EQ(errorOf(withBase("[endpoints.x]\nkind = \"offline\"\n")),
            "cfg.toml:12: endpoints.x.kind: expected one of streaming|batch, got 'offline'");
}

TEST(ConfigEndpoint, UnknownCostIsRejected) {
  EXPECT_EQ(errorOf(withBase("[endpoints.x]\ncost = \"bytes\"\n")),
            "cfg.toml:12: endpoints.x.cost: expected one of requests|tokens|adaptive, got 'bytes'");
}

TEST(ConfigEndpoint, UnknownExecutorIsRejected) {
  EXPECT_EQ(errorOf(withBase("[endpoints.x]\nexecutor = \"rocm\"\n")),
            "cfg.toml:12: endpoints.x.executor: expected one of cpu|cuda|worker, got 'rocm'");
}

TEST(ConfigEndpoint, ZeroQuantumIsRejected) {
  EXPECT_EQ(errorOf(withBase("[endpoints.x]\nquantum = 0\n")),
            "cfg.toml:12: endpoints.x.quantum: must be at least 1, got 0");
}

TEST(ConfigEndpoint, ZeroMaxBatchRequestsIsRejected) {
  EXPECT_EQ(errorOf(withBase("[endpoints.x]\nmax_batch_requests = 0\n")),
            "cfg.toml:12: endpoints.x.max_batch_requests: must be at least 1, got 0");
}

TEST(ConfigEndpoint, ZeroMaxBatchTokensIsRejected) {
  EXPECT_EQ(errorOf(withBase("[endpoints.x]\nmax_batch_tokens = 0\n")),
            "cfg.toml:12: endpoints.x.max_batch_tokens: must be at least 1, got 0");
}

TEST(ConfigEndpoint, MaxBatchTokensThatDoesNotFit32BitsIsRejected) {
  EXPECT_EQ(
      errorOf(withBase("[endpoints.x]\nmax_batch_tokens = 4294967296\n")),
      "cfg.toml:12: endpoints.x.max_batch_tokens: must be at most 4294967295, got 4294967296");
  EXPECT_EQ(parsedOk(withBase("[endpoints.x]\nmax_batch_tokens = 4294967295\n"))
                .endpoints[2]
                .max_batch_tokens,
            4294967295u);
}

TEST(ConfigEndpoint, NegativeMaxWaitIsRejected) {
  EXPECT_EQ(errorOf(withBase("[endpoints.x]\nmax_wait_us = -5\n")),
            "cfg.toml:12: endpoints.x.max_wait_us: must not be negative, got -5");
}

TEST(ConfigEndpoint, MaxWaitPastTheNanosecondRangeIsRejected) {
  EXPECT_EQ(errorOf(withBase("[endpoints.x]\nmax_wait_us = 9223372036854776\n")),
            "cfg.toml:12: endpoints.x.max_wait_us: must be at most 9223372036854775, got "
            "9223372036854776");
}

TEST(ConfigEndpoint, NegativeMaxOutputTokensIsRejected) {
  EXPECT_EQ(errorOf(withBase("[endpoints.x]\nmax_output_tokens = -1\n")),
            "cfg.toml:12: endpoints.x.max_output_tokens: must not be negative, got -1");
}

TEST(ConfigEndpoint, ZeroMaxOutputTokensIsAcceptedForEmbeddings) {
  EXPECT_EQ(
      parsedOk(withBase("[endpoints.x]\nmax_output_tokens = 0\n")).endpoints[2].max_output_tokens,
      0u);
}

TEST(ConfigEndpoint, LatencyTargetOfTheWrongTypeIsRejected) {
  EXPECT_EQ(errorOf(withBase("[endpoints.x]\nlatency_target_ms = \"2s\"\n")),
            "cfg.toml:12: endpoints.x.latency_target_ms: expected integer, got string");
}

TEST(ConfigEndpoint, LatencyTargetPastTheNanosecondRangeIsRejected) {
  EXPECT_EQ(errorOf(withBase("[endpoints.x]\nlatency_target_ms = 9223372036855\n")),
            "cfg.toml:12: endpoints.x.latency_target_ms: must be at most 9223372036854, got "
            "9223372036855");
}

TEST(ConfigEndpoint, CpuSectionThatIsNotATableIsRejected) {
  EXPECT_EQ(errorOf(withBase("[endpoints.x]\ncpu = 1\n")),
            "cfg.toml:12: endpoints.x.cpu: expected table, got integer");
}

TEST(ConfigEndpoint, UnknownCpuKeyIsRejected) {
  EXPECT_EQ(errorOf(withBase("[endpoints.x.cpu]\nper_request_us = 1\n")),
            "cfg.toml:12: endpoints.x.cpu.per_request_us: unknown key");
}

TEST(ConfigEndpoint, NegativePerBatchCostIsRejected) {
  EXPECT_EQ(errorOf(withBase("[endpoints.x.cpu]\nper_batch_us = -1.5\n")),
            "cfg.toml:12: endpoints.x.cpu.per_batch_us: must be non-negative and finite, got -1.5");
}

TEST(ConfigEndpoint, NonFinitePerTokenCostIsRejected) {
  EXPECT_EQ(errorOf(withBase("[endpoints.x.cpu]\nper_token_us = nan\n")),
            "cfg.toml:12: endpoints.x.cpu.per_token_us: must be non-negative and finite, got nan");
  EXPECT_EQ(errorOf(withBase("[endpoints.x.cpu]\nper_token_us = inf\n")),
            "cfg.toml:12: endpoints.x.cpu.per_token_us: must be non-negative and finite, got inf");
}

TEST(ConfigEndpoint, PerTokenCostAsAStringIsRejected) {
  EXPECT_EQ(errorOf(withBase("[endpoints.x.cpu]\nper_token_us = \"0.5\"\n")),
            "cfg.toml:12: endpoints.x.cpu.per_token_us: expected float, got string");
}

TEST(ConfigEndpoint, ZeroCpuThreadsIsRejected) {
  EXPECT_EQ(errorOf(withBase("[endpoints.x.cpu]\nthreads = 0\n")),
            "cfg.toml:12: endpoints.x.cpu.threads: must be at least 1, got 0");
}

TEST(ConfigEndpoint, UnknownCudaKeyIsRejected) {
  EXPECT_EQ(errorOf(withBase("[endpoints.x.cuda]\ndevices = 0\n")),
            "cfg.toml:12: endpoints.x.cuda.devices: unknown key (did you mean 'device'?)");
}

TEST(ConfigEndpoint, NegativeCudaDeviceIsRejected) {
  EXPECT_EQ(errorOf(withBase("[endpoints.x.cuda]\ndevice = -1\n")),
            "cfg.toml:12: endpoints.x.cuda.device: must not be negative, got -1");
}

TEST(ConfigEndpoint, CudaDevicePastIntIsRejected) {
  EXPECT_EQ(errorOf(withBase("[endpoints.x.cuda]\ndevice = 2147483648\n")),
            "cfg.toml:12: endpoints.x.cuda.device: must be at most 2147483647, got 2147483648");
}

TEST(ConfigEndpoint, ZeroCudaStreamsIsRejected) {
  EXPECT_EQ(errorOf(withBase("[endpoints.x.cuda]\nstreams = 0\n")),
            "cfg.toml:12: endpoints.x.cuda.streams: must be at least 1, got 0");
}

TEST(ConfigEndpoint, ZeroStagingBytesIsRejected) {
  EXPECT_EQ(errorOf(withBase("[endpoints.x.cuda]\nstaging_bytes = 0\n")),
            "cfg.toml:12: endpoints.x.cuda.staging_bytes: must be at least 1, got 0");
}

TEST(ConfigEndpoint, CudaFallbackOtherThanCpuIsRejected) {
  EXPECT_EQ(errorOf(withBase("[endpoints.x.cuda]\nfallback = \"cuda\"\n")),
            "cfg.toml:12: endpoints.x.cuda.fallback: expected one of cpu, got 'cuda'");
}

TEST(ConfigEndpoint, CudaFallbackIsEmptyUnlessGiven) {
  const Config cfg = parsedOk(withBase("[endpoints.x]\nexecutor = \"cuda\"\n"));
  EXPECT_FALSE(cfg.findEndpoint("x")->cuda.fallback.has_value());
}

TEST(ConfigEndpoint, EndpointsKeepFileOrder) {
  const Config cfg = parsedOk(withBase("[endpoints.aardvark]\n"));
  ASSERT_EQ(cfg.endpoints.size(), 3u);
  EXPECT_EQ(cfg.endpoints[0].name, "chat");
  EXPECT_EQ(cfg.endpoints[1].name, "embed");
  EXPECT_EQ(cfg.endpoints[2].name, "aardvark");
}

TEST(ConfigEndpoint, SourceLinesPointAtTheTableHeaders) {
  const Config cfg = parsedOk(withBase("[tenants.acme]\n[[clients]]\nuids = [0]\n"));
  EXPECT_EQ(cfg.endpoints[0].source_line, 5u);
  EXPECT_EQ(cfg.endpoints[1].source_line, 9u);
  EXPECT_EQ(cfg.tiers[0].source_line, 1u);
  EXPECT_EQ(cfg.tiers[1].source_line, 3u);
  EXPECT_EQ(cfg.tenants[0].source_line, 11u);
  EXPECT_EQ(cfg.clients[0].source_line, 12u);
}

// --- limits ------------------------------------------------------------------

TEST(ConfigLimits, TenantLimitWithUnknownWindowNamesFileLineAndKey) {
  EXPECT_EQ(errorOf(withBase("[tenants.acme]\ntier = \"paid\"\n[tenants.acme.limits]\n"
                             "chat = [\"600 requests/minite\"]\n")),
            "cfg.toml:14: tenants.acme.limits.chat: unknown unit 'minite'");
}

TEST(ConfigLimits, EndpointLimitWithUnknownCostUnitIsRejected) {
  EXPECT_EQ(errorOf(withBase("[endpoints.x]\nlimits = [\"5 x/minute\"]\n")),
            "cfg.toml:12: endpoints.x.limits: unknown unit 'x'");
}

TEST(ConfigLimits, ErrorPointsAtTheLineOfTheBadElement) {
  EXPECT_EQ(errorOf(withBase(
                "[endpoints.x]\nlimits = [\n  \"5 requests/minute\",\n  \"0 tokens/day\",\n]\n")),
            "cfg.toml:14: endpoints.x.limits: amount must be positive");
}

TEST(ConfigLimits, LimitListWrittenAsAStringIsRejected) {
  EXPECT_EQ(errorOf(withBase("[endpoints.x]\nlimits = \"5 requests/minute\"\n")),
            "cfg.toml:12: endpoints.x.limits: expected array of strings, got string");
}

TEST(ConfigLimits, NonStringLimitIsRejected) {
  EXPECT_EQ(
      errorOf(withBase("[endpoints.x]\nlimits = [600]\n")),
      "cfg.toml:12: endpoints.x.limits: expected array of strings, got an element of type integer");
}

TEST(ConfigLimits, DuplicateLimitAtOneLevelIsRejected) {
  EXPECT_EQ(
      errorOf(withBase("[endpoints.x]\nlimits = [\"5 requests/minute\", \"300 requests/60s\"]\n")),
      "cfg.toml:12: endpoints.x.limits: duplicate limit: '300 requests/60s' has the same unit and "
      "window as '5 requests/minute'");
}

TEST(ConfigLimits, SameWindowWithDifferentUnitsIsNotADuplicate) {
  const Config cfg =
      parsedOk(withBase("[endpoints.x]\nlimits = [\"5 requests/minute\", \"5 tokens/minute\"]\n"));
  EXPECT_EQ(cfg.findEndpoint("x")->limits.size(), 2u);
}

TEST(ConfigLimits, TierLimitForUnknownEndpointIsRejected) {
  EXPECT_EQ(errorOf(withBase(
                "[[tiers]]\nname = \"free\"\n[tiers.limits]\nchta = [\"1 request/minute\"]\n")),
            "cfg.toml:14: tiers[2].limits.chta: unknown endpoint 'chta'");
}

TEST(ConfigLimits, TenantLimitForUnknownEndpointIsRejected) {
  EXPECT_EQ(errorOf(withBase("[tenants.acme.limits]\nimage = [\"1 request/minute\"]\n")),
            "cfg.toml:12: tenants.acme.limits.image: unknown endpoint 'image'");
}

TEST(ConfigLimits, LimitsThatAreNotATableAreRejected) {
  EXPECT_EQ(errorOf(withBase("[tenants.acme]\nlimits = [\"1 request/minute\"]\n")),
            "cfg.toml:12: tenants.acme.limits: expected table, got array");
}

TEST(ConfigLimits, UnlimitedWithAUnitAndWindowRemovesThatSlot) {
  const Config cfg =
      parsedOk(withBase("[tenants.acme.limits]\nchat = [\"unlimited requests/minute\"]\n"));
  ASSERT_EQ(cfg.tenants[0].limits.size(), 1u);
  EXPECT_EQ(cfg.tenants[0].limits[0].limits,
            (std::vector<LimitSpec>{limit(LimitUnit::kRequests, 0, kMinute)}));
}

TEST(ConfigLimits, BareUnlimitedAtATierRemovesEveryEndpointDefault) {
  const Config cfg =
      parsedOk(withBase("[[tiers]]\nname = \"internal\"\n[tiers.limits]\n"
                        "chat = [\"unlimited\", \"1M tokens/day\"]\n"));
  const TierConfig* tier = cfg.findTier("internal");
  ASSERT_NE(tier, nullptr);
  ASSERT_EQ(tier->limits.size(), 1u);
  EXPECT_EQ(tier->limits[0].limits,
            (std::vector<LimitSpec>{limit(LimitUnit::kTokens, 1'000'000, kDay),
                                    limit(LimitUnit::kRequests, 0, kMinute)}));
}

TEST(ConfigLimits, BareUnlimitedAtATenantRemovesEndpointAndTierLimits) {
  const Config cfg = parsedOk(R"([[tiers]]
name = "paid"
[tiers.limits]
chat = ["100 requests/minute", "5k tokens/minute"]
[endpoints.chat]
limits = ["600 requests/minute", "10 requests/second"]
[tenants.acme]
tier = "paid"
[tenants.acme.limits]
chat = ["unlimited", "7 requests/second"]
)");
  ASSERT_EQ(cfg.tenants.size(), 1u);
  ASSERT_EQ(cfg.tenants[0].limits.size(), 1u);
  EXPECT_EQ(cfg.tenants[0].limits[0].limits,
            (std::vector<LimitSpec>{limit(LimitUnit::kRequests, 7, kNsPerSec),
                                    limit(LimitUnit::kRequests, 0, kMinute),
                                    limit(LimitUnit::kTokens, 0, kMinute)}));
}

TEST(ConfigLimits, BareUnlimitedAtAnEndpointAddsNothing) {
  const Config cfg = parsedOk(withBase("[endpoints.x]\nlimits = [\"unlimited\"]\n"));
  EXPECT_TRUE(cfg.findEndpoint("x")->limits.empty());
}

TEST(ConfigLimits, UnlimitedAndALimitForTheSameSlotAreDuplicates) {
  EXPECT_EQ(errorOf(withBase("[tenants.acme.limits]\nchat = [\"unlimited requests/minute\", \"5 "
                             "requests/minute\"]\n")),
            "cfg.toml:12: tenants.acme.limits.chat: duplicate limit: '5 requests/minute' has the "
            "same unit and "
            "window as 'unlimited requests/minute'");
}

TEST(ConfigLimits, TwoBareUnlimitedAreDuplicates) {
  EXPECT_EQ(errorOf(withBase("[tenants.acme.limits]\nchat = [\"unlimited\", \" unlimited \"]\n")),
            "cfg.toml:12: tenants.acme.limits.chat: duplicate limit 'unlimited'");
}

TEST(ConfigLimits, UnlimitedWithAnAmountIsRejected) {
  EXPECT_EQ(
      errorOf(withBase("[tenants.acme.limits]\nchat = [\"unlimited 5 requests/minute\"]\n")),
      "cfg.toml:12: tenants.acme.limits.chat: expected 'unlimited' or 'unlimited <unit>/<window>', "
      "got 'unlimited 5 requests/minute'");
}

TEST(ConfigLimits, UnlimitedWithAnUnknownWindowNamesIt) {
  EXPECT_EQ(errorOf(withBase("[tenants.acme.limits]\nchat = [\"unlimited requests/minite\"]\n")),
            "cfg.toml:12: tenants.acme.limits.chat: unknown unit 'minite'");
}

TEST(ConfigLimits, WordStartingWithUnlimitedIsNotUnlimited) {
  EXPECT_EQ(errorOf(withBase("[tenants.acme.limits]\nchat = [\"unlimitedrequests/minute\"]\n")),
            "cfg.toml:12: tenants.acme.limits.chat: expected an amount, got 'unlimitedrequests'");
}

// --- [[tiers]] -----------------------------------------------------------------

TEST(ConfigTier, TierWithoutANameIsRejected) {
  EXPECT_EQ(errorOf(withBase("[[tiers]]\nmin_share = 0.1\n")),
            "cfg.toml:11: tiers[2].name: missing required key");
}

TEST(ConfigTier, TierThatIsNotATableIsRejected) {
  EXPECT_EQ(errorOf("tiers = [\"paid\"]\n[endpoints.chat]\n"),
            "cfg.toml:1: tiers[0]: expected table, got string");
}

TEST(ConfigTier, TierNameOfTheWrongTypeIsRejected) {
  EXPECT_EQ(errorOf(withBase("[[tiers]]\nname = 3\n")),
            "cfg.toml:12: tiers[2].name: expected string, got integer");
}

TEST(ConfigTier, DuplicateTierNameIsRejected) {
  EXPECT_EQ(errorOf(withBase("[[tiers]]\nname = \"paid\"\n")),
            "cfg.toml:12: tiers[2].name: duplicate tier name 'paid'");
}

TEST(ConfigTier, WildcardTierNameIsRejected) {
  EXPECT_EQ(errorOf(withBase("[[tiers]]\nname = \"*\"\n")),
            "cfg.toml:12: tiers[2].name: '*' is reserved (it means 'every')");
}

TEST(ConfigTier, UnknownTierKeyIsRejected) {
  EXPECT_EQ(errorOf(withBase("[[tiers]]\nname = \"x\"\nweight = 2\n")),
            "cfg.toml:13: tiers[2].weight: unknown key");
}

TEST(ConfigTier, NegativeMinShareIsRejected) {
  EXPECT_EQ(errorOf(withBase("[[tiers]]\nname = \"x\"\nmin_share = -0.1\n")),
            "cfg.toml:13: tiers[2].min_share: must be in [0, 1), got -0.1");
}

TEST(ConfigTier, MinShareOfOneIsRejected) {
  EXPECT_EQ(errorOf(withBase("[[tiers]]\nname = \"x\"\nmin_share = 1\n")),
            "cfg.toml:13: tiers[2].min_share: must be in [0, 1), got 1");
}

TEST(ConfigTier, NanMinShareIsRejected) {
  EXPECT_EQ(errorOf(withBase("[[tiers]]\nname = \"x\"\nmin_share = nan\n")),
            "cfg.toml:13: tiers[2].min_share: must be in [0, 1), got nan");
}

TEST(ConfigTier, MinSharesAddingUpToOneAreRejected) {
  EXPECT_EQ(
      errorOf(withBase(
          "[[tiers]]\nname = \"x\"\nmin_share = 0.5\n[[tiers]]\nname = \"y\"\nmin_share = 0.5\n")),
      "cfg.toml:16: tiers[3].min_share: the min_share of all tiers must add up to less than 1, got "
      "1");
}

TEST(ConfigTier, MinSharesJustBelowOneAreAccepted) {
  const Config cfg = parsedOk(withBase(
      "[[tiers]]\nname = \"x\"\nmin_share = 0.5\n[[tiers]]\nname = \"y\"\nmin_share = 0.49\n"));
  EXPECT_EQ(cfg.tiers.size(), 4u);
}

TEST(ConfigTier, ZeroDefaultWeightIsRejected) {
  EXPECT_EQ(errorOf(withBase("[[tiers]]\nname = \"x\"\ndefault_weight = 0\n")),
            "cfg.toml:13: tiers[2].default_weight: must be positive and finite, got 0");
}

TEST(ConfigTier, InfiniteDefaultWeightIsRejected) {
  EXPECT_EQ(errorOf(withBase("[[tiers]]\nname = \"x\"\ndefault_weight = inf\n")),
            "cfg.toml:13: tiers[2].default_weight: must be positive and finite, got inf");
}

TEST(ConfigTier, ZeroDefaultQueueLimitIsRejected) {
  EXPECT_EQ(errorOf(withBase("[[tiers]]\nname = \"x\"\ndefault_queue_limit = 0\n")),
            "cfg.toml:13: tiers[2].default_queue_limit: must be at least 1, got 0");
}

TEST(ConfigTier, MaxBatchTokensIsReadAndNegativeIsRejected) {
  const Config cfg = parsedOk(withBase("[[tiers]]\nname = \"x\"\nmax_batch_tokens = 1024\n"));
  EXPECT_EQ(cfg.tiers[2].max_batch_tokens, 1024u);
  EXPECT_EQ(cfg.tiers[0].max_batch_tokens, 0u);
  EXPECT_EQ(errorOf(withBase("[[tiers]]\nname = \"x\"\nmax_batch_tokens = -1\n")),
            "cfg.toml:13: tiers[2].max_batch_tokens: must not be negative, got -1");
}

TEST(ConfigEndpoint, BatchTimeoutDefaultsTo30SecondsAndZeroTurnsItOff) {
  EXPECT_EQ(parsedOk(withBase("")).endpoints[0].batch_timeout_ms, 30000u);
  EXPECT_EQ(errorOf(withBase("[endpoints.x]\nbatch_timeout_ms = -5\n")),
            "cfg.toml:12: endpoints.x.batch_timeout_ms: must not be negative, got -5");
}

TEST(ConfigTier, TiersKeepTheirOrder) {
  const Config cfg = parsedOk(withBase("[[tiers]]\nname = \"aaa\"\n"));
  ASSERT_EQ(cfg.tiers.size(), 3u);
  EXPECT_EQ(cfg.tiers[2].name, "aaa");
}

// --- default_tier ------------------------------------------------------------

TEST(ConfigDefaultTier, DefaultsToTheLastTier) {
  EXPECT_EQ(parsedOk(kBase).default_tier, "trial");
}

TEST(ConfigDefaultTier, NamedTierIsUsed) {
  EXPECT_EQ(parsedOk("default_tier = \"paid\"\n" + std::string(kBase)).default_tier, "paid");
}

TEST(ConfigDefaultTier, UnknownTierIsRejected) {
  EXPECT_EQ(errorOf("default_tier = \"gold\"\n" + std::string(kBase)),
            "cfg.toml:1: default_tier: unknown tier 'gold'");
}

TEST(ConfigDefaultTier, WrongTypeIsRejected) {
  EXPECT_EQ(errorOf("default_tier = 1\n" + std::string(kBase)),
            "cfg.toml:1: default_tier: expected string, got integer");
}

// --- [tenants.NAME] --------------------------------------------------------------

TEST(ConfigTenant, TenantWithoutATierGetsTheDefaultTier) {
  const Config cfg =
      parsedOk("default_tier = \"paid\"\n" + std::string(kBase) + "[tenants.acme]\n");
  EXPECT_EQ(cfg.findTenant("acme")->tier, "paid");
  EXPECT_FALSE(cfg.findTenant("acme")->weight.has_value());
  EXPECT_FALSE(cfg.findTenant("acme")->queue_limit.has_value());
}

TEST(ConfigTenant, UnknownTierIsRejected) {
  EXPECT_EQ(errorOf(withBase("[tenants.acme]\ntier = \"gold\"\n")),
            "cfg.toml:12: tenants.acme.tier: unknown tier 'gold'");
}

TEST(ConfigTenant, UnknownKeyIsRejected) {
  EXPECT_EQ(errorOf(withBase("[tenants.acme]\nwieght = 2\n")),
            "cfg.toml:12: tenants.acme.wieght: unknown key (did you mean 'weight'?)");
}

TEST(ConfigTenant, ZeroWeightIsRejected) {
  EXPECT_EQ(errorOf(withBase("[tenants.acme]\nweight = 0.0\n")),
            "cfg.toml:12: tenants.acme.weight: must be positive and finite, got 0");
}

TEST(ConfigTenant, NegativeWeightIsRejected) {
  EXPECT_EQ(errorOf(withBase("[tenants.acme]\nweight = -2\n")),
            "cfg.toml:12: tenants.acme.weight: must be positive and finite, got -2");
}

TEST(ConfigTenant, NanWeightIsRejected) {
  EXPECT_EQ(errorOf(withBase("[tenants.acme]\nweight = nan\n")),
            "cfg.toml:12: tenants.acme.weight: must be positive and finite, got nan");
}

TEST(ConfigTenant, WeightAsAStringIsRejected) {
  EXPECT_EQ(errorOf(withBase("[tenants.acme]\nweight = \"2\"\n")),
            "cfg.toml:12: tenants.acme.weight: expected float, got string");
}

TEST(ConfigTenant, IntegerWeightIsAccepted) {
  EXPECT_EQ(parsedOk(withBase("[tenants.acme]\nweight = 3\n")).findTenant("acme")->weight, 3.0);
}

TEST(ConfigTenant, ZeroQueueLimitIsRejected) {
  EXPECT_EQ(errorOf(withBase("[tenants.acme]\nqueue_limit = 0\n")),
            "cfg.toml:12: tenants.acme.queue_limit: must be at least 1, got 0");
}

TEST(ConfigTenant, QueueLimitThatDoesNotFit32BitsIsRejected) {
  EXPECT_EQ(errorOf(withBase("[tenants.acme]\nqueue_limit = 4294967296\n")),
            "cfg.toml:12: tenants.acme.queue_limit: must be at most 4294967295, got 4294967296");
}

TEST(ConfigTenant, TenantThatIsNotATableIsRejected) {
  EXPECT_EQ(errorOf(withBase("[tenants]\nacme = \"paid\"\n")),
            "cfg.toml:12: tenants.acme: expected table, got string");
}

TEST(ConfigTenant, TenantsThatAreNotATableAreRejected) {
  EXPECT_EQ(errorOf("tenants = []\n" + std::string(kBase)),
            "cfg.toml:1: tenants: expected table, got array");
}

TEST(ConfigTenant, WildcardTenantNameIsRejected) {
  EXPECT_EQ(errorOf(withBase("[tenants.\"*\"]\n")),
            "cfg.toml:11: tenants.\"*\": '*' is reserved (it means 'every')");
}

TEST(ConfigTenant, ControlCharacterInANameIsEscapedInTheMessage) {
  EXPECT_EQ(
      errorOf(withBase("[tenants.\"a\\u0001\"]\n")),
      "cfg.toml:11: tenants.\"a\\x01\": name \"a\\x01\": '\\x01' at byte 1 is not allowed "
      "(a name is 1 to 63 characters, each an ASCII letter, a digit or one of . _ - : @ / +)");
}

TEST(ConfigTenant, DottedNamesAreQuotedInKeyPaths) {
  EXPECT_EQ(errorOf(withBase("[tenants.\"org.one\"]\nweight = 0\n")),
            "cfg.toml:12: tenants.\"org.one\".weight: must be positive and finite, got 0");
  EXPECT_NE(parsedOk(withBase("[tenants.\"org.one\"]\n")).findTenant("org.one"), nullptr);
}

TEST(ConfigTenant, TenantsKeepFileOrder) {
  const Config cfg = parsedOk(withBase("[tenants.zeta]\n[tenants.alpha]\n[tenants.mid]\n"));
  ASSERT_EQ(cfg.tenants.size(), 3u);
  EXPECT_EQ(cfg.tenants[0].name, "zeta");
  EXPECT_EQ(cfg.tenants[1].name, "alpha");
  EXPECT_EQ(cfg.tenants[2].name, "mid");
}

// --- [[clients]] -----------------------------------------------------------------

TEST(ConfigClient, RuleGetsDefaults) {
  const Config cfg = parsedOk(withBase("[[clients]]\nuids = [1000, 1000, 7]\n"));
  ASSERT_EQ(cfg.clients.size(), 1u);
  const ClientRule& rule = cfg.clients[0];
  EXPECT_EQ(rule.name, "clients[0]");
  EXPECT_EQ(rule.uids, (std::vector<std::uint32_t>{1000, 7}));
  EXPECT_TRUE(rule.tenants.empty());
  EXPECT_EQ(rule.endpoints, (std::vector<std::string>{"*"}));
  EXPECT_TRUE(rule.assign_tiers.empty());
  EXPECT_FALSE(rule.admin);
}

TEST(ConfigClient, ClientsWrittenAsATableAreRejected) {
  EXPECT_EQ(
      errorOf(withBase("[clients]\nuids = [0]\n")),
      "cfg.toml:11: clients: expected array of tables (write each rule as [[clients]]), got table");
}

TEST(ConfigClient, RuleThatIsNotATableIsRejected) {
  EXPECT_EQ(errorOf("clients = [1]\n" + std::string(kBase)),
            "cfg.toml:1: clients[0]: expected table, got integer");
}

TEST(ConfigClient, UnknownKeyIsRejected) {
  EXPECT_EQ(errorOf(withBase("[[clients]]\nuids = [0]\nuser = [\"root\"]\n")),
            "cfg.toml:13: clients[0].user: unknown key (did you mean 'users'?)");
}

TEST(ConfigClient, RuleMatchingNobodyIsRejected) {
  EXPECT_EQ(
      errorOf(withBase("[[clients]]\nname = \"nobody\"\ntenants = [\"*\"]\n")),
      "cfg.toml:11: clients[0]: the rule matches no client: give uids, gids, users or groups");
}

TEST(ConfigClient, EmptyNameIsRejected) {
  EXPECT_EQ(errorOf(withBase("[[clients]]\nname = \"\"\nuids = [0]\n")),
            "cfg.toml:12: clients[0].name: name must not be empty");
}

TEST(ConfigClient, NegativeUidIsRejected) {
  EXPECT_EQ(errorOf(withBase("[[clients]]\nuids = [-1]\n")),
            "cfg.toml:12: clients[0].uids: must not be negative, got -1");
}

TEST(ConfigClient, UidThatDoesNotFit32BitsIsRejected) {
  EXPECT_EQ(errorOf(withBase("[[clients]]\nuids = [4294967296]\n")),
            "cfg.toml:12: clients[0].uids: must be at most 4294967295, got 4294967296");
}

TEST(ConfigClient, UidAsAStringIsRejected) {
  EXPECT_EQ(
      errorOf(withBase("[[clients]]\nuids = [\"1000\"]\n")),
      "cfg.toml:12: clients[0].uids: expected array of integers, got an element of type string");
}

TEST(ConfigClient, GidsThatAreNotAnArrayAreRejected) {
  EXPECT_EQ(errorOf(withBase("[[clients]]\ngids = 5\n")),
            "cfg.toml:12: clients[0].gids: expected array of integers, got integer");
}

TEST(ConfigClient, UsersAndGroupsAreResolved) {
  const Config cfg = parsedOk(withBase("[[clients]]\nusers = [\"root\"]\ngroups = [\"root\"]\n"));
  EXPECT_EQ(cfg.clients[0].uids, (std::vector<std::uint32_t>{0}));
  EXPECT_EQ(cfg.clients[0].gids, (std::vector<std::uint32_t>{0}));
}

TEST(ConfigClient, UnknownUserIsRejected) {
  EXPECT_EQ(errorOf(withBase("[[clients]]\nusers = [\"root\",\n  \"no-such-user-fs\"]\n")),
            "cfg.toml:13: clients[0].users: unknown user 'no-such-user-fs'");
}

TEST(ConfigClient, UnknownGroupIsRejected) {
  EXPECT_EQ(errorOf(withBase("[[clients]]\ngroups = [\"no-such-group-fs\"]\n")),
            "cfg.toml:12: clients[0].groups: unknown group 'no-such-group-fs'");
}

TEST(ConfigClient, UserNameWithANulIsUnknown) {
  EXPECT_EQ(errorOf(withBase("[[clients]]\nusers = [\"root\\u0000x\"]\n")),
            "cfg.toml:12: clients[0].users: unknown user 'root\\x00x'");
}

TEST(ConfigClient, UsersAsAStringIsRejected) {
  EXPECT_EQ(errorOf(withBase("[[clients]]\nusers = \"root\"\n")),
            "cfg.toml:12: clients[0].users: expected array of strings, got string");
}

// A user database of a few names; every lookup it is asked is recorded.
class FakeAccounts final : public AccountLookup {
 public:
  std::map<std::string, AccountId, std::less<>> users;
  std::map<std::string, AccountId, std::less<>> groups;
  mutable std::vector<std::string> asked;

  AccountId user(std::string_view name) const override { return find(users, name); }
  AccountId group(std::string_view name) const override { return find(groups, name); }

 private:
  AccountId find(const std::map<std::string, AccountId, std::less<>>& db,
                 std::string_view name) const {
    asked.emplace_back(name);
    const auto it = db.find(name);
    return it == db.end() ? AccountId::notFound() : it->second;
  }
};

std::string errorWith(const AccountLookup& accounts, std::string_view text) {
  auto r = parseConfig(text, "cfg.toml", accounts);
  if (auto* e = r.errorOrNull()) return e->toString();
  return "<no error>";
}

TEST(ConfigClient, UsersAndGroupsResolveThroughTheGivenLookup) {
  FakeAccounts accounts;
  accounts.users["alice"] = AccountId::found(1001);
  accounts.groups["ml-team"] = AccountId::found(2002);
  auto r = parseConfig(withBase("[[clients]]\nusers = [\"alice\"]\ngroups = [\"ml-team\"]\n"),
                       "cfg.toml", accounts);
  ASSERT_TRUE(r.ok()) << r.error().toString();
  const Config& cfg = r.value();
  EXPECT_EQ(cfg.clients[0].uids, (std::vector<std::uint32_t>{1001}));
  EXPECT_EQ(cfg.clients[0].gids, (std::vector<std::uint32_t>{2002}));
  EXPECT_EQ(accounts.asked, (std::vector<std::string>{"alice", "ml-team"}));
}

TEST(ConfigClient, UserTheGivenLookupDoesNotKnowIsRejected) {
  FakeAccounts accounts;  // knows no one, not even root
  accounts.users["alice"] = AccountId::found(1001);
  EXPECT_EQ(errorWith(accounts, withBase("[[clients]]\nusers = [\"alice\",\n  \"root\"]\n")),
            "cfg.toml:13: clients[0].users: unknown user 'root'");
  EXPECT_EQ(errorWith(accounts, withBase("[[clients]]\ngroups = [\"alice\"]\n")),
            "cfg.toml:12: clients[0].groups: unknown group 'alice'");
}

TEST(ConfigClient, FailedLookupIsRejectedWithItsErrno) {
  FakeAccounts accounts;
  accounts.users["bob"] = AccountId::failed(EIO);
  EXPECT_EQ(errorWith(accounts, withBase("[[clients]]\nusers = [\"bob\"]\n")),
            "cfg.toml:12: clients[0].users: cannot look up user 'bob': " +
                std::string(std::strerror(EIO)));
}

TEST(ConfigClient, EmptyUserNameIsUnknownWithoutALookup) {
  FakeAccounts accounts;
  EXPECT_EQ(errorWith(accounts, withBase("[[clients]]\nusers = [\"\"]\n")),
            "cfg.toml:12: clients[0].users: unknown user ''");
  EXPECT_TRUE(accounts.asked.empty());
}

TEST(ConfigClient, TenantsMayNameUnlistedTenantsAndTheWildcard) {
  const Config cfg =
      parsedOk(withBase("[[clients]]\nuids = [0]\ntenants = [\"*\", \"org-123\"]\n"));
  EXPECT_EQ(cfg.clients[0].tenants, (std::vector<std::string>{"*", "org-123"}));
}

TEST(ConfigClient, TenantNameWithWhiteSpaceIsRejected) {
  EXPECT_EQ(
      errorOf(withBase("[[clients]]\nuids = [0]\ntenants = [\"a b\"]\n")),
      "cfg.toml:13: clients[0].tenants: name \"a b\": ' ' at byte 1 is not allowed "
      "(a name is 1 to 63 characters, each an ASCII letter, a digit or one of . _ - : @ / +)");
}

TEST(ConfigClient, UnknownEndpointIsRejected) {
  EXPECT_EQ(errorOf(withBase("[[clients]]\nuids = [0]\nendpoints = [\"chat\", \"image\"]\n")),
            "cfg.toml:13: clients[0].endpoints: unknown endpoint 'image'");
}

TEST(ConfigClient, ListedEndpointsReplaceTheWildcardDefault) {
  const Config cfg = parsedOk(withBase("[[clients]]\nuids = [0]\nendpoints = [\"embed\"]\n"));
  EXPECT_EQ(cfg.clients[0].endpoints, (std::vector<std::string>{"embed"}));
}

TEST(ConfigClient, UnknownAssignTierIsRejected) {
  EXPECT_EQ(errorOf(withBase("[[clients]]\nuids = [0]\nassign_tiers = [\"gold\"]\n")),
            "cfg.toml:13: clients[0].assign_tiers: unknown tier 'gold'");
}

TEST(ConfigClient, WildcardAssignTiersExpandsToEveryTier) {
  const Config cfg =
      parsedOk(withBase("[[clients]]\nuids = [0]\nassign_tiers = [\"trial\", \"*\"]\n"));
  EXPECT_EQ(cfg.clients[0].assign_tiers, (std::vector<std::string>{"trial", "paid"}));
}

TEST(ConfigClient, AdminOfTheWrongTypeIsRejected) {
  EXPECT_EQ(errorOf(withBase("[[clients]]\nuids = [0]\nadmin = \"yes\"\n")),
            "cfg.toml:13: clients[0].admin: expected boolean, got string");
}

TEST(ConfigClient, SecondRuleIsIndexedInThePath) {
  EXPECT_EQ(errorOf(withBase("[[clients]]\nuids = [0]\n[[clients]]\nuids = [-3]\n")),
            "cfg.toml:14: clients[1].uids: must not be negative, got -3");
}

// --- helpers, inputs and the shipped config ------------------------------------

TEST(ConfigErrorText, ToStringOmitsALineOfZero) {
  EXPECT_EQ((ConfigError{"cfg.toml", 0, "tiers", "at least one tier is required"}.toString()),
            "cfg.toml: tiers: at least one tier is required");
  EXPECT_EQ((ConfigError{"cfg.toml", 7, "daemon.socket", "must not be empty"}.toString()),
            "cfg.toml:7: daemon.socket: must not be empty");
  EXPECT_EQ((ConfigError{"cfg.toml", 3, "", "bad syntax"}.toString()), "cfg.toml:3: bad syntax");
}

TEST(ConfigResolvedQuantum, ExplicitQuantumWins) {
  EndpointConfig ep;
  ep.quantum = 77;
  EXPECT_EQ(ep.resolvedQuantum(), 77u);
}

TEST(ConfigResolvedQuantum, StreamingGrantsAboutOneRequest) {
  EndpointConfig ep;
  ep.kind = EndpointKind::kStreaming;
  ep.max_batch_requests = 32;
  ep.max_batch_tokens = 16384;
  ep.cost = CostModel::kTokens;
  EXPECT_EQ(ep.resolvedQuantum(), 512u);
  ep.cost = CostModel::kAdaptive;
  EXPECT_EQ(ep.resolvedQuantum(), 512u);
  ep.cost = CostModel::kRequests;
  EXPECT_EQ(ep.resolvedQuantum(), 1u);
}

TEST(ConfigResolvedQuantum, StreamingNeverResolvesToZero) {
  EndpointConfig ep;
  ep.max_batch_requests = 64;
  ep.max_batch_tokens = 8;
  EXPECT_EQ(ep.resolvedQuantum(), 1u);
}

TEST(ConfigResolvedQuantum, BatchGrantsAFullBatch) {
  EndpointConfig ep;
  ep.kind = EndpointKind::kBatch;
  ep.max_batch_requests = 32;
  ep.max_batch_tokens = 16384;
  ep.cost = CostModel::kTokens;
  EXPECT_EQ(ep.resolvedQuantum(), 16384u);
  ep.cost = CostModel::kRequests;
  EXPECT_EQ(ep.resolvedQuantum(), 32u);
}

TEST(ConfigFind, FindsByNameOrReturnsNull) {
  const Config cfg = parsedOk(withBase("[tenants.acme]\n"));
  ASSERT_NE(cfg.findTier("trial"), nullptr);
  EXPECT_EQ(cfg.findTier("trial")->name, "trial");
  EXPECT_EQ(cfg.findTier("gold"), nullptr);
  ASSERT_NE(cfg.findEndpoint("embed"), nullptr);
  EXPECT_EQ(cfg.findEndpoint("embed")->kind, EndpointKind::kBatch);
  EXPECT_EQ(cfg.findEndpoint("image"), nullptr);
  ASSERT_NE(cfg.findTenant("acme"), nullptr);
  EXPECT_EQ(cfg.findTenant("globex"), nullptr);
}

TEST(ConfigInput, ParsesFromAStream) {
  std::istringstream in(withBase("[daemon]\npolicy = \"fifo\"\n"));
  auto r = parseConfig(in, "stream.toml");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().daemon.policy, Policy::kFifo);
}

TEST(ConfigInput, StreamErrorsCarryTheSourceName) {
  std::istringstream in(withBase("[daemon]\npolicy = \"x\"\n"));
  auto r = parseConfig(in, "stream.toml");
  ASSERT_TRUE(!r.ok());
  EXPECT_EQ(r.error().toString(),
            "stream.toml:12: daemon.policy: expected one of fair|fifo, got 'x'");
}

TEST(ConfigInput, DefaultSourceNameIsString) {
  auto r = parseConfig(std::string_view("tiers = 1"));
  ASSERT_TRUE(!r.ok());
  EXPECT_EQ(r.error().file, "<string>");
}

TEST(ConfigInput, MissingFileIsAnError) {
  auto r = loadConfigFile("/nonexistent/fairsched.toml");
  ASSERT_TRUE(!r.ok());
  EXPECT_EQ(r.error().toString(),
            "/nonexistent/fairsched.toml: cannot open: No such file or directory");
}

TEST(ConfigInput, InvalidUtf8IsASyntaxErrorNotACrash) {
  auto r = parseConfig(std::string_view("name = \"\xff\xfe\"\n"), "cfg.toml");
  ASSERT_TRUE(!r.ok());
  EXPECT_EQ(r.error().line, 1u);
}

TEST(ConfigShipped, DefaultConfigParses) {
  auto r = loadConfigFile(FAIRSCHED_SOURCE_DIR "/config/fairsched.toml");
  if (auto* e = r.errorOrNull()) FAIL() << e->toString();
  const Config& cfg = r.value();
  ASSERT_EQ(cfg.tiers.size(), 2u);
  EXPECT_EQ(cfg.tiers[0].name, "paid");
  EXPECT_EQ(cfg.tiers[1].name, "trial");
  EXPECT_EQ(cfg.tiers[1].min_share, 0.1);
  const EndpointConfig* chat = cfg.findEndpoint("chat");
  const EndpointConfig* embed = cfg.findEndpoint("embed");
  ASSERT_NE(chat, nullptr);
  ASSERT_NE(embed, nullptr);
  EXPECT_EQ(chat->kind, EndpointKind::kStreaming);
  EXPECT_EQ(chat->cost, CostModel::kTokens);
  // chat is served by workers; the demo starts the reference worker on it.
  EXPECT_EQ(chat->executor, ExecutorKind::kWorker);
  EXPECT_EQ(chat->engine.max_sequences, 32u);
  EXPECT_EQ(cfg.clients.front().workers, std::vector<std::string>{"chat"});
  EXPECT_EQ(embed->kind, EndpointKind::kBatch);
  EXPECT_EQ(embed->executor, ExecutorKind::kCpu);
  EXPECT_EQ(cfg.daemon.socket, "/run/fairsched/fairsched.sock");
  // The noisy-neighbor benchmark needs A and B alike.
  const TenantConfig* a = cfg.findTenant("A");
  const TenantConfig* b = cfg.findTenant("B");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(a->tier, b->tier);
  EXPECT_EQ(a->weight, b->weight);
  ASSERT_NE(cfg.findTenant("acme"), nullptr);
  ASSERT_NE(cfg.findTenant("globex"), nullptr);
  ASSERT_NE(cfg.findTenant("initech"), nullptr);
  EXPECT_EQ(cfg.findTenant("initech")->tier, "trial");
  ASSERT_FALSE(cfg.clients.empty());
  const ClientRule& root = cfg.clients[0];
  EXPECT_EQ(root.uids, (std::vector<std::uint32_t>{0}));
  EXPECT_EQ(root.tenants, (std::vector<std::string>{"*"}));
  EXPECT_EQ(root.endpoints, (std::vector<std::string>{"*"}));
  EXPECT_TRUE(root.admin);
}

RC_GTEST_PROP(ConfigProperty, ArbitraryTextNeverThrowsAndErrorsNameTheSource, (std::string text)) {
  auto r = parseConfig(text, "fuzz.toml");
  if (auto* e = r.errorOrNull()) {
    RC_ASSERT(e->file == "fuzz.toml");
    RC_ASSERT(!e->message.empty());
  }
}

RC_GTEST_PROP(ConfigProperty, AnyValidSocketModeRoundTrips, (std::uint16_t seed)) {
  const std::uint32_t mode = seed & 07777u;
  char digits[8];
  std::snprintf(digits, sizeof digits, "%04o", mode);
  auto r = parseConfig(withBase(std::string("[daemon]\nsocket_mode = \"") + digits + "\"\n"),
                       "cfg.toml");
  RC_ASSERT(r.ok());
  RC_ASSERT(r.value().daemon.socket_mode == mode);
}

// --- [metrics] -----------------------------------------------------------------

TEST(ConfigMetrics, AbsentTableMeansNoEndpoint) {
  const Config cfg = parsedOk(kBase);
  EXPECT_TRUE(cfg.metrics.listen.empty());
  EXPECT_EQ(cfg.metrics.max_tenant_series, 100u);
  EXPECT_FALSE(cfg.metrics.allow_non_loopback);
}

TEST(ConfigMetrics, LoopbackAddressesAreAccepted) {
  for (const char* listen : {"127.0.0.1:9464", "127.1.2.3:0", "[::1]:9464", "localhost:65535"}) {
    const Config cfg = parsedOk(withBase(std::string("[metrics]\nlisten = \"") + listen + "\"\n"));
    EXPECT_EQ(cfg.metrics.listen, listen);
  }
}

TEST(ConfigMetrics, EmptyListenIsOff) {
  const Config cfg = parsedOk(withBase("[metrics]\nlisten = \"\"\nmax_tenant_series = 5\n"));
  EXPECT_TRUE(cfg.metrics.listen.empty());
  EXPECT_EQ(cfg.metrics.max_tenant_series, 5u);
}

TEST(ConfigMetrics, NonLoopbackAddressNeedsExplicitPermission) {
  EXPECT_EQ(errorOf(withBase("[metrics]\nlisten = \"0.0.0.0:9464\"\n")),
            "cfg.toml:12: metrics.listen: '0.0.0.0' is not a loopback address; the metrics name "
            "every tenant, so set metrics.allow_non_loopback = true to serve them beyond this "
            "host");
  EXPECT_EQ(errorOf(withBase("[metrics]\nlisten = \"[::]:9464\"\n")),
            "cfg.toml:12: metrics.listen: '::' is not a loopback address; the metrics name "
            "every tenant, so set metrics.allow_non_loopback = true to serve them beyond this "
            "host");
  // Permission written after the address counts too.
  const Config cfg =
      parsedOk(withBase("[metrics]\nlisten = \"10.0.0.7:9464\"\nallow_non_loopback = true\n"));
  EXPECT_EQ(cfg.metrics.listen, "10.0.0.7:9464");
  EXPECT_TRUE(cfg.metrics.allow_non_loopback);
}

TEST(ConfigMetrics, MalformedListenIsRejected) {
  const std::string expected =
      "expected HOST:PORT with an IP address or localhost (e.g. \"127.0.0.1:9464\" or "
      "\"[::1]:9464\"), got ";
  EXPECT_EQ(errorOf(withBase("[metrics]\nlisten = \"9464\"\n")),
            "cfg.toml:12: metrics.listen: " + expected + "'9464'");
  EXPECT_EQ(errorOf(withBase("[metrics]\nlisten = \"metrics.example:9464\"\n")),
            "cfg.toml:12: metrics.listen: " + expected + "'metrics.example:9464'");
  EXPECT_EQ(errorOf(withBase("[metrics]\nlisten = \"::1:9464\"\n")),
            "cfg.toml:12: metrics.listen: " + expected + "'::1:9464'");
  EXPECT_EQ(errorOf(withBase("[metrics]\nlisten = \"127.0.0.1:65536\"\n")),
            "cfg.toml:12: metrics.listen: port must be a number from 0 to 65535, got '65536'");
  EXPECT_EQ(errorOf(withBase("[metrics]\nlisten = \"127.0.0.1:\"\n")),
            "cfg.toml:12: metrics.listen: port must be a number from 0 to 65535, got ''");
  EXPECT_EQ(errorOf(withBase("[metrics]\nlisten = 9464\n")),
            "cfg.toml:12: metrics.listen: expected string, got integer");
}

TEST(ConfigMetrics, OtherKeysAreChecked) {
  EXPECT_EQ(errorOf(withBase("[metrics]\nmax_tenant_series = 100001\n")),
            "cfg.toml:12: metrics.max_tenant_series: must be at most 100000, got 100001");
  EXPECT_EQ(errorOf(withBase("[metrics]\nallow_non_loopback = \"yes\"\n")),
            "cfg.toml:12: metrics.allow_non_loopback: expected boolean, got string");
  EXPECT_EQ(errorOf(withBase("[metrics]\nlisen = \"127.0.0.1:1\"\n")),
            "cfg.toml:12: metrics.lisen: unknown key (did you mean 'listen'?)");
  EXPECT_EQ(errorOf(std::string("metrics = 1\n") + std::string(kBase)),
            "cfg.toml:1: metrics: expected table, got integer");
}

}  // namespace
}  // namespace fairsched::config

// --- fleet ---------------------------------------------------------------------

namespace fairsched::config {
namespace {

constexpr std::string_view kFleet = "[fleet]\nurl = \"redis://127.0.0.1:6380\"\n";

TEST(ConfigFleet, AbsentFleetTableLeavesItUnset) {
  EXPECT_FALSE(parsedOk(kBase).fleet.has_value());
}

TEST(ConfigFleet, DefaultsApplyToAMinimalTable) {
  const Config cfg = parsedOk(withBase(kFleet));
  ASSERT_TRUE(cfg.fleet.has_value());
  ASSERT_EQ(cfg.fleet->nodes.size(), 1u);
  EXPECT_EQ(cfg.fleet->nodes[0].host, "127.0.0.1");
  EXPECT_EQ(cfg.fleet->nodes[0].port, 6380);
  EXPECT_EQ(cfg.fleet->nodes[0].unix_path, "");
  EXPECT_EQ(cfg.fleet->mode, FleetMode::kSingle);
  EXPECT_FALSE(cfg.fleet->tls);
  EXPECT_EQ(cfg.fleet->auth, RedisAuthConfig{});
  EXPECT_EQ(cfg.fleet->db, 0u);
  EXPECT_EQ(cfg.fleet->connect_timeout_ms, 100u);
  EXPECT_EQ(cfg.fleet->command_timeout_ms, 50u);
  EXPECT_EQ(cfg.fleet->lease, 0u);
  EXPECT_EQ(cfg.fleet->hosts, 1u);
  EXPECT_EQ(cfg.fleet->on_backend_error, FleetErrorPolicy::kLocalShare);
  EXPECT_EQ(cfg.fleet->key_prefix, "fairsched");
  EXPECT_EQ(cfg.fleet->source_line, 11u);
}

TEST(ConfigFleet, EveryKeyIsRead) {
  const Config cfg = parsedOk(withBase(R"([fleet]
backend = "redis"
url = "unix:///run/redis/redis.sock"
connect_timeout_ms = 200
command_timeout_ms = 40
lease = 250
hosts = 8
on_backend_error = "fail_closed"
key_prefix = "fs-prod"
)"));
  ASSERT_TRUE(cfg.fleet.has_value());
  ASSERT_EQ(cfg.fleet->nodes.size(), 1u);
  EXPECT_EQ(cfg.fleet->nodes[0].unix_path, "/run/redis/redis.sock");
  EXPECT_EQ(cfg.fleet->nodes[0].host, "");
  EXPECT_EQ(cfg.fleet->connect_timeout_ms, 200u);
  EXPECT_EQ(cfg.fleet->command_timeout_ms, 40u);
  EXPECT_EQ(cfg.fleet->lease, 250u);
  EXPECT_EQ(cfg.fleet->hosts, 8u);
  EXPECT_EQ(cfg.fleet->on_backend_error, FleetErrorPolicy::kFailClosed);
  EXPECT_EQ(cfg.fleet->key_prefix, "fs-prod");
}

TEST(ConfigFleet, PortDefaultsTo6379) {
  const Config cfg = parsedOk(withBase("[fleet]\nurl = \"redis://redis.internal\"\n"));
  EXPECT_EQ(cfg.fleet->nodes.at(0).host, "redis.internal");
  EXPECT_EQ(cfg.fleet->nodes.at(0).port, 6379);
}

TEST(ConfigFleet, LeaseAutoIsZero) {
  const Config cfg = parsedOk(withBase(std::string(kFleet) + "lease = \"auto\"\n"));
  EXPECT_EQ(cfg.fleet->lease, 0u);
}

TEST(ConfigFleet, MissingUrlIsRejected) {
  EXPECT_EQ(errorOf(withBase("[fleet]\nhosts = 2\n")),
            "cfg.toml:11: fleet.url: missing required key");
}

TEST(ConfigFleet, UnknownBackendIsRejected) {
  EXPECT_EQ(errorOf(withBase(std::string(kFleet) + "backend = \"memcached\"\n")),
            "cfg.toml:13: fleet.backend: expected one of redis, got 'memcached'");
}

TEST(ConfigFleet, UrlWithUnknownSchemeIsRejected) {
  EXPECT_EQ(
      errorOf(withBase("[fleet]\nurl = \"http://x:1\"\n")),
      "cfg.toml:12: fleet.url: unknown scheme 'http': expected redis, rediss, redis-sentinel, "
      "rediss-sentinel or unix in 'http://x:1'");
}

TEST(ConfigFleet, UrlWithBadPortIsRejected) {
  EXPECT_EQ(errorOf(withBase("[fleet]\nurl = \"redis://x:70000\"\n")),
            "cfg.toml:12: fleet.url: invalid port '70000' in 'redis://x:70000'");
}

TEST(ConfigFleet, RelativeUnixPathIsRejected) {
  EXPECT_EQ(errorOf(withBase("[fleet]\nurl = \"unix://redis.sock\"\n")),
            "cfg.toml:12: fleet.url: expected unix:///absolute/path in 'unix://redis.sock'");
}

TEST(ConfigFleet, UserPasswordAndDatabaseComeFromTheUrlAndThePasswordIsNeverShown) {
  const Config cfg =
      parsedOk(withBase("[fleet]\nurl = \"redis://app:s%40cret@10.0.0.1:6380/2\"\n"));
  EXPECT_EQ(cfg.fleet->auth.user, "app");
  EXPECT_EQ(cfg.fleet->auth.password, "s@cret");
  EXPECT_EQ(cfg.fleet->db, 2u);
  EXPECT_EQ(cfg.fleet->redacted_url, "redis://app:***@10.0.0.1:6380/2");
  const std::string error = errorOf(withBase("[fleet]\nurl = \"redis://app:hunter2@x:99999\"\n"));
  EXPECT_EQ(error, "cfg.toml:12: fleet.url: invalid port '99999' in 'redis://app:***@x:99999'");
}

TEST(ConfigFleet, PasswordFileMustBeReadableAndIsReadAtEveryConnect) {
  const std::string dir = ::testing::TempDir();
  const std::string path = dir + "/fleet-password";
  { std::ofstream(path) << "pw-1\n"; }
  const Config cfg = parsedOk(
      withBase(std::string(kFleet) + "username = \"app\"\npassword_file = \"" + path + "\"\n"));
  EXPECT_EQ(cfg.fleet->auth.user, "app");
  EXPECT_EQ(cfg.fleet->auth.password, "");  // not copied: read when connecting
  EXPECT_EQ(cfg.fleet->auth.password_file, path);
  EXPECT_EQ(readSecretFile(path), "pw-1");
  EXPECT_EQ(errorOf(withBase(std::string(kFleet) + "password_file = \"/nonexistent/pw\"\n")),
            "cfg.toml:13: fleet.password_file: cannot read '/nonexistent/pw': No such file or "
            "directory");
  EXPECT_EQ(
      errorOf(withBase("[fleet]\nurl = \"redis://:pw@x\"\npassword_file = \"" + path + "\"\n")),
      "cfg.toml:13: fleet.password_file: the password is given twice (the url or an "
      "environment variable)");
}

TEST(ConfigFleet, PasswordEnvMustBeSet) {
  ::setenv("FAIRSCHED_TEST_REDIS_PW", "from-env", 1);
  const Config cfg =
      parsedOk(withBase(std::string(kFleet) + "password_env = \"FAIRSCHED_TEST_REDIS_PW\"\n"));
  EXPECT_EQ(cfg.fleet->auth.password, "from-env");
  ::unsetenv("FAIRSCHED_TEST_REDIS_PW");
  EXPECT_EQ(errorOf(withBase(std::string(kFleet) + "password_env = \"FAIRSCHED_TEST_REDIS_PW\"\n")),
            "cfg.toml:13: fleet.password_env: the environment variable 'FAIRSCHED_TEST_REDIS_PW' "
            "is unset or empty");
}

TEST(ConfigFleet, TlsSettingsTakeARedissUrl) {
  const std::string ca = ::testing::TempDir() + "/fleet-ca.crt";
  { std::ofstream(ca) << "not checked by the config, only that it can be read\n"; }
  const Config cfg =
      parsedOk(withBase("[fleet]\nurl = \"rediss://redis.example:6380\"\n"
                        "tls_ca_file = \"" +
                        ca +
                        "\"\n"
                        "tls_server_name = \"redis.internal\"\n"));
  EXPECT_TRUE(cfg.fleet->tls);
  EXPECT_EQ(cfg.fleet->tls_options.ca_file, ca);
  EXPECT_EQ(cfg.fleet->tls_options.server_name, "redis.internal");
  EXPECT_FALSE(cfg.fleet->tls_options.insecure_skip_verify);
  EXPECT_EQ(errorOf(withBase(std::string(kFleet) + "tls_ca_file = \"" + ca + "\"\n")),
            "cfg.toml:13: fleet.tls_ca_file: TLS settings take a rediss:// url");
  EXPECT_EQ(errorOf(withBase("[fleet]\nurl = \"rediss://x\"\ntls_cert_file = \"" + ca + "\"\n")),
            "cfg.toml:11: fleet.tls_cert_file: a client certificate takes both tls_cert_file and "
            "tls_key_file");
}

TEST(ConfigFleet, SeveralHostsAreAClustersSeeds) {
  const Config cfg = parsedOk(
      withBase("[fleet]\nurl = \"rediss://a:7000,b:7001,[::1]:7002\"\nmode = \"cluster\"\n"));
  EXPECT_EQ(cfg.fleet->mode, FleetMode::kCluster);
  ASSERT_EQ(cfg.fleet->nodes.size(), 3u);
  EXPECT_EQ(cfg.fleet->nodes[1].str(), "b:7001");
  EXPECT_EQ(cfg.fleet->nodes[2].str(), "[::1]:7002");
  EXPECT_EQ(errorOf(withBase("[fleet]\nurl = \"redis://a:7000,b:7001\"\n")),
            "cfg.toml:11: fleet.url: several hosts are a cluster's seeds: set mode = \"cluster\"");
  EXPECT_EQ(errorOf(withBase("[fleet]\nurl = \"redis://a:7000/3\"\nmode = \"cluster\"\n")),
            "cfg.toml:11: fleet.url: Redis Cluster has database 0 only");
}

TEST(ConfigFleet, ASentinelUrlNamesTheSentinelsAndTheMaster) {
  const Config cfg =
      parsedOk(withBase("[fleet]\nurl = \"redis-sentinel://:pw@s1,s2:26380#mymaster\"\n"));
  EXPECT_EQ(cfg.fleet->mode, FleetMode::kSentinel);
  EXPECT_EQ(cfg.fleet->master_name, "mymaster");
  ASSERT_EQ(cfg.fleet->nodes.size(), 2u);
  EXPECT_EQ(cfg.fleet->nodes[0].port, 26379);
  EXPECT_EQ(cfg.fleet->nodes[1].port, 26380);
  EXPECT_EQ(cfg.fleet->auth.password, "pw");
  EXPECT_EQ(errorOf(withBase("[fleet]\nurl = \"redis-sentinel://s1\"\n")),
            "cfg.toml:12: fleet.url: a redis-sentinel:// URL names its master after '#' in "
            "'redis-sentinel://s1'");
  EXPECT_EQ(errorOf(withBase("[fleet]\nurl = \"redis-sentinel://s1#m\"\nmode = \"cluster\"\n")),
            "cfg.toml:13: fleet.mode: a redis-sentinel:// url is mode = \"sentinel\"");
  EXPECT_EQ(errorOf(withBase(std::string(kFleet) + "sentinel_password_env = \"HOME\"\n")),
            "cfg.toml:11: fleet.sentinel_password_file: sentinel credentials take a "
            "redis-sentinel:// url");
}

TEST(ConfigFleet, ChangingTheBackendIsARestart) {
  const Config a = parsedOk(withBase("[fleet]\nurl = \"redis://:one@x\"\n"));
  const Config b = parsedOk(withBase("[fleet]\nurl = \"redis://:two@x\"\n"));
  EXPECT_FALSE(a.fleet->sameBackend(*b.fleet));
  EXPECT_TRUE(
      a.fleet->sameBackend(*parsedOk(withBase("[fleet]\nurl = \"redis://:one@x\"\n")).fleet));
}

TEST(ConfigFleet, ZeroCommandTimeoutIsRejected) {
  EXPECT_EQ(errorOf(withBase(std::string(kFleet) + "command_timeout_ms = 0\n")),
            "cfg.toml:13: fleet.command_timeout_ms: must be at least 1, got 0");
}

TEST(ConfigFleet, LeaseOtherThanAutoIsRejected) {
  EXPECT_EQ(errorOf(withBase(std::string(kFleet) + "lease = \"big\"\n")),
            "cfg.toml:13: fleet.lease: expected a positive integer or \"auto\", got 'big'");
}

TEST(ConfigFleet, ZeroLeaseIsRejected) {
  EXPECT_EQ(errorOf(withBase(std::string(kFleet) + "lease = 0\n")),
            "cfg.toml:13: fleet.lease: must be at least 1, got 0");
}

TEST(ConfigFleet, ZeroHostsIsRejected) {
  EXPECT_EQ(errorOf(withBase(std::string(kFleet) + "hosts = 0\n")),
            "cfg.toml:13: fleet.hosts: must be at least 1, got 0");
}

TEST(ConfigFleet, UnknownPolicyIsRejected) {
  EXPECT_EQ(errorOf(withBase(std::string(kFleet) + "on_backend_error = \"retry\"\n")),
            "cfg.toml:13: fleet.on_backend_error: expected one of "
            "fail_open|fail_closed|local_share, got 'retry'");
}

TEST(ConfigFleet, KeyPrefixWithABraceIsRejected) {
  EXPECT_EQ(errorOf(withBase(std::string(kFleet) + "key_prefix = \"a{b\"\n")),
            "cfg.toml:13: fleet.key_prefix: must not contain white space, control characters, "
            "'{' or '}', got 'a{b'");
}

TEST(ConfigFleet, MisspelledKeyGetsASuggestion) {
  EXPECT_EQ(errorOf(withBase(std::string(kFleet) + "lese = 5\n")),
            "cfg.toml:13: fleet.lese: unknown key (did you mean 'lease'?)");
}

TEST(ConfigFleet, FleetScopedLimitIsRead) {
  const Config cfg = parsedOk(withBase(
      std::string(kFleet) +
      "[tenants.acme]\ntier = \"paid\"\n[tenants.acme.limits]\n"
      "chat = [\"60 requests/minute\", { limit = \"10k requests/day\", scope = \"fleet\" }]\n"));
  ASSERT_EQ(cfg.tenants.size(), 1u);
  ASSERT_EQ(cfg.tenants[0].limits.size(), 1u);
  const auto& limits = cfg.tenants[0].limits[0].limits;
  ASSERT_EQ(limits.size(), 2u);
  EXPECT_EQ(limits[0].scope, core::LimitScope::kHost);
  EXPECT_EQ(limits[1], (LimitSpec{LimitUnit::kRequests, 10'000, kDay, core::LimitScope::kFleet}));
}

TEST(ConfigFleet, TableLimitWithoutScopeIsHostScoped) {
  const Config cfg =
      parsedOk(withBase("[endpoints.x]\nlimits = [{ limit = \"5 tokens/minute\" }]\n"));
  EXPECT_EQ(cfg.findEndpoint("x")->limits.at(0),
            (LimitSpec{LimitUnit::kTokens, 5, kMinute, core::LimitScope::kHost}));
}

TEST(ConfigFleet, FleetScopedLimitWithoutAFleetTableIsRejected) {
  EXPECT_EQ(errorOf(withBase("[endpoints.x]\nlimits = [\n  \"5 requests/minute\",\n"
                             "  { limit = \"5 tokens/minute\", scope = \"fleet\" },\n]\n")),
            "cfg.toml:14: endpoints.x.limits.scope: scope = \"fleet\" needs a [fleet] table (the "
            "shared backend)");
}

TEST(ConfigFleet, FleetTableAfterTheLimitsStillCounts) {
  const Config cfg = parsedOk(
      withBase("[endpoints.x]\nlimits = [{ limit = \"5 tokens/minute\", scope = \"fleet\" }]\n" +
               std::string(kFleet)));
  EXPECT_EQ(cfg.findEndpoint("x")->limits.at(0).scope, core::LimitScope::kFleet);
}

TEST(ConfigFleet, UnknownScopeIsRejected) {
  EXPECT_EQ(errorOf(withBase("[endpoints.x]\nlimits = [{ limit = \"5 tokens/minute\", "
                             "scope = \"global\" }]\n")),
            "cfg.toml:12: endpoints.x.limits.scope: expected one of host|fleet, got 'global'");
}

TEST(ConfigFleet, LimitTableWithoutLimitIsRejected) {
  EXPECT_EQ(errorOf(withBase("[endpoints.x]\nlimits = [{ scope = \"host\" }]\n")),
            "cfg.toml:12: endpoints.x.limits.limit: missing required key");
}

TEST(ConfigFleet, LimitTableWithUnknownKeyIsRejected) {
  EXPECT_EQ(errorOf(withBase("[endpoints.x]\nlimits = [{ limit = \"5 tokens/minute\", "
                             "scop = \"host\" }]\n")),
            "cfg.toml:12: endpoints.x.limits.scop: unknown key (did you mean 'scope'?)");
}

TEST(ConfigFleet, BadLimitInATableNamesItsLine) {
  EXPECT_EQ(errorOf(withBase(std::string(kFleet) +
                             "[endpoints.x]\nlimits = [{ limit = \"5 tokens/minite\", "
                             "scope = \"fleet\" }]\n")),
            "cfg.toml:14: endpoints.x.limits: unknown unit 'minite'");
}

TEST(ConfigReload, BlockersNameWhatOnlyARestartCanChange) {
  const Config base = parsedOk(withBase(""));
  EXPECT_TRUE(reloadBlockers(base, base).empty());
  Config next = base;
  next.daemon.socket = "/elsewhere.sock";
  next.endpoints[0].max_batch_requests += 1;  // a cpu endpoint: fine live
  next.tenants.clear();                       // fine live
  EXPECT_EQ(reloadBlockers(base, next), std::vector<std::string>{"daemon.socket"});

  Config cuda = base;
  cuda.endpoints[0].executor = ExecutorKind::kCuda;
  Config cuda_next = cuda;
  cuda_next.endpoints[0].max_batch_requests += 1;
  const auto blockers = reloadBlockers(cuda, cuda_next);
  ASSERT_EQ(blockers.size(), 1u);
  EXPECT_NE(blockers[0].find(".max_batch_tokens/max_batch_requests"), std::string::npos)
      << blockers[0];

  Config loop = base;
  loop.daemon.event_loop = EventLoopKind::kEpoll;
  EXPECT_EQ(reloadBlockers(base, loop), std::vector<std::string>{"daemon.event_loop"});

  Config fewer = base;
  fewer.endpoints.pop_back();
  EXPECT_EQ(reloadBlockers(base, fewer),
            std::vector<std::string>{"endpoints (the set and order of endpoints)"});
}

// --- executor = "worker" -----------------------------------------------------------

// Lines 11 and 12: an endpoint served by workers.
constexpr std::string_view kWorkerEndpoint = "[endpoints.gen]\nexecutor = \"worker\"\n";

std::string withWorker(std::string_view snippet) {
  return withBase(std::string(kWorkerEndpoint) + std::string(snippet));
}

TEST(ConfigWorker, WorkerEndpointGetsWorkerAndEngineDefaults) {
  const Config cfg = parsedOk(withWorker(""));
  const EndpointConfig* ep = cfg.findEndpoint("gen");
  ASSERT_NE(ep, nullptr);
  EXPECT_EQ(ep->executor, ExecutorKind::kWorker);
  EXPECT_TRUE(ep->worker.requeue_on_loss);
  EXPECT_EQ(ep->worker.max_prompt_tokens, 8192u);
  EXPECT_EQ(ep->worker.max_sequences, 256u);
  EXPECT_EQ(ep->worker.client_buffer_chunks, 1024u);
  EXPECT_EQ(ep->engine.max_sequences, 64u);
  EXPECT_EQ(ep->engine.kv_tokens, 262144u);
  EXPECT_EQ(ep->engine.step_us, 200.0);
  EXPECT_EQ(ep->engine.prefill_token_us, 0.02);
  EXPECT_EQ(ep->engine.decode_token_us, 2.0);
  EXPECT_EQ(ep->engine.chunked_prefill_tokens, 2048u);
}

TEST(ConfigWorker, WorkerAndEngineKeysParse) {
  const Config cfg = parsedOk(withWorker(R"([endpoints.gen.worker]
requeue_on_loss = false
max_prompt_tokens = 262144
max_sequences = 128
client_buffer_chunks = 1048576
[endpoints.gen.engine]
max_sequences = 4096
kv_tokens = 17179869184
step_us = 150.5
prefill_token_us = 0
decode_token_us = 3
chunked_prefill_tokens = 512
)"));
  const EndpointConfig& ep = *cfg.findEndpoint("gen");
  EXPECT_FALSE(ep.worker.requeue_on_loss);
  EXPECT_EQ(ep.worker.max_prompt_tokens, 262144u);
  EXPECT_EQ(ep.worker.max_sequences, 128u);
  EXPECT_EQ(ep.worker.client_buffer_chunks, 1048576u);
  EXPECT_EQ(ep.engine.max_sequences, 4096u);
  EXPECT_EQ(ep.engine.kv_tokens, 17179869184u);
  EXPECT_EQ(ep.engine.step_us, 150.5);
  EXPECT_EQ(ep.engine.prefill_token_us, 0.0);
  EXPECT_EQ(ep.engine.decode_token_us, 3.0);
  EXPECT_EQ(ep.engine.chunked_prefill_tokens, 512u);
}

TEST(ConfigWorker, WorkerEndpointIsChargedPerTokenWithItsSequencesAsParallelism) {
  const Config cfg = parsedOk(withWorker("[endpoints.gen.worker]\nmax_sequences = 32\n"));
  const core::SchedulerSpec spec = buildSchedulerSpec(cfg);
  ASSERT_EQ(spec.endpoints.size(), 3u);
  EXPECT_EQ(spec.endpoints[2].name, "gen");
  EXPECT_TRUE(spec.endpoints[2].per_token);
  EXPECT_EQ(spec.endpoints[2].parallelism, 32u);
  EXPECT_FALSE(spec.endpoints[0].per_token) << "a cpu endpoint charges at dispatch";
}

TEST(ConfigWorker, WorkerKeysOutOfRangeAreRejected) {
  const std::pair<std::string, std::string> cases[] = {
      {"max_prompt_tokens = 0", "max_prompt_tokens: must be at least 1, got 0"},
      {"max_prompt_tokens = 262145", "max_prompt_tokens: must be at most 262144, got 262145"},
      {"max_sequences = 1", "max_sequences: must be at least 2, got 1"},
      {"max_sequences = 8192", "max_sequences: must be at most 4096, got 8192"},
      {"max_sequences = -4", "max_sequences: must be at least 2, got -4"},
      {"client_buffer_chunks = 0", "client_buffer_chunks: must be at least 1, got 0"},
      {"client_buffer_chunks = 1048577",
       "client_buffer_chunks: must be at most 1048576, got 1048577"},
      {"requeue_on_loss = 1", "requeue_on_loss: expected boolean, got integer"},
      {"max_prompt_tokens = \"8k\"", "max_prompt_tokens: expected integer, got string"},
      {"max_sequence = 5", "max_sequence: unknown key (did you mean 'max_sequences'?)"},
  };
  for (const auto& [line, error] : cases) {
    EXPECT_EQ(errorOf(withWorker("[endpoints.gen.worker]\n" + line + "\n")),
              "cfg.toml:14: endpoints.gen.worker." + error)
        << line;
  }
}

TEST(ConfigWorker, FairnessAndPreemptionKeysReachTheSchedulerSpec) {
  const Config drr = parsedOk(withWorker(""));
  EXPECT_EQ(drr.findEndpoint("gen")->fairness, core::Fairness::kDrr);
  const Config cfg = parsedOk(withWorker(R"(fairness = "recent"
half_life_s = 7.5
[endpoints.gen.worker]
preemption = true
max_preemptions_per_s = 3.5
min_progress_tokens = 40
preempt_for_share = true
)"));
  const core::SchedulerSpec spec = buildSchedulerSpec(cfg);
  const core::EndpointSpec* es = nullptr;
  for (const auto& e : spec.endpoints) {
    if (e.name == "gen") es = &e;
  }
  ASSERT_NE(es, nullptr);
  EXPECT_EQ(es->fairness, core::Fairness::kRecent);
  EXPECT_EQ(es->half_life, 7500 * kNsPerMs);
  EXPECT_TRUE(es->preemption.enabled);
  EXPECT_EQ(es->preemption.max_per_s, 3.5);
  EXPECT_EQ(es->preemption.min_progress_tokens, 40u);
  EXPECT_TRUE(es->preemption.for_share);
  EXPECT_FALSE(buildSchedulerSpec(drr).endpoints.front().preemption.for_share);
  EXPECT_EQ(
      errorOf(withWorker("fairness = \"wfq\"\n")).rfind("cfg.toml:13: endpoints.gen.fairness: ", 0),
      0u);
  EXPECT_EQ(
      errorOf(withWorker("half_life_s = 0\n")).rfind("cfg.toml:13: endpoints.gen.half_life_s: ", 0),
      0u);
}

TEST(ConfigWorker, PrefixRoutingKeysAreReadAndReachTheSchedulerSpec) {
  const Config plain = parsedOk(withWorker(""));
  const WorkerEndpointConfig& d = plain.findEndpoint("gen")->worker;
  EXPECT_EQ(d.routing, core::Routing::kRoomiest);
  EXPECT_EQ(d.prefix_block_tokens, 16u);
  EXPECT_EQ(d.cache_blocks, 0u);
  const Config cfg = parsedOk(withWorker(R"(fairness = "vtc"
[endpoints.gen.worker]
routing = "prefix"
prefix_block_tokens = 32
max_prefix_blocks = 100
load_slack = 0.5
locality_slack = 200.0
cache_blocks = 5000
[endpoints.gen.engine]
prefix_cache_blocks = 800
kv_events = false
)"));
  const EndpointConfig& ep = *cfg.findEndpoint("gen");
  EXPECT_EQ(ep.worker.routing, core::Routing::kPrefix);
  EXPECT_EQ(ep.worker.prefix_block_tokens, 32u);
  EXPECT_EQ(ep.worker.max_prefix_blocks, 100u);
  EXPECT_EQ(ep.worker.load_slack, 0.5);
  EXPECT_EQ(ep.worker.cache_blocks, 5000u);
  EXPECT_EQ(ep.engine.prefix_cache_blocks, 800u);
  EXPECT_FALSE(ep.engine.kv_events);
  const core::SchedulerSpec spec = buildSchedulerSpec(cfg);
  double slack = -1;
  for (const auto& e : spec.endpoints) {
    if (e.name == "gen") slack = e.locality_slack;
  }
  EXPECT_EQ(slack, 200.0);
  // Without prefix routing nothing is passed over for locality.
  const core::SchedulerSpec roomiest =
      buildSchedulerSpec(parsedOk(withWorker("[endpoints.gen.worker]\nlocality_slack = 200.0\n")));
  for (const auto& e : roomiest.endpoints) EXPECT_EQ(e.locality_slack, 0.0) << e.name;

  const std::pair<std::string, std::string> cases[] = {
      {"routing = \"cache\"", "routing: expected one of"},
      {"prefix_block_tokens = 0", "prefix_block_tokens: must be at least 1, got 0"},
      {"max_prefix_blocks = 0", "max_prefix_blocks: must be at least 1, got 0"},
      {"load_slack = -0.1", "load_slack: must be non-negative and finite, got -0.1"},
      {"cache_blocks = -1", "cache_blocks: must not be negative, got -1"},
  };
  for (const auto& [line, error] : cases) {
    EXPECT_EQ(errorOf(withWorker("[endpoints.gen.worker]\n" + line + "\n"))
                  .rfind("cfg.toml:14: endpoints.gen.worker." + error, 0),
              0u)
        << line << ": " << errorOf(withWorker("[endpoints.gen.worker]\n" + line + "\n"));
  }
}

TEST(ConfigWorker, EngineKeysOutOfRangeAreRejected) {
  const std::pair<std::string, std::string> cases[] = {
      {"max_sequences = 0", "max_sequences: must be at least 1, got 0"},
      {"max_sequences = 4097", "max_sequences: must be at most 4096, got 4097"},
      {"kv_tokens = 0", "kv_tokens: must be at least 1, got 0"},
      {"step_us = -1", "step_us: must be non-negative and finite, got -1"},
      {"prefill_token_us = nan", "prefill_token_us: must be non-negative and finite, got nan"},
      {"decode_token_us = \"fast\"", "decode_token_us: expected float, got string"},
      {"chunked_prefill_tokens = 0", "chunked_prefill_tokens: must be at least 1, got 0"},
      {"kv_token = 5", "kv_token: unknown key (did you mean 'kv_tokens'?)"},
  };
  for (const auto& [line, error] : cases) {
    EXPECT_EQ(errorOf(withWorker("[endpoints.gen.engine]\n" + line + "\n")),
              "cfg.toml:14: endpoints.gen.engine." + error)
        << line;
  }
}

// Regression: the assignment ring has max_sequences cells, and a ring's
// capacity is a power of two; 100 was accepted and every worker that
// attached was refused ("could not create the shared segment").
// Any value in range: the assignment ring rounds it up to a power of two.
TEST(ConfigWorker, MaxSequencesNeedNotBeAPowerOfTwo) {
  EXPECT_EQ(parsedOk(withWorker("[endpoints.gen.worker]\nmax_sequences = 100\n"))
                .findEndpoint("gen")
                ->worker.max_sequences,
            100u);
  EXPECT_EQ(shm::workerGeometry(100, 8192).completion_capacity, 128u);
  EXPECT_EQ(parsedOk(withWorker("[endpoints.gen.worker]\nmax_sequences = 2048\n"))
                .findEndpoint("gen")
                ->worker.max_sequences,
            2048u);
}

// Regression: the largest values of both keys together need a segment over
// the layout's 4 GiB; accepted, every worker that attached was refused.
TEST(ConfigWorker, SequencesAndPromptsTooLargeForOneSegmentAreRejected) {
  EXPECT_EQ(errorOf(withWorker("[endpoints.gen.worker]\nmax_sequences = 4096\n"
                               "max_prompt_tokens = 262144\n")),
            "cfg.toml:13: endpoints.gen.worker: 4096 sequences of 262144 prompt tokens need a "
            "worker segment over the layout's limit (segment of 4316463104 bytes exceeds "
            "4294967296)");
  EXPECT_EQ(parsedOk(withWorker("[endpoints.gen.worker]\nmax_sequences = 4096\n"
                                "max_prompt_tokens = 131072\n"))
                .findEndpoint("gen")
                ->worker.max_prompt_tokens,
            131072u);
}

// Whatever [endpoints.X.worker] the parser accepts, a worker can attach.
RC_GTEST_PROP(ConfigWorker, EveryAcceptedWorkerTableGivesASegmentTheLayoutAllows, ()) {
  const auto sequences = *rc::gen::inRange<std::uint32_t>(0, 5000);
  const auto prompt =
      *rc::gen::oneOf(rc::gen::inRange<std::uint32_t>(0, (1U << 18) + 2),
                      rc::gen::inRange<std::uint32_t>((1U << 18) - 8192, (1U << 18) + 2));
  const std::string text =
      withWorker("[endpoints.gen.worker]\nmax_sequences = " + std::to_string(sequences) +
                 "\nmax_prompt_tokens = " + std::to_string(prompt) + "\n");
  const auto parsed = parseConfig(text, "cfg.toml");
  if (const auto* cfg = parsed.valueOrNull()) {
    const WorkerEndpointConfig& w = cfg->findEndpoint("gen")->worker;
    for (const std::uint64_t page : {4096u, 65536u}) {
      const auto layout =
          shm::computeLayout(shm::workerGeometry(w.max_sequences, w.max_prompt_tokens), page);
      RC_ASSERT(layout.ok());
    }
  }
}

TEST(ConfigWorker, WorkerTableThatIsNotATableIsRejected) {
  EXPECT_EQ(errorOf(withWorker("worker = 5\n")),
            "cfg.toml:13: endpoints.gen.worker: expected table, got integer");
}

TEST(ConfigWorker, ClientMayServeWorkerEndpoints) {
  const Config cfg =
      parsedOk(withWorker("[[clients]]\nuids = [0]\nworkers = [\"gen\", \"gen\"]\n"
                          "[[clients]]\nuids = [1]\nworkers = [\"*\"]\n[[clients]]\nuids = [2]\n"));
  ASSERT_EQ(cfg.clients.size(), 3u);
  EXPECT_EQ(cfg.clients[0].workers, std::vector<std::string>{"gen"});
  EXPECT_EQ(cfg.clients[1].workers, std::vector<std::string>{"*"});
  EXPECT_TRUE(cfg.clients[2].workers.empty()) << "serving is never implied";
}

TEST(ConfigWorker, WorkersNamingAnEndpointNotServedByWorkersAreRejected) {
  EXPECT_EQ(errorOf(withWorker("[[clients]]\nuids = [0]\nworkers = [\"gen\", \"chat\"]\n")),
            "cfg.toml:15: clients[0].workers: endpoint 'chat' is not served by workers "
            "(executor = \"worker\")");
}

TEST(ConfigWorker, WorkersNamingAnUnknownEndpointAreRejected) {
  EXPECT_EQ(errorOf(withWorker("[[clients]]\nuids = [0]\nworkers = [\"nope\"]\n")),
            "cfg.toml:15: clients[0].workers: unknown endpoint 'nope'");
}

TEST(ConfigWorker, ReloadIsBlockedByWhatSizesAWorkersSegmentOnly) {
  const Config base = parsedOk(withWorker(""));
  const std::vector<std::string> blocked = {
      "endpoints.gen.worker.max_prompt_tokens/max_sequences (a worker's segment is sized at "
      "attach)"};
  Config prompt = base;
  prompt.endpoints[2].worker.max_prompt_tokens *= 2;
  EXPECT_EQ(reloadBlockers(base, prompt), blocked);
  Config sequences = base;
  sequences.endpoints[2].worker.max_sequences /= 2;
  EXPECT_EQ(reloadBlockers(base, sequences), blocked);
  Config live = base;
  live.endpoints[2].worker.requeue_on_loss = false;
  live.endpoints[2].worker.client_buffer_chunks = 7;
  live.endpoints[2].engine.kv_tokens = 1;
  EXPECT_TRUE(reloadBlockers(base, live).empty());
  Config executor = base;
  executor.endpoints[2].executor = ExecutorKind::kCpu;
  EXPECT_EQ(reloadBlockers(base, executor), std::vector<std::string>{"endpoints.gen.executor"});
}

}  // namespace
}  // namespace fairsched::config
