// k8s4r-agent: the robot-side daemon (docs/agent.md). Reads its config, then
// hands everything to k8s4r::agent::Agent on one event loop; SIGTERM and
// SIGINT begin a graceful shutdown.
#include "k8s4r/agent/agent.h"
#include "k8s4r/agent/config.h"
#include "k8s4r/agent/mqtt_link.h"
#include "k8s4r/common/messages.h"
#include "k8s4r/common/topics.h"
#include "k8s4r/daemon/event_loop.h"

#include <curl/curl.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <systemd/sd-daemon.h>

#include <sys/signalfd.h>
#include <unistd.h>
#include <csignal>
#include <cstdlib>
#include <iostream>

int main(int argc, char** argv) {
  using namespace k8s4r;
  using namespace k8s4r::agent;

  const auto outcome = parse_agent_config(std::vector<std::string>(argv + 1, argv + argc), [](const std::string& name) {
    const char* value = std::getenv(name.c_str());
    return std::string(value ? value : "");
  });
  if (!outcome.config) {
    (outcome.exit_code == 0 ? std::cout : std::cerr) << outcome.output;
    return outcome.exit_code;
  }
  const AgentConfig& config = *outcome.config;
  spdlog::set_default_logger(spdlog::stderr_color_mt("k8s4r-agent"));
  spdlog::set_level(spdlog::level::from_str(config.log_level));
  // journald stamps each line itself; elsewhere a time helps.
  spdlog::set_pattern(std::getenv("JOURNAL_STREAM") ? "[%l] %v" : "%Y-%m-%dT%H:%M:%S.%e [%l] %v");

  // Before any thread starts, so every thread inherits the mask and only the
  // signalfd sees these signals; posix_spawn gives children a clean mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  const int signal_fd = signalfd(-1, &stop_signals, SFD_CLOEXEC | SFD_NONBLOCK);
  curl_global_init(CURL_GLOBAL_DEFAULT);

  AgentHooks hooks;
  hooks.notify = [](const std::string& state) { sd_notify(0, state.c_str()); };
  std::uint64_t watchdog_usec = 0;
  if (sd_watchdog_enabled(0, &watchdog_usec) > 0)
    hooks.watchdog_interval = std::chrono::microseconds(watchdog_usec / 2);

  PahoSettings settings;
  settings.broker_url = config.broker_url;
  settings.client_id = config.robot_id;
  if (!config.token.empty()) {
    // The token is also the MQTT password, so a broker can authenticate robots.
    settings.username = config.robot_id;
    settings.password = config.token;
  }
  settings.will_topic = topics::presence(config.robot_id).value();
  // The will's timestamp is when the agent started; docs/protocol.md says so.
  settings.will_payload =
      encode(Presence{config.robot_id, false,
                      std::chrono::time_point_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now())});
  settings.ca_file = config.ca_file;

  try {
    daemon::EventLoop loop;
    Agent agent(
        config, loop, [&settings](MqttLinkEvents events) { return make_paho_link(settings, std::move(events)); },
        hooks);
    loop.watch(signal_fd, [&] {
      signalfd_siginfo info{};
      while (read(signal_fd, &info, sizeof info) == sizeof info) {
        spdlog::info("received {}", strsignal(static_cast<int>(info.ssi_signo)));
        agent.shutdown();
      }
    });
    agent.start();
    loop.run();
  } catch (const std::exception& error) {
    spdlog::critical("{}", error.what());
    curl_global_cleanup();
    return 1;
  }
  curl_global_cleanup();
  return 0;
}
