#include "k8s4r/daemon/process_glue.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <systemd/sd-daemon.h>

#include <sys/signalfd.h>
#include <unistd.h>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <system_error>

namespace k8s4r::daemon {

StopSignals::StopSignals(std::initializer_list<int> more) {
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  for (const int signal : more) sigaddset(&stop_signals, signal);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  fd_ = signalfd(-1, &stop_signals, SFD_CLOEXEC | SFD_NONBLOCK);
  if (fd_ < 0) throw std::system_error(errno, std::generic_category(), "signalfd");
}

StopSignals::~StopSignals() {
  if (fd_ >= 0) close(fd_);
}

void StopSignals::watch(EventLoop& loop, std::function<void(int, const std::string&)> on_signal) {
  loop.watch(fd_, [fd = fd_, on_signal = std::move(on_signal)] {
    signalfd_siginfo info{};
    while (read(fd, &info, sizeof info) == sizeof info) {
      const int signal = static_cast<int>(info.ssi_signo);
      on_signal(signal, strsignal(signal));
    }
  });
}

Systemd systemd() {
  Systemd glue;
  glue.notify = [](const std::string& state) { sd_notify(0, state.c_str()); };
  std::uint64_t watchdog_usec = 0;
  if (sd_watchdog_enabled(0, &watchdog_usec) > 0) glue.watchdog_interval = std::chrono::microseconds(watchdog_usec / 2);
  return glue;
}

void setup_logging(const std::string& name, const std::string& level) {
  spdlog::set_default_logger(spdlog::stderr_color_mt(name));
  spdlog::set_level(spdlog::level::from_str(level));
  spdlog::set_pattern(std::getenv("JOURNAL_STREAM") ? "[%l] %v" : "%Y-%m-%dT%H:%M:%S.%e [%l] %v");
}

}  // namespace k8s4r::daemon
