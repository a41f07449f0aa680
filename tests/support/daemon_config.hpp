// The TOML text of a daemon config for tests and benchmarks: [daemon] with
// the socket, [[tiers]], the endpoints and tenants a test needs, and one
// [[clients]] rule for this uid. Fields left at their defaults give the
// common case; what a test needs beyond them goes in verbatim TOML.
#pragma once

#include <unistd.h>

#include <optional>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include "daemon/config/config.hpp"
#include "tests/support/forked_daemon.hpp"

namespace fairsched::testing {

struct DaemonConfigText {
  std::string top;                   // top-level keys, before any table (default_tier = ...)
  std::string socket;                // "" leaves daemon.socket out
  std::string socket_mode = "0600";  // "" leaves it out
  std::string log_level = "error";   // "" leaves it out
  // [daemon] state_dir: "" (the default here) keeps no state, so no test
  // sees another's; nullopt leaves the key out (the daemon's default).
  std::optional<std::string> state_dir = std::string();
  std::string daemon_extra;      // more [daemon] lines
  bool test_event_loop = false;  // event_loop from FAIRSCHED_TEST_EVENT_LOOP, if set
  std::string before_tiers;      // tables between [daemon] and [[tiers]] ([fleet], [metrics])
  std::vector<std::string> tiers{"paid"};  // one [[tiers]] each, by name
  std::string body;                        // [endpoints.*], [tenants.*] tables, verbatim
  // The [[clients]] rule for this uid.
  bool client = true;
  std::string client_name = "tests";
  std::string client_tenants = "[\"*\"]";
  std::string client_endpoints = "[\"*\"]";  // "" leaves it out
  std::string client_extra;  // more lines of the rule (workers, assign_tiers, admin)
  std::string after;         // more TOML after the rule

  std::string text() const {
    std::string t = top + "[daemon]\n";
    if (!socket.empty()) t += "socket = \"" + socket + "\"\n";
    if (!socket_mode.empty()) t += "socket_mode = \"" + socket_mode + "\"\n";
    if (!log_level.empty()) t += "log_level = \"" + log_level + "\"\n";
    if (state_dir) t += "state_dir = \"" + *state_dir + "\"\n";
    t += daemon_extra;
    if (test_event_loop) t += testEventLoopLine();
    t += before_tiers;
    for (const std::string& tier : tiers) t += "[[tiers]]\nname = \"" + tier + "\"\n";
    t += body;
    if (client) {
      t += "[[clients]]\nname = \"" + client_name + "\"\nuids = [" + std::to_string(getuid()) +
           "]\ntenants = " + client_tenants + "\n";
      if (!client_endpoints.empty()) t += "endpoints = " + client_endpoints + "\n";
      t += client_extra;
    }
    return t + after;
  }

  // The parsed config, or the parser's message.
  fairsched::Result<config::Config, std::string> parse(const std::string& source = "test") const {
    auto parsed = config::parseConfig(text(), source);
    if (auto* err = parsed.errorOrNull()) return err->toString();
    return std::move(parsed).value();
  }
  // The parsed config; throws std::invalid_argument with the parser's
  // message when the text does not parse (a test fails with it).
  config::Config parsed(const std::string& source = "test") const {
    auto r = parse(source);
    if (auto* why = r.errorOrNull()) throw std::invalid_argument(*why);
    return std::move(r).value();
  }
};

}  // namespace fairsched::testing
