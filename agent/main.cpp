// k8s4r-agent: the robot-side daemon (docs/agent.md). Reads its config, then
// hands everything to k8s4r::agent::Agent on one event loop. SIGTERM and
// SIGINT begin a graceful shutdown (the tasks stopped and reported); SIGUSR2
// hands the running tasks over to the next agent (a package upgrade).
#include "k8s4r/agent/agent.h"
#include "k8s4r/agent/config.h"
#include "k8s4r/common/messages.h"
#include "k8s4r/common/topics.h"
#include "k8s4r/daemon/config_loader.h"
#include "k8s4r/daemon/event_loop.h"
#include "k8s4r/daemon/process_glue.h"
#include "k8s4r/mqtt/link.h"
#include "k8s4r/mqtt/tls_check.h"

#include <curl/curl.h>
#include <spdlog/spdlog.h>

#include <csignal>
#include <cstdlib>
#include <iostream>

int main(int argc, char** argv) {
  using namespace k8s4r;
  using namespace k8s4r::agent;

  const auto outcome = parse_agent_config(std::vector<std::string>(argv + 1, argv + argc), daemon::process_environment);
  if (!outcome.config) {
    (outcome.exit_code == 0 ? std::cout : std::cerr) << outcome.output;
    return outcome.exit_code;
  }
  const AgentConfig& config = *outcome.config;
  daemon::setup_logging("k8s4r-agent", config.log_level);
  daemon::StopSignals stop_signals({SIGUSR2});  // before any thread starts
  curl_global_init(CURL_GLOBAL_DEFAULT);

  const daemon::Systemd systemd = daemon::systemd();
  AgentHooks hooks;
  hooks.notify = systemd.notify;
  hooks.watchdog_interval = systemd.watchdog_interval;

  mqtt::LinkSettings settings;
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
  settings.cert_file = config.cert_file;
  settings.key_file = config.key_file;
  for (const std::string& warning : mqtt::tls_file_warnings({config.ca_file, config.cert_file, config.key_file}))
    spdlog::warn("{}", warning);

  int exit_code = 0;
  try {
    daemon::EventLoop loop;
    Agent agent(
        config, loop,
        [&settings](mqtt::LinkEvents events) { return mqtt::make_paho_link(settings, std::move(events)); }, hooks);
    stop_signals.watch(loop, [&](int signal, const std::string& signal_name) {
      spdlog::info("received {}", signal_name);
      if (signal == SIGUSR2)
        agent.hand_over();
      else
        agent.shutdown();
    });
    agent.start();
    loop.run();
    exit_code = agent.exit_code();
  } catch (const std::exception& error) {
    spdlog::critical("{}", error.what());
    curl_global_cleanup();
    return 1;
  }
  curl_global_cleanup();
  return exit_code;
}
