// The agent's configuration: one struct, filled from defaults, then the
// config file (YAML, --config or K8S4R_CONFIG, default /etc/k8s4r/agent.yaml
// when it exists), then K8S4R_* environment variables, then flags; validated
// once, with every error reported together. Each setting has one name used
// everywhere: `heartbeat-interval` in the file, K8S4R_HEARTBEAT_INTERVAL in the
// environment, --heartbeat-interval on the command line.
#pragma once

#include "k8s4r/common/result.h"

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace k8s4r::agent {

struct AgentConfig {
  std::string broker_url;                   // broker-url (required): tcp://host:1883, ssl://host:8883
  std::string robot_id;                     // robot-id (required): a DNS-1123 label
  std::string token;                        // token or token-file: in register and heartbeat, and the MQTT password
  bool legacy_topics = false;               // legacy-topics: register and heartbeat on k8s4r/register, k8s4r/heartbeat
  std::string ca_file;                      // ca-file: CA bundle for ssl:// brokers
  std::string cert_file, key_file;          // cert-file, key-file: client certificate (mutual TLS)
  std::string work_dir = "/var/lib/k8s4r";  // work-dir: journal, report queue, task directories
  std::chrono::nanoseconds heartbeat_interval = std::chrono::seconds(30);   // heartbeat-interval (Go duration)
  std::map<std::string, std::string> labels;                                // labels: k=v,k2=v2
  std::chrono::nanoseconds default_kill_timeout = std::chrono::seconds(5);  // kill-timeout, when a task sets none
  // disconnect-stop-after: a task whose spec.disconnect says nothing is
  // stopped once the bridge has answered none of its heartbeats this long (0: never);
  // the manager's --disconnect-stop-after must say the same.
  std::chrono::nanoseconds disconnect_stop_after = std::chrono::minutes(2);
  std::size_t max_log_bytes = 10 * 1024 * 1024;  // max-log-bytes: per task and stream
  std::size_t max_queued_reports = 10000;        // max-queued-reports: held while the broker is away
  // artifact-store-bytes: the robot's store of downloaded artifacts, by
  // checksum, in WORK_DIR/artifacts (0: none; artifact_store.h).
  std::uint64_t artifact_store_bytes = std::uint64_t{1} << 30;
  // artifact-store-match: url (a stored artifact serves a task that names a
  // URL it was fetched from) or checksum (any URL with its checksum).
  std::string artifact_store_match = "url";
  // finished-task-retention: how long a finished task's uid is remembered (a
  // dispatch sent again within it is answered with the final report, not run),
  // counted on the agent's run clock.
  std::chrono::nanoseconds finished_task_retention = std::chrono::hours(24);
  std::size_t max_finished_tasks =
      20000;  // max-finished-tasks: remembered at most; the oldest beyond are forgotten early
  // task-user: who a task without spec.user runs as; "" = the agent's own user.
  std::string task_user;
  // allow-root-tasks: false refuses every task that would run as root.
  bool allow_root_tasks = true;
  // task-cgroups: auto (each task in a cgroup v2 of its own where the agent
  // can make one; otherwise, and said so at start, by process group and the
  // shim's subreaper), on (refuse to start without), off.
  std::string task_cgroups = "auto";
  std::string cgroup_parent;       // cgroup-parent: where task cgroups go ("" = TaskCgroups::default_parent)
  std::string task_shim;           // task-shim: the k8s4r-task-shim binary ("" = next to the agent's own)
  std::string log_level = "info";  // log-level: trace, debug, info, warn, error
  std::string config_file;         // where the file settings came from, if any
};

// What parse_agent_config made of the command line.
struct AgentConfigOutcome {
  std::optional<AgentConfig> config;  // set when the agent should run
  std::string output;                 // --help or --version text, or the errors
  int exit_code = 0;                  // for --help/--version 0; for errors 2
};

// `args` without the program name; `env` looks up an environment variable
// (empty when unset). Never throws.
AgentConfigOutcome parse_agent_config(const std::vector<std::string>& args,
                                      const std::function<std::string(const std::string&)>& env,
                                      const std::string& default_config_file = "/etc/k8s4r/agent.yaml");

}  // namespace k8s4r::agent
