// Names a peer chooses — the client name in Hello, tenant and tier names in
// OpenTenant, the tenant filter of an admin request — against a real daemon.
// Each name that breaks the rule of fairsched/name.hpp (invalid UTF-8,
// truncated or overlong sequences, escape sequences, newlines, spaces) is
// refused with a message naming the rule and is never stored: the daemon
// keeps serving, `fairschedctl tenants` (table and --json) works and prints
// no control byte. Regressions for a daemon that aborted on the first
// `fairschedctl tenants` after a client opened tenant "\xff\xfe".
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "daemon/config/config.hpp"
#include "daemon/ctl/admin_client.hpp"
#include "fairsched/client.hpp"
#include "fairsched/fairsched.h"
#include "fairsched/name.hpp"
#include "kernels/workload_reference.hpp"
#include "tests/support/daemon_config.hpp"
#include "tests/support/forked_daemon.hpp"
#include "tests/support/raw_client.hpp"
#include "tests/support/run_command.hpp"
#include "tests/support/temp_dir.hpp"

namespace fairsched {
namespace {

using shm::AdminCommand;
using shm::ControlStatus;
using testing::RawClient;

// What a hostile peer sends as names, from the reproductions.
const std::vector<std::string> kBadNames = {
    "\xff\xfe",  // not UTF-8 at all
    "bad\xc3"
    "(utf8",  // truncated multibyte sequence
    "ov\xc0\xaf"
    "er",                                                  // overlong encoding of '/'
    "evil\x1b[2J",                                         // clears the operator's terminal
    "row\nforged  chat  paid",                             // forges a table row
    "cl'\n2026-01-01 00:00:00.000 info FORGED\x1b[31m\r",  // forges a log line
    "with space",
    "caf\xc3\xa9",  // valid UTF-8, still outside the rule
    std::string(64, 'x'),
};

class UntrustedNames : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::DaemonConfigText c;
    c.socket = tmp_.file("fairsched.sock");
    c.log_level = "warn";
    c.body =
        "[endpoints.chat]\nmax_batch_requests = 8\nmax_batch_tokens = 4096\nmax_wait_us = 100\n"
        "max_output_tokens = 64\n"
        "[endpoints.chat.cpu]\nper_batch_us = 10.0\nper_token_us = 0.0\nthreads = 1\n";
    c.client_extra = "assign_tiers = [\"*\"]\nadmin = true\n";
    auto parsed = c.parse();
    ASSERT_TRUE(parsed.ok()) << parsed.error();
    auto started = daemon::ForkedDaemon::start(parsed.value());
    ASSERT_TRUE(started.ok()) << started.error().message;
    daemon_.emplace(std::move(started).value());
  }

  std::string socket() const { return tmp_.file("fairsched.sock"); }

  // The daemon answers an admin command: it is alive and its loop serves.
  daemon::AdminResponse admin(AdminCommand cmd, std::string_view tenant = {}) {
    auto r = daemon::adminCommand(socket(), cmd, 0, std::chrono::seconds(10), tenant);
    if (!r) {
      ADD_FAILURE() << "no admin reply: " << r.error().message;
      return {};
    }
    return r.value();
  }

  // Tenant names the daemon lists, from `fairschedctl tenants --json`.
  std::vector<std::string> listedTenants() {
    const auto r = admin(AdminCommand::kTenants);
    EXPECT_EQ(r.status, ControlStatus::kOk) << r.json;
    const auto j = nlohmann::json::parse(r.json, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << r.json;
    std::vector<std::string> out;
    if (j.is_discarded()) return out;
    for (const auto& row : j["tenants"]) out.push_back(row.value("tenant", ""));
    return out;
  }

  // One request through a good tenant completes OK: the daemon still serves.
  void expectServing(RawClient& c, std::uint32_t ring, std::uint64_t id) {
    const std::vector<std::uint32_t> prompt = {7, 8, 9};
    ASSERT_TRUE(c.submit(ring, id, prompt));
    const auto got = c.collect(1);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].status, encodeStatus(Status::kOk));
    EXPECT_EQ(got[0].checksum, kernels::workloadChecksum(prompt));
  }

  testing::TempDir tmp_;
  std::optional<daemon::ForkedDaemon> daemon_;
};

bool printable(const std::string& text) {
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if ((u < 0x20 && c != '\n') || u >= 0x7f) return false;
  }
  return true;
}

