// k8s4r-bridge: beside the MQTT broker, turns robots' messages into Robot and
// Task writes and dispatches Tasks to robots (docs/bridge.md). Reads its
// config, then hands everything to k8s4r::bridge::Bridge on one event loop;
// SIGTERM and SIGINT stop it cleanly.
#include "k8s4r/bridge/bridge.h"
#include "k8s4r/bridge/config.h"
#include "k8s4r/bridge/logs_endpoint.h"
#include "k8s4r/daemon/config_loader.h"
#include "k8s4r/daemon/event_loop.h"
#include "k8s4r/daemon/health_server.h"
#include "k8s4r/daemon/heap_release.h"
#include "k8s4r/daemon/process_glue.h"
#include "k8s4r/daemon/process_metrics.h"
#include "k8s4r/kube/config.h"
#include "k8s4r/mqtt/link.h"
#include "k8s4r/mqtt/tls_check.h"

#include <spdlog/spdlog.h>

#include <cstdlib>
#include <iostream>
#include <optional>

int main(int argc, char** argv) {
  using namespace k8s4r;
  using namespace k8s4r::bridge;
  // Two arenas and a trim every 10 s: what a registration storm freed goes
  // back to the system (daemon/heap_release.h).
  daemon::limit_malloc_arenas(2);

  const auto outcome =
      parse_bridge_config(std::vector<std::string>(argv + 1, argv + argc), daemon::process_environment);
  if (!outcome.config) {
    (outcome.exit_code == 0 ? std::cout : std::cerr) << outcome.output;
    return outcome.exit_code;
  }
  const BridgeConfig& config = *outcome.config;
  daemon::setup_logging("k8s4r-bridge", config.log_level);
  daemon::StopSignals stop_signals;  // before any thread starts

  try {
    auto kube_config = kube::load_client_config(config.kubeconfig);
    if (!kube_config) throw std::runtime_error("Kubernetes configuration: " + kube_config.error().to_string());
    const std::string namespace_ = config.namespace_.empty() ? kube_config.value().namespace_ : config.namespace_;
    spdlog::info("Kubernetes API {} (from {})", kube_config.value().server, kube_config.value().source);
    kube::Client client(kube_config.value());

    mqtt::LinkSettings settings;
    settings.broker_url = config.broker_url;
    settings.client_id = config.mqtt_client_id();
    settings.username = config.username;
    settings.password = config.password;
    settings.ca_file = config.ca_file;
    settings.cert_file = config.cert_file;
    settings.key_file = config.key_file;
    for (const std::string& warning : mqtt::tls_file_warnings({config.ca_file, config.cert_file, config.key_file}))
      spdlog::warn("{}", warning);

    const daemon::Systemd systemd = daemon::systemd();
    daemon::Metrics metrics;
    daemon::add_process_metrics(metrics);
    daemon::EventLoop loop;
    Bridge bridge(
        config, namespace_, loop, client,
        [&settings](mqtt::LinkEvents events) { return mqtt::make_paho_link(settings, std::move(events)); }, metrics,
        BridgeHooks{systemd.notify, systemd.watchdog_interval, [] {
                      // As the manager does with its Lease: a replica behind a partition may
                      // have had its robots taken over; it ends, and its supervisor starts it
                      // afresh.
                      spdlog::critical("lost its replica Lease: exiting so that only the robots' new owners act");
                      spdlog::default_logger()->flush();
                      std::_Exit(1);
                    }});
    daemon::HealthServer health(metrics, [&bridge] { return bridge.not_ready_reason(); });
    const int port = health.start(config.metrics_bind_address);
    spdlog::info("serving /metrics, /healthz and /readyz on port {}", port);
    std::optional<LogsEndpoint> logs;
    if (!config.logs_bind_address.empty()) {
      LogsEndpointConfig logs_config{config.logs_bind_address, config.logs_cert_file, config.logs_key_file, namespace_,
                                     config.logs_max_followers};
      logs_config.not_ready = [&bridge] { return bridge.not_ready_reason(); };
      logs.emplace(std::move(logs_config), client, bridge.log_follows(), metrics);
      const int logs_port = logs->start();
      spdlog::info("serving tasks' logs over {} on port {}", config.logs_cert_file.empty() ? "HTTP" : "HTTPS",
                   logs_port);
    }
    stop_signals.watch(loop, [&](int, const std::string& signal_name) {
      spdlog::info("received {}", signal_name);
      bridge.shutdown();
    });
    bridge.start();
    daemon::trim_heap_periodically(loop, metrics, std::chrono::seconds(10));
    loop.run();
    if (logs) logs->stop();
    health.stop();
  } catch (const std::exception& error) {
    spdlog::critical("{}", error.what());
    return 1;
  }
  spdlog::info("bye");
  return 0;
}
