// k8s4r-manager: the controllers that turn Jobs into Tasks on robots,
// approve robots and notice when they go away (docs/manager.md). Reads its
// config, campaigns for the Lease when --leader-elect is on, and runs
// k8s4r::manager::Manager's controllers while it leads. SIGTERM and SIGINT
// stop it cleanly (the Lease is given up); losing the Lease ends the
// process with status 1, so its supervisor starts it afresh.
#include "k8s4r/daemon/config_loader.h"
#include "k8s4r/daemon/event_loop.h"
#include "k8s4r/daemon/health_server.h"
#include "k8s4r/daemon/process_glue.h"
#include "k8s4r/daemon/process_metrics.h"
#include "k8s4r/kube/config.h"
#include "k8s4r/kube/leader_election.h"
#include "k8s4r/manager/config.h"
#include "k8s4r/manager/manager.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <random>

int main(int argc, char** argv) {
  using namespace k8s4r;
  using namespace k8s4r::manager;

  const auto outcome =
      parse_manager_config(std::vector<std::string>(argv + 1, argv + argc), daemon::process_environment);
  if (!outcome.config) {
    (outcome.exit_code == 0 ? std::cout : std::cerr) << outcome.output;
    return outcome.exit_code;
  }
  const ManagerConfig& config = *outcome.config;
  daemon::setup_logging("k8s4r-manager", config.log_level);
  daemon::StopSignals stop_signals;  // before any thread starts

  try {
    auto kube_config = kube::load_client_config(config.kubeconfig);
    if (!kube_config) throw std::runtime_error("Kubernetes configuration: " + kube_config.error().to_string());
    spdlog::info("Kubernetes API {} (from {})", kube_config.value().server, kube_config.value().source);
    kube::Client client(kube_config.value());

    std::string identity = config.leader_election_identity;
    if (identity.empty()) {
      char host[256] = {};
      gethostname(host, sizeof host - 1);
      std::mt19937_64 random{std::random_device{}()};
      char suffix[17];
      std::snprintf(suffix, sizeof suffix, "%016llx", static_cast<unsigned long long>(random()));
      identity = std::string(host) + "_" + suffix;
    }

    const daemon::Systemd systemd = daemon::systemd();
    daemon::Metrics metrics;
    daemon::add_process_metrics(metrics);
    daemon::EventLoop loop;
    Manager manager(config, client, metrics, identity);
    daemon::HealthServer health(metrics, [&manager] { return manager.not_ready_reason(); });
    const int port = health.start(config.metrics_bind_address);
    spdlog::info("serving /metrics, /healthz and /readyz on port {}", port);

    // On every way out of this block: the controllers stopped and the thread
    // that started them joined, after the elector (declared below) is gone.
    std::thread leader_thread;
    struct Joiner {
      Manager& manager;
      std::thread& thread;
      ~Joiner() {
        manager.stop();
        if (thread.joinable()) thread.join();
      }
    } joiner{manager, leader_thread};
    std::unique_ptr<kube::Client> lease_client;
    std::unique_ptr<kube::LeaderElector> elector;
    if (config.leader_elect) {
      std::string lease_namespace = config.leader_election_namespace;
      if (lease_namespace.empty()) lease_namespace = config.namespace_;
      if (lease_namespace.empty()) lease_namespace = kube_config.value().namespace_;
      lease_client =
          std::make_unique<kube::Client>(kube::lease_client_config(kube_config.value(), config.retry_period));
      kube::LeaderElectionConfig election{lease_namespace,       "k8s4r-manager",       identity,
                                          config.lease_duration, config.renew_deadline, config.retry_period};
      election.on_started_leading = [&] { leader_thread = std::thread([&manager] { manager.lead(); }); };
      // As controller-runtime does: a manager that lost the Lease may be
      // behind a partition while another leads; it stops writing at once by
      // ending, and its supervisor starts it afresh as a follower.
      election.on_stopped_leading = [] {
        spdlog::critical("lost the Lease: exiting so that only the new leader acts");
        spdlog::default_logger()->flush();
        std::_Exit(1);
      };
      election.on_new_leader = [&identity](const std::string& holder) {
        if (holder != identity) spdlog::info("leader election: {} leads; following", holder);
      };
      elector = std::make_unique<kube::LeaderElector>(*lease_client, std::move(election));
    } else {
      spdlog::warn("--leader-elect is off: run one manager at a time");
    }
    stop_signals.watch(loop, [&](int, const std::string& signal_name) {
      spdlog::info("received {}", signal_name);
      loop.stop();
    });
    manager.start();
    if (elector)
      elector->start();
    else
      leader_thread = std::thread([&manager] { manager.lead(); });
    if (systemd.notify) systemd.notify("READY=1");
    loop.run();
    if (systemd.notify) systemd.notify("STOPPING=1");
    spdlog::info("shutting down");
    // The controllers stop (their writes in flight finish) while the Lease
    // is still renewed, and only then is it given up: two managers never act
    // at once.
    manager.stop();
    if (elector) elector->stop();  // no more callbacks: leader_thread is ours alone now
    if (leader_thread.joinable()) leader_thread.join();
    if (elector) elector->release();
    elector.reset();
    health.stop();
  } catch (const std::exception& error) {
    spdlog::critical("{}", error.what());
    return 1;
  }
  spdlog::info("bye");
  return 0;
}
