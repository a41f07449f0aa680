// fairschedd: parse arguments, load the config, build the daemon, run it.
// Exit status: 0 stopped cleanly, 1 bad configuration, 2 usage, 3 could not
// serve (socket, event loop, executor), the event loop failed, or an executor
// was lost (a sticky device fault): systemd's Restart=on-failure restarts it.
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>

#include <csignal>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "daemon/config/config.hpp"
#include "daemon/log.hpp"
#include "daemon/server/server.hpp"

#ifndef FAIRSCHED_VERSION
#define FAIRSCHED_VERSION "0.1.0"
#endif

namespace {

using fairsched::config::Config;
using fairsched::config::ConfigError;

constexpr int kExitOk = 0;
constexpr int kExitBadConfig = 1;
constexpr int kExitUsage = 2;
constexpr int kExitCannotServe = 3;

struct Options {
  std::string config_path;
  bool check_only = false;
  std::optional<std::string> log_level;
};

// The options, or the exit status when there is nothing to run (--help and
// --version print and exit 0; a usage error prints and exits 2).
std::variant<Options, int> parseArgs(int argc, char** argv) {
  CLI::App app{"fairschedd: fair scheduling of LLM inference requests on a shared GPU host"};
  app.set_version_flag("--version", std::string("fairschedd ") + FAIRSCHED_VERSION);
  std::string config, check;
  std::string level;
  auto* cfg_opt = app.add_option("--config", config,
                                 "load FILE and serve until SIGTERM/SIGINT; SIGHUP reloads FILE")
                      ->type_name("FILE");
  auto* check_opt = app.add_option("--check-config", check,
                                   "validate FILE; exit 0 if it is valid, 1 with the reason if not")
                        ->type_name("FILE");
  cfg_opt->excludes(check_opt);
  auto* level_opt =
      app.add_option("--log-level", level,
                     "trace|debug|info|warn|error|critical|off (overrides daemon.log_level)")
          ->type_name("LEVEL")
          ->check([](const std::string& v) -> std::string {
            if (fairsched::parseLogLevel(v)) return "";
            return "unknown log level '" + v +
                   "' (expected trace|debug|info|warn|error|critical|off)";
          });
  app.footer(
      "Exit status: 0 stopped cleanly, 1 bad configuration, 2 usage, 3 could not serve or "
      "stopped after a fatal error (a lost executor).");
  try {
    app.parse(argc, argv);
    if (config.empty() && check.empty()) {
      throw CLI::RequiredError("--config FILE (or --check-config FILE)");
    }
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? kExitOk : kExitUsage;
  }
  Options o;
  o.check_only = !check.empty();
  o.config_path = o.check_only ? check : config;
  if (level_opt->count() > 0) o.log_level = level;
  return o;
}

std::string summary(const Config& cfg) {
  return std::to_string(cfg.tiers.size()) + " tiers, " + std::to_string(cfg.endpoints.size()) +
         " endpoints, " + std::to_string(cfg.tenants.size()) + " tenants, " +
         std::to_string(cfg.clients.size()) + " client rules";
}

}  // namespace

int main(int argc, char** argv) {
  auto parsed = parseArgs(argc, argv);
  if (const int* rc = std::get_if<int>(&parsed)) return *rc;
  const Options& opts = std::get<Options>(parsed);

  auto loaded = fairsched::config::loadConfigFile(opts.config_path);
  if (auto* err = loaded.errorOrNull()) {
    std::cerr << err->toString() << "\n";
    return kExitBadConfig;
  }
  const Config& cfg = loaded.value();
  if (opts.check_only) {
    std::cout << opts.config_path << ": ok (" << summary(cfg) << ")\n";
    return kExitOk;
  }

  if (auto logging = fairsched::setupLogging(opts.log_level.value_or(cfg.daemon.log_level));
      !logging) {
    std::cerr << "fairschedd: " << logging.error().message << "\n";
    return kExitBadConfig;
  }
  spdlog::info("fairschedd {}: loaded {} ({})", FAIRSCHED_VERSION, opts.config_path, summary(cfg));
  signal(SIGPIPE, SIG_IGN);
  auto server = fairsched::daemon::Server::create(cfg);
  if (!server) {
    spdlog::critical("cannot serve: {}", server.error().message);
    return kExitCannotServe;
  }
  auto& daemon = *server.value();
  if (opts.log_level) daemon.pinLogLevel();
  const int rc = daemon.run();
  if (rc != 0) {
    spdlog::critical("stopped after a fatal error: {}", std::strerror(rc));
    return kExitCannotServe;
  }
  spdlog::info("stopped");
  return kExitOk;
}
