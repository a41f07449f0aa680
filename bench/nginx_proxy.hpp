// nginx as a plain keep-alive reverse proxy, the ceiling a gateway is held
// to in `fairsched-bench gateway`: one worker process, upstream keep-alive,
// no auth, no body parsing, response buffering off (so streamed chunks pass
// through as they come). Started from the system's nginx binary with a
// config the bench writes into its temporary directory, stopped by PID.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

namespace fairsched::bench {

class NginxProxy {
 public:
  static constexpr const char* kBinary = "/usr/sbin/nginx";

  NginxProxy() = default;
  ~NginxProxy();  // SIGQUIT then SIGKILL, waited for
  NginxProxy(const NginxProxy&) = delete;
  NginxProxy& operator=(const NginxProxy&) = delete;

  // nginx installed (the bench then adds its cells)?
  static bool available();
  // Listens on 127.0.0.1:`port`, proxying to 127.0.0.1:`upstream`; files
  // under `dir`. nullopt once it accepts connections, else why not.
  std::optional<std::string> start(const std::string& dir, std::uint16_t port,
                                   std::uint16_t upstream);
  // CPU time of the master and its workers, in ns.
  std::uint64_t cpuNs() const;
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
};

}  // namespace fairsched::bench
