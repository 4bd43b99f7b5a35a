// The glue between a daemon and the process it runs in: stop signals read
// from a signalfd on the event loop, systemd's sd_notify and watchdog, and
// the log format. Every daemon's main() is these, its config and its core.
//
// Threading: StopSignals must be made in main() before any thread starts,
// so every thread inherits the blocked mask and only the signalfd sees
// SIGTERM and SIGINT (posix_spawn gives children a clean mask).
#pragma once

#include "k8s4r/daemon/event_loop.h"

#include <chrono>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>

namespace k8s4r::daemon {

class StopSignals {
 public:
  // Blocks SIGTERM, SIGINT and the `more` signals a daemon also handles
  // (the agent's SIGUSR2), opens a signalfd for them and ignores SIGPIPE (a
  // dropped socket is an error value, not a death). Throws
  // std::system_error when the signalfd cannot be made.
  explicit StopSignals(std::initializer_list<int> more = {});
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // Calls on_signal with the signal's number and name ("Terminated") on the
  // loop, once per signal received.
  void watch(EventLoop& loop, std::function<void(int signal, const std::string& signal_name)> on_signal);

 private:
  int fd_ = -1;
};

struct Systemd {
  // sd_notify(3) state strings: "READY=1", "WATCHDOG=1", "STOPPING=1",
  // "STATUS=...". Does nothing outside systemd.
  std::function<void(const std::string& state)> notify;
  // Half the unit's WatchdogSec, or nullopt when the watchdog is off.
  std::optional<std::chrono::microseconds> watchdog_interval;
};
Systemd systemd();

// spdlog's default logger named `name`, to stderr, at `level`; under
// journald (JOURNAL_STREAM set) without a time stamp, which journald adds.
void setup_logging(const std::string& name, const std::string& level);

}  // namespace k8s4r::daemon
