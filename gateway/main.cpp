// fairsched-gateway: parse arguments, load the config, run the gateway.
// Exit status: 0 stopped cleanly, 1 bad configuration, 2 usage, 3 could not
// serve (fairschedd unreachable or refusing the worker, the listen address).
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>

#include <iostream>
#include <string>
#include <variant>

#include "gateway/gateway_config.hpp"
#include "gateway/gateway_server.hpp"

#ifndef FAIRSCHED_VERSION
#define FAIRSCHED_VERSION "0.1.0"
#endif

int main(int argc, char** argv) {
  CLI::App app{
      "fairsched-gateway: an OpenAI-compatible HTTP front that schedules through fairschedd"};
  app.set_version_flag("--version", std::string("fairsched-gateway ") + FAIRSCHED_VERSION);
  std::string config, check, level;
  auto* cfg_opt = app.add_option("--config", config,
                                 "load FILE and serve until SIGTERM/SIGINT; "
                                 "SIGHUP reloads the keys")
                      ->type_name("FILE");
  auto* check_opt = app.add_option("--check-config", check,
                                   "validate FILE; exit 0 if it is valid, 1 with the reason if not")
                        ->type_name("FILE");
  cfg_opt->excludes(check_opt);
  app.add_option("--log-level", level, "trace|debug|info|warn|error|critical|off")
      ->type_name("LEVEL");
  app.footer("Exit status: 0 stopped cleanly, 1 bad configuration, 2 usage, 3 could not serve.");
  try {
    app.parse(argc, argv);
    if (config.empty() && check.empty()) {
      throw CLI::RequiredError("--config FILE (or --check-config FILE)");
    }
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  const std::string path = check.empty() ? config : check;
  auto r = fairsched::gateway::loadGatewayConfigFile(path);
  if (const auto* e = r.errorOrNull()) {
    std::cerr << "fairsched-gateway: " << e->toString() << "\n";
    return 1;
  }
  auto& cfg = r.value();
  if (!check.empty()) {
    std::cout << path << ": OK (" << cfg.keys.size() << " keys, endpoint " << cfg.endpoint << ", "
              << cfg.upstreams.size() << " upstream(s), first " << cfg.upstreams[0].url << ")\n";
    return 0;
  }
  if (!level.empty()) cfg.log_level = level;
  const auto lvl = spdlog::level::from_str(cfg.log_level);
  if (lvl == spdlog::level::off && cfg.log_level != "off") {
    std::cerr << "fairsched-gateway: unknown log level '" << cfg.log_level << "'\n";
    return 2;
  }
  spdlog::set_level(lvl);
  spdlog::set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ fairsched-gateway: %v");
  return fairsched::gateway::runGateway(std::move(cfg));
}
