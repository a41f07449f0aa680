// fairschedd: parse arguments, load the config, build the daemon, run it.
// Exit status: 0 stopped cleanly, 1 bad configuration, 2 usage, 3 could not
// serve (socket, io_uring, executor) or the event loop failed.
#include <spdlog/spdlog.h>

#include <csignal>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "daemon/config/config.hpp"
#include "daemon/log.hpp"
#include "daemon/server.hpp"

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

constexpr std::string_view kUsage =
    "usage: fairschedd --config FILE [--log-level LEVEL]\n"
    "       fairschedd --check-config FILE\n"
    "\n"
    "  --config FILE        load FILE and serve until SIGTERM/SIGINT; SIGHUP reloads FILE\n"
    "  --check-config FILE  validate FILE; exit 0 if it is valid, 1 with the reason if not\n"
    "  --log-level LEVEL    trace|debug|info|warn|error|critical|off (overrides daemon.log_level)\n"
    "  --help               show this help\n"
    "  --version            show the version\n";

struct Options {
  std::string config_path;
  bool check_only = false;
  std::optional<std::string> log_level;
  bool help = false;
  bool version = false;
};

// Accepts "--flag VALUE" and "--flag=VALUE". Returns the options or a usage error.
std::variant<Options, std::string> parseArgs(int argc, char** argv) {
  Options opts;
  bool haveConfig = false;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    std::optional<std::string> inlineValue;
    if (const auto eq = arg.find('='); arg.substr(0, 2) == "--" && eq != std::string_view::npos) {
      inlineValue = std::string(arg.substr(eq + 1));
      arg = arg.substr(0, eq);
    }
    auto value = [&]() -> std::optional<std::string> {
      if (inlineValue) return inlineValue;
      if (i + 1 < argc) return std::string(argv[++i]);
      return std::nullopt;
    };
    if (arg == "--help" || arg == "-h") {
      opts.help = true;
    } else if (arg == "--version") {
      opts.version = true;
    } else if (arg == "--config" || arg == "--check-config") {
      auto v = value();
      if (!v || v->empty()) return std::string(arg) + " needs a file";
      if (haveConfig) return std::string("give one of --config or --check-config, once");
      haveConfig = true;
      opts.config_path = *v;
      opts.check_only = arg == "--check-config";
    } else if (arg == "--log-level") {
      auto v = value();
      if (!v) return std::string("--log-level needs a level");
      if (!fairsched::parseLogLevel(*v)) {
        return "unknown log level '" + *v + "' (expected trace|debug|info|warn|error|critical|off)";
      }
      opts.log_level = *v;
    } else {
      return "unknown argument '" + std::string(argv[i]) + "'";
    }
  }
  if (!opts.help && !opts.version && !haveConfig) return std::string("--config FILE is required");
  return opts;
}

std::string summary(const Config& cfg) {
  return std::to_string(cfg.tiers.size()) + " tiers, " + std::to_string(cfg.endpoints.size()) +
         " endpoints, " + std::to_string(cfg.tenants.size()) + " tenants, " +
         std::to_string(cfg.clients.size()) + " client rules";
}

}  // namespace

int main(int argc, char** argv) {
  auto parsed = parseArgs(argc, argv);
  if (auto* err = std::get_if<std::string>(&parsed)) {
    std::cerr << "fairschedd: " << *err << "\n" << kUsage;
    return kExitUsage;
  }
  const Options& opts = std::get<Options>(parsed);
  if (opts.help) {
    std::cout << kUsage;
    return kExitOk;
  }
  if (opts.version) {
    std::cout << "fairschedd " << FAIRSCHED_VERSION << "\n";
    return kExitOk;
  }

  auto loaded = fairsched::config::loadConfigFile(opts.config_path);
  if (auto* err = std::get_if<ConfigError>(&loaded)) {
    std::cerr << err->toString() << "\n";
    return kExitBadConfig;
  }
  const Config& cfg = std::get<Config>(loaded);
  if (opts.check_only) {
    std::cout << opts.config_path << ": ok (" << summary(cfg) << ")\n";
    return kExitOk;
  }

  std::string logError;
  if (!fairsched::setupLogging(opts.log_level.value_or(cfg.daemon.log_level), &logError)) {
    std::cerr << "fairschedd: " << logError << "\n";
    return kExitBadConfig;
  }
  spdlog::info("fairschedd {}: loaded {} ({})", FAIRSCHED_VERSION, opts.config_path, summary(cfg));
  signal(SIGPIPE, SIG_IGN);
  auto server = fairsched::daemon::Server::create(cfg);
  if (auto* err = std::get_if<std::string>(&server)) {
    spdlog::critical("cannot serve: {}", *err);
    return kExitCannotServe;
  }
  auto& daemon = *std::get<std::unique_ptr<fairsched::daemon::Server>>(server);
  if (opts.log_level) daemon.pinLogLevel();
  const int rc = daemon.run();
  if (rc != 0) {
    spdlog::critical("event loop failed: {}", std::strerror(rc));
    return kExitCannotServe;
  }
  spdlog::info("stopped");
  return kExitOk;
}