TEST_F(UntrustedNames, TenantNamesBreakingTheRuleAreRefusedAndNeverStored) {
  RawClient c;
  ASSERT_EQ(c.connect(socket()), ControlStatus::kOk);
  const auto [ok_status, ring] = c.open("acme");
  ASSERT_EQ(ok_status, ControlStatus::kOk);
  for (const std::string& name : kBadNames) {
    if (name.size() > kMaxNameBytes) continue;  // the OpenTenant field holds 63 bytes
    std::string why;
    const auto [status, bad_ring] = c.open(name, &why);
    EXPECT_EQ(status, ControlStatus::kBadRequest) << escapeForDisplay(name);
    EXPECT_NE(why.find("tenant name refused"), std::string::npos) << why;
    EXPECT_NE(why.find("ASCII letter, a digit or one of"), std::string::npos) << why;
    EXPECT_TRUE(printable(why)) << escapeForDisplay(why);
  }
  // Refused tier hints too, on a good tenant name.
  std::string why;
  EXPECT_EQ(c.open("globex", &why, "\xff\xfe").first, ControlStatus::kBadRequest);
  EXPECT_NE(why.find("tier name refused"), std::string::npos) << why;

  // What made the daemon abort: listing tenants after the bad opens.
  expectServing(c, ring, 1);
  EXPECT_EQ(listedTenants(), std::vector<std::string>{"acme"});
  EXPECT_EQ(daemon_->terminate(), 0);
}

TEST_F(UntrustedNames, ClientNamesBreakingTheRuleAreRefusedAtHello) {
  for (const std::string& name : kBadNames) {
    if (name.size() > kMaxNameBytes) continue;  // the Hello field holds 63 bytes
    RawClient c;
    std::string why;
    EXPECT_EQ(c.connect(socket(), &why, name), ControlStatus::kBadRequest)
        << escapeForDisplay(name);
    EXPECT_NE(why.find("client name refused"), std::string::npos) << why;
    EXPECT_TRUE(printable(why)) << escapeForDisplay(why);
  }
  RawClient good;
  ASSERT_EQ(good.connect(socket(), nullptr, "frontend-7"), ControlStatus::kOk);
  RawClient unnamed;
  ASSERT_EQ(unnamed.connect(socket(), nullptr, ""), ControlStatus::kOk);
  const auto [status, ring] = good.open("acme");
  ASSERT_EQ(status, ControlStatus::kOk);
  expectServing(good, ring, 1);
  EXPECT_EQ(daemon_->terminate(), 0);
}

TEST_F(UntrustedNames, AdminTenantFilterBreakingTheRuleIsRefused) {
  for (const std::string& name : kBadNames) {
    if (name.size() > kMaxNameBytes) continue;
    const auto r = admin(AdminCommand::kTenants, name);
    EXPECT_EQ(r.status, ControlStatus::kBadRequest) << escapeForDisplay(name);
    EXPECT_FALSE(nlohmann::json::parse(r.json, nullptr, false).is_discarded()) << r.json;
  }
  EXPECT_EQ(admin(AdminCommand::kStatus).status, ControlStatus::kOk);
  EXPECT_EQ(daemon_->terminate(), 0);
}

TEST_F(UntrustedNames, TheLibraryRefusesBadNamesBeforeAskingTheDaemon) {
  ClientOptions o;
  o.socket_path = socket();
  o.client_name = "evil\x1b[2J";
  auto refused = Client::connect(o);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(refused.error().message.find("client name"), std::string::npos);

  o.client_name = "it";
  auto client = Client::connect(o);
  ASSERT_TRUE(client) << client.error().toString();
  for (const std::string& name : kBadNames) {
    auto t = client->openTenant(name);
    ASSERT_FALSE(t) << escapeForDisplay(name);
    EXPECT_EQ(t.error().code, ErrorCode::kInvalidArgument);
    EXPECT_TRUE(printable(t.error().message)) << escapeForDisplay(t.error().message);
  }
  EXPECT_FALSE(client->openTenant("acme", std::string_view("\xff")));

  // The C ABI, as in the reproduction.
  fairsched_options co;
  fairsched_options_init(&co);
  const std::string path = socket();
  co.socket_path = path.c_str();
  fairsched_client* cc = nullptr;
  ASSERT_EQ(fairsched_connect(&co, &cc), FAIRSCHED_OK) << fairsched_last_error_message();
  std::uint32_t tenant = 0;
  EXPECT_EQ(fairsched_open_tenant(cc, "\xff\xfe", nullptr, &tenant),
            FAIRSCHED_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fairsched_last_error_message()).find("not allowed"), std::string::npos)
      << fairsched_last_error_message();
  EXPECT_EQ(fairsched_open_tenant(cc, "acme", nullptr, &tenant), FAIRSCHED_OK);
  fairsched_close(cc);
  EXPECT_EQ(listedTenants().size(), 0u) << "acme is gone with its only client";
  EXPECT_EQ(daemon_->terminate(), 0);
}

