#include "daemon/notifier.hpp"

#include <systemd/sd-daemon.h>

namespace fairsched::daemon {
namespace {

class SystemdNotifier final : public Notifier {
 public:
  SystemdNotifier() {
    std::uint64_t usec = 0;
    if (sd_watchdog_enabled(0, &usec) > 0 && usec > 0) {
      interval_ = static_cast<TimeNs>(usec) * kNsPerUs / 2;
    }
  }
  void ready(const std::string& status) override { send("READY=1\nSTATUS=" + status); }
  void status(const std::string& status) override { send("STATUS=" + status); }
  void stopping(const std::string& status) override { send("STOPPING=1\nSTATUS=" + status); }
  void watchdog() override { send("WATCHDOG=1"); }
  TimeNs watchdogInterval() const override { return interval_; }

 private:
  static void send(const std::string& state) { sd_notify(0, state.c_str()); }
  TimeNs interval_ = 0;
};

}  // namespace

std::unique_ptr<Notifier> makeSystemdNotifier() {
  return std::make_unique<SystemdNotifier>();
}

}  // namespace fairsched::daemon
