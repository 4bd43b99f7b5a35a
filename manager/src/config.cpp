#include "k8s4r/manager/config.h"

#include "k8s4r/common/duration.h"
#include "k8s4r/common/identifiers.h"
#include "k8s4r/daemon/config_loader.h"
#include "k8s4r/kube/leader_election.h"

namespace k8s4r::manager {

#ifndef K8S4R_VERSION
#define K8S4R_VERSION "0.0.0"
#endif

namespace {

using daemon::ApplyResult;

ApplyResult namespace_name(const std::string& value, std::string& target) {
  if (auto checked = validate_identifier(value); !checked) return checked.error().message;
  target = value;
  return std::nullopt;
}

std::vector<daemon::Setting> settings(ManagerConfig& c) {
  const auto duration = [](std::chrono::nanoseconds& target) {
    return [&target](const std::string& v) { return daemon::parse_positive_duration(v, target); };
  };
  return {
      {"kubeconfig", daemon::ValueType::Path,
       "kubeconfig file (default: $KUBECONFIG, then in-cluster, then ~/.kube/config)",
       [&c](const std::string& v) { return daemon::parse_existing_file(v, c.kubeconfig); }},
      {"namespace", daemon::ValueType::String, "the namespace to manage (default: every namespace)",
       [&c](const std::string& v) { return namespace_name(v, c.namespace_); }},
      {"metrics-bind-address", daemon::ValueType::HostPort,
       "host:port for /metrics, /healthz and /readyz (127.0.0.1:9091; port 0: any)",
       [&c](const std::string& v) { return daemon::parse_bind_address(v, c.metrics_bind_address); }},
      {"require-robot-token", daemon::ValueType::Bool,
       "approve a robot only when its registration token matches its Secret k8s4r-robot-<id> (true; false approves "
       "any client that registers)",
       [&c](const std::string& v) { return daemon::parse_bool(v, c.require_robot_token); }},
      {"robot-offline-after", daemon::ValueType::Duration, "a robot without a heartbeat this long is Offline (90s)",
       duration(c.robot_offline_after)},
      {"disconnect-grace", daemon::ValueType::Duration,
       "a robot disconnected from the broker this long is Offline (30s)", duration(c.disconnect_grace)},
      {"dispatch-timeout", daemon::ValueType::Duration, "a Task still dispatching this long is rescheduled (2m)",
       duration(c.dispatch_timeout)},
      {"disconnect-stop-after", daemon::ValueType::Duration,
       "a Task whose spec.disconnect says nothing is stopped by its robot after this long out of contact; the "
       "agents' disconnect-stop-after must say the same (2m; 0s: never)",
       [&c](const std::string& v) { return daemon::parse_non_negative_duration(v, c.disconnect_stop_after); }},
      {"disconnect-margin", daemon::ValueType::Duration,
       "added to a Task's stop window and killTimeout for its default lostAfter: the bridge's heartbeat write "
       "interval and clock skew (90s)",
       duration(c.disconnect_margin)},
      {"cache-entry-max-age", daemon::ValueType::Duration,
       "the result cache's entries older than this are deleted (168h); a Task's own maxStaleness may be shorter",
       duration(c.cache_entry_max_age)},
      {"cache-max-entries", daemon::ValueType::Count,
       "the result cache keeps at most this many entries per namespace, deleting the oldest first (10000)",
       [&c](const std::string& v) { return daemon::parse_positive_size(v, c.cache_max_entries); }},
      {"leader-elect", daemon::ValueType::Bool,
       "run only while holding the Lease k8s4r-manager, so one of several managers acts (true)",
       [&c](const std::string& v) { return daemon::parse_bool(v, c.leader_elect); }},
      {"leader-election-identity", daemon::ValueType::String,
       "this manager's name in the Lease (default: host name and a random suffix)",
       [&c](const std::string& v) -> ApplyResult {
         if (v.empty() || v.size() > 253) return "must be 1 to 253 characters";
         c.leader_election_identity = v;
         return std::nullopt;
       }},
      {"leader-election-namespace", daemon::ValueType::String,
       "the Lease's namespace (default: namespace, else the kubeconfig's)",
       [&c](const std::string& v) { return namespace_name(v, c.leader_election_namespace); }},
      {"leader-election-lease-duration", daemon::ValueType::Duration,
       "how long a follower waits before taking the Lease over (15s)", duration(c.lease_duration)},
      {"leader-election-renew-deadline", daemon::ValueType::Duration,
       "how long the leader tries to renew before it stops acting (10s)", duration(c.renew_deadline)},
      {"leader-election-retry-period", daemon::ValueType::Duration, "how often the Lease is tried (2s)",
       duration(c.retry_period)},
      {"log-level", daemon::ValueType::Level, "trace, debug, info, warn or error",
       [&c](const std::string& v) { return daemon::parse_log_level(v, c.log_level); }},
  };
}

}  // namespace

ManagerConfigOutcome parse_manager_config(const std::vector<std::string>& args,
                                          const std::function<std::string(const std::string&)>& env,
                                          const std::string& default_config_file) {
  ManagerConfig config;
  const daemon::Program program{"k8s4r-manager",
                                "k8s4r-manager: turns Jobs into Tasks on robots, approves robots and notices "
                                "when they go away.",
                                K8S4R_VERSION, default_config_file};
  const auto outcome =
      daemon::load_settings(program, settings(config), args, env, [&](std::vector<std::string>& errors) {
        // A leader stops acting before another may take the Lease over.
        for (std::string& error : kube::lease_timing_errors("leader-election-", config.lease_duration,
                                                            config.renew_deadline, config.retry_period))
          errors.push_back(std::move(error));
      });
  if (!outcome.run) return {std::nullopt, outcome.output, outcome.exit_code};
  config.config_file = outcome.config_file;
  return {config, "", 0};
}

}  // namespace k8s4r::manager
