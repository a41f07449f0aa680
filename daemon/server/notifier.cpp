#include "daemon/server/notifier.hpp"

#include <systemd/sd-daemon.h>
#include <time.h>

#include <string>

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
  void reloading(const std::string& status) override {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    const long long usec = static_cast<long long>(ts.tv_sec) * 1'000'000 + ts.tv_nsec / 1000;
    send("RELOADING=1\nMONOTONIC_USEC=" + std::to_string(usec) + "\nSTATUS=" + status);
  }
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