TEST_F(UntrustedNames, FairschedctlPrintsNoControlBytesAndTakesJsonAfterTheSubcommand) {
  RawClient c;
  ASSERT_EQ(c.connect(socket()), ControlStatus::kOk);
  for (const std::string& name : kBadNames) c.open(name);
  const auto [status, ring] = c.open("org-7");
  ASSERT_EQ(status, ControlStatus::kOk);
  expectServing(c, ring, 1);
  const std::string sock = "--socket " + socket();
  std::string out;
  ASSERT_EQ(testing::runFairschedctl(sock + " tenants", &out), 0) << out;
  EXPECT_NE(out.find("org-7"), std::string::npos) << out;
  EXPECT_TRUE(printable(out)) << escapeForDisplay(out);
  // --json after the subcommand, as operators type it, and before it.
  for (const std::string& args :
       {sock + " tenants --json", "--json " + sock + " tenants", "status --json " + sock}) {
    ASSERT_EQ(testing::runFairschedctl(args, &out), 0) << args << ": " << out;
    EXPECT_FALSE(nlohmann::json::parse(out, nullptr, false).is_discarded()) << args << ": " << out;
  }
  // A bad --tenant filter is a usage error, before the daemon is asked.
  EXPECT_EQ(testing::runFairschedctl(sock + " tenants --tenant 'a b'", &out), 2) << out;
  EXPECT_EQ(daemon_->terminate(), 0);
}

// The real fairschedd binary with its log in a file: what a hostile peer
// sends never forges a log line or puts a control byte into the journal.
TEST(UntrustedNamesLog, NothingAPeerSendsForgesALogLine) {
  testing::TempDir tmp("fairsched-names-log");
  ASSERT_FALSE(tmp.path().empty());
  const std::string sock = tmp.file("fairsched.sock");
  const std::string cfg = tmp.file("fairsched.toml");
  const std::string log = tmp.file("fairschedd.log");
  {
    std::FILE* f = std::fopen(cfg.c_str(), "w");
    ASSERT_NE(f, nullptr);
    testing::DaemonConfigText c;
    c.socket = sock;
    c.log_level = "info";
    c.body =
        "[endpoints.chat]\n"
        "[endpoints.chat.cpu]\nper_batch_us = 10.0\nper_token_us = 0.0\n";
    c.client_extra = "assign_tiers = [\"*\"]\nadmin = true\n";
    std::fputs(c.text().c_str(), f);
    std::fclose(f);
  }
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::freopen(log.c_str(), "w", stderr);
    std::freopen(log.c_str(), "a", stdout);
    const std::string bin = std::string(FAIRSCHED_BINARY_DIR) + "/bin/fairschedd";
    execl(bin.c_str(), bin.c_str(), "--config", cfg.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  // Serving once the socket accepts (bounded).
  bool up = false;
  for (int i = 0; i < 5000 && !up; ++i) {
    RawClient probe;
    up = probe.connect(sock) == ControlStatus::kOk;
    if (!up) usleep(2000);
  }
  ASSERT_TRUE(up) << "fairschedd did not come up";
  {
    RawClient c;
    std::string why;
    EXPECT_EQ(c.connect(sock, &why, kBadNames[5]), ControlStatus::kBadRequest) << why;
  }
  {
    RawClient c;
    ASSERT_EQ(c.connect(sock), ControlStatus::kOk);
    for (const std::string& name : kBadNames) c.open(name);
    c.open("globex", nullptr, "\x1b[31m");
  }
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;

  std::FILE* f = std::fopen(log.c_str(), "r");
  ASSERT_NE(f, nullptr);
  std::string text;
  char buf[4096];
  while (const std::size_t n = std::fread(buf, 1, sizeof buf, f)) text.append(buf, n);
  std::fclose(f);
  EXPECT_TRUE(printable(text)) << "a control byte reached the log: " << escapeForDisplay(text);
  EXPECT_NE(text.find("client name refused"), std::string::npos) << text;
  EXPECT_NE(text.find("tenant name refused"), std::string::npos) << text;
  // Every line is one of the daemon's: it starts with a timestamp.
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t end = text.find('\n', start);
    const std::string line = text.substr(start, end - start);
    EXPECT_TRUE(line.size() > 20 && line.compare(0, 2, "20") == 0 && line[4] == '-')
        << "not a log line of the daemon: " << escapeForDisplay(line);
    EXPECT_NE(line.compare(0, 10, "2026-01-01"), 0) << "a forged line: " << escapeForDisplay(line);
    if (end == std::string::npos) break;
    start = end + 1;
  }
}

}  // namespace
}  // namespace fairsched
