// How the daemon tells its supervisor where it stands. The systemd
// implementation speaks sd_notify (Type=notify): READY=1 once the socket
// accepts, STATUS= lines, WATCHDOG=1 from the event loop itself (so a wedged
// loop stops the pings and systemd restarts it), RELOADING=1 then READY=1
// around a configuration reload, STOPPING=1 on shutdown.
// Without NOTIFY_SOCKET every call does nothing.
#pragma once

#include <memory>
#include <string>

#include "daemon/core/types.hpp"

namespace fairsched::daemon {

class Notifier {
 public:
  virtual ~Notifier() = default;
  virtual void ready(const std::string& status) = 0;
  virtual void status(const std::string& status) = 0;
  virtual void stopping(const std::string& status) = 0;
  // A reload begins (RELOADING=1 with MONOTONIC_USEC, as Type=notify-reload
  // expects); ready() says it is over, whatever its outcome.
  virtual void reloading(const std::string& status) = 0;
  virtual void watchdog() = 0;
  // How often watchdog() must be called; 0 when no watchdog is configured.
  virtual TimeNs watchdogInterval() const = 0;
};

// sd_notify, configured from the environment (NOTIFY_SOCKET, WATCHDOG_USEC).
// Pings at half the watchdog timeout.
std::unique_ptr<Notifier> makeSystemdNotifier();

}  // namespace fairsched::daemon
