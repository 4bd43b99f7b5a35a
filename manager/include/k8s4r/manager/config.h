// The manager's configuration: one struct, read by the loader every daemon
// shares (k8s4r/daemon/config_loader.h): defaults, then the config file
// (--config or K8S4R_CONFIG, default /etc/k8s4r/manager.yaml when it exists),
// then K8S4R_* variables, then flags; every error reported together. The
// leader election's timings are checked as client-go checks them (lease
// duration > renew deadline > 1.2 x retry period).
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace k8s4r::manager {

struct ManagerConfig {
  std::string kubeconfig;                               // kubeconfig: empty: $KUBECONFIG, in-cluster, ~/.kube/config
  std::string namespace_;                               // namespace: empty: every namespace
  std::string metrics_bind_address = "127.0.0.1:9091";  // metrics-bind-address: /metrics, /healthz, /readyz
  // require-robot-token: approve a robot only by its Secret's token; false
  // approves whoever registers (docs/security.md).
  bool require_robot_token = true;
  std::chrono::nanoseconds robot_offline_after = std::chrono::seconds(90);  // robot-offline-after
  std::chrono::nanoseconds disconnect_grace = std::chrono::seconds(30);     // disconnect-grace
  std::chrono::nanoseconds dispatch_timeout = std::chrono::minutes(2);      // dispatch-timeout
  // disconnect-stop-after: a Task whose spec.disconnect says nothing is
  // stopped by its robot after this long out of contact (the agents'
  // disconnect-stop-after must say the same); 0: never.
  std::chrono::nanoseconds disconnect_stop_after = std::chrono::minutes(2);
  // disconnect-margin: added to a Task's stop window and killTimeout for its
  // default lostAfter: heartbeat writes coalesced by the bridge, clock skew.
  std::chrono::nanoseconds disconnect_margin = std::chrono::seconds(90);
  // The result cache (docs/caching.md): entries older than this are deleted
  // (cache-entry-max-age), and at most this many kept per namespace, the
  // oldest deleted first (cache-max-entries).
  std::chrono::nanoseconds cache_entry_max_age = std::chrono::hours(24 * 7);
  std::size_t cache_max_entries = 10000;
  bool leader_elect = true;               // leader-elect
  std::string leader_election_identity;   // leader-election-identity: empty: the host name and a random suffix
  std::string leader_election_namespace;  // leader-election-namespace: empty: namespace, else the kubeconfig's
  std::chrono::nanoseconds lease_duration = std::chrono::seconds(15);  // leader-election-lease-duration
  std::chrono::nanoseconds renew_deadline = std::chrono::seconds(10);  // leader-election-renew-deadline
  std::chrono::nanoseconds retry_period = std::chrono::seconds(2);     // leader-election-retry-period
  std::string log_level = "info";
  std::string config_file;
};

struct ManagerConfigOutcome {
  std::optional<ManagerConfig> config;
  std::string output;
  int exit_code = 0;
};

ManagerConfigOutcome parse_manager_config(const std::vector<std::string>& args,
                                          const std::function<std::string(const std::string&)>& env,
                                          const std::string& default_config_file = "/etc/k8s4r/manager.yaml");

}  // namespace k8s4r::manager
