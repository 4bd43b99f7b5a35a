#include "k8s4r/agent/config.h"

#include "k8s4r/common/identifiers.h"
#include "k8s4r/daemon/config_loader.h"
#include "k8s4r/mqtt/connect_options.h"

#include <filesystem>

#include <pwd.h>
#include <unistd.h>

namespace k8s4r::agent {

namespace {

#ifndef K8S4R_VERSION
#define K8S4R_VERSION "0.0.0"
#endif

using daemon::ApplyResult;

std::vector<daemon::Setting> settings(AgentConfig& c) {
  return {
      {"broker-url", daemon::ValueType::Url, "MQTT broker, tcp://HOST:PORT or ssl://HOST:PORT",
       [&c](const std::string& v) { return daemon::parse_broker_url(v, c.broker_url); }},
      {"robot-id", daemon::ValueType::String, "this robot's id: a DNS-1123 label, also the MQTT client id",
       [&c](const std::string& v) -> ApplyResult {
         if (auto checked = validate_identifier(v); !checked) return checked.error().message;
         c.robot_id = v;
         return std::nullopt;
       }},
      {"token", daemon::ValueType::String,
       "credential: sent in register and heartbeat, and as the MQTT password (user name: the robot id)",
       [&c](const std::string& v) -> ApplyResult {
         c.token = v;
         return std::nullopt;
       }},
      {"token-file", daemon::ValueType::Path,
       "file holding the token (kept out of the process list; a Secret's key mounted as a file)",
       [&c](const std::string& v) { return daemon::parse_secret_file(v, c.token); }},
      {"legacy-topics", daemon::ValueType::Bool,
       "register and heartbeat on Go K8s4r's shared topics, for a Go K8s4r server (false: on this "
       "robot's own topics, which a broker can confine it to)",
       [&c](const std::string& v) { return daemon::parse_bool(v, c.legacy_topics); }},
      {"ca-file", daemon::ValueType::Path, "PEM CA bundle to verify an ssl:// broker (default: the system's)",
       [&c](const std::string& v) { return daemon::parse_existing_file(v, c.ca_file); }},
      {"cert-file", daemon::ValueType::Path,
       "PEM client certificate for a broker that asks for one (mutual TLS; with key-file)",
       [&c](const std::string& v) { return daemon::parse_existing_file(v, c.cert_file); }},
      {"key-file", daemon::ValueType::Path, "PEM private key of cert-file",
       [&c](const std::string& v) { return daemon::parse_existing_file(v, c.key_file); }},
      {"work-dir", daemon::ValueType::Path, "state: journal, queued reports, task directories",
       [&c](const std::string& v) -> ApplyResult {
         if (v.empty() || v.front() != '/') return "must be an absolute path, got '" + v + "'";
         c.work_dir = v;
         return std::nullopt;
       }},
      {"heartbeat-interval", daemon::ValueType::Duration, "time between heartbeats (30s)",
       [&c](const std::string& v) { return daemon::parse_positive_duration(v, c.heartbeat_interval); }},
      {"labels", daemon::ValueType::KeyValues, "labels for scheduling: k=v,k2=v2",
       [&c](const std::string& v) { return daemon::parse_labels(v, c.labels); }},
      {"kill-timeout", daemon::ValueType::Duration, "grace between SIGTERM and SIGKILL when a task sets none (5s)",
       [&c](const std::string& v) { return daemon::parse_positive_duration(v, c.default_kill_timeout); }},
      {"disconnect-stop-after", daemon::ValueType::Duration,
       "a task whose spec.disconnect says nothing is stopped after this long without contact with the bridge, as the "
       "manager then runs it elsewhere; 0s: never (2m; the manager's --disconnect-stop-after must "
       "say the same)",
       [&c](const std::string& v) { return daemon::parse_non_negative_duration(v, c.disconnect_stop_after); }},
      {"max-log-bytes", daemon::ValueType::Count, "cap on each task's stdout and stderr files",
       [&c](const std::string& v) { return daemon::parse_positive_size(v, c.max_log_bytes); }},
      {"artifact-store-bytes", daemon::ValueType::Count,
       "room for downloaded artifacts kept by checksum in WORK_DIR/artifacts, so a later task that names the same "
       "checksum gets a verified copy instead of a download; the least recently used go first; 0: keep none "
       "(1073741824)",
       [&c](const std::string& v) -> daemon::ApplyResult {
         if (v == "0") {
           c.artifact_store_bytes = 0;
           return std::nullopt;
         }
         std::size_t bytes = 0;
         if (auto problem = daemon::parse_positive_size(v, bytes)) return problem;
         c.artifact_store_bytes = bytes;
         return std::nullopt;
       }},
      {"artifact-store-match", daemon::ValueType::String,
       "which tasks a stored artifact serves: url (those naming its checksum and a URL it was fetched from: "
       "knowing a checksum is not being allowed the content) or checksum (any URL with its checksum, a mirror "
       "too: for a fleet whose Job authors may all have every artifact) (url)",
       [&c](const std::string& v) -> daemon::ApplyResult {
         if (v != "url" && v != "checksum") return "must be url or checksum, got '" + v + "'";
         c.artifact_store_match = v;
         return std::nullopt;
       }},
      {"max-queued-reports", daemon::ValueType::Count, "status reports held on disk while the broker is unreachable",
       [&c](const std::string& v) { return daemon::parse_positive_size(v, c.max_queued_reports); }},
      {"finished-task-retention", daemon::ValueType::Duration,
       "how long a finished task is remembered, so the same uid dispatched again is answered with its final "
       "report instead of running again (24h; counts time the agent runs)",
       [&c](const std::string& v) { return daemon::parse_positive_duration(v, c.finished_task_retention); }},
      {"max-finished-tasks", daemon::ValueType::Count,
       "finished tasks remembered at most (about 1 KB of memory each); beyond, the oldest go early",
       [&c](const std::string& v) { return daemon::parse_positive_size(v, c.max_finished_tasks); }},
      {"task-user", daemon::ValueType::String,
       "the user a task without spec.user runs as (default: the agent's own user)",
       [&c](const std::string& v) -> ApplyResult {
         if (v.empty()) {
           c.task_user.clear();
           return std::nullopt;
         }
         if (!getpwnam(v.c_str())) return "no user '" + v + "' on this machine";
         c.task_user = v;
         return std::nullopt;
       }},
      {"allow-root-tasks", daemon::ValueType::Bool, "whether a task may run as root (default true)",
       [&c](const std::string& v) { return daemon::parse_bool(v, c.allow_root_tasks); }},
      {"task-cgroups", daemon::ValueType::Choice,
       "auto, on or off: each task in a cgroup v2 of its own, so nothing it starts escapes it (auto: where the "
       "agent can make cgroups; on: refuse to start without)",
       [&c](const std::string& v) -> ApplyResult {
         if (v != "auto" && v != "on" && v != "off") return "must be auto, on or off, got '" + v + "'";
         c.task_cgroups = v;
         return std::nullopt;
       }},
      {"cgroup-parent", daemon::ValueType::Path,
       "the cgroup v2 directory task cgroups are made in (default: k8s4r-tasks.<hash of the work dir> in the "
       "agent's own cgroup)",
       [&c](const std::string& v) -> ApplyResult {
         if (!v.empty() && v.front() != '/') return "must be an absolute path, got '" + v + "'";
         c.cgroup_parent = v;
         return std::nullopt;
       }},
      {"task-shim", daemon::ValueType::Path,
       "the k8s4r-task-shim binary each task runs under (default: next to k8s4r-agent)",
       [&c](const std::string& v) -> ApplyResult {
         if (v.empty()) {
           c.task_shim.clear();
           return std::nullopt;
         }
         if (v.front() != '/') return "must be an absolute path, got '" + v + "'";
         if (access(v.c_str(), X_OK) != 0) return "'" + v + "' is not an executable file";
         c.task_shim = v;
         return std::nullopt;
       }},
      {"log-level", daemon::ValueType::Level, "trace, debug, info, warn or error",
       [&c](const std::string& v) { return daemon::parse_log_level(v, c.log_level); }},
  };
}

}  // namespace

AgentConfigOutcome parse_agent_config(const std::vector<std::string>& args,
                                      const std::function<std::string(const std::string&)>& env,
                                      const std::string& default_config_file) {
  AgentConfig config;
  const daemon::Program program{"k8s4r-agent", "k8s4r-agent: runs k8s4r tasks on this robot.", K8S4R_VERSION,
                                default_config_file};
  const auto outcome =
      daemon::load_settings(program, settings(config), args, env, [&](std::vector<std::string>& errors) {
        if (config.broker_url.empty())
          errors.push_back("broker-url is required (--broker-url, K8S4R_BROKER_URL or the config file)");
        const mqtt::TlsFiles tls{config.ca_file, config.cert_file, config.key_file};
        for (std::string& error : mqtt::tls_setting_errors(config.broker_url, tls)) errors.push_back(std::move(error));
        for (std::string& error : mqtt::tls_file_errors(tls)) errors.push_back(std::move(error));
        if (config.robot_id.empty())
          errors.push_back("robot-id is required (--robot-id, K8S4R_ROBOT_ID or the config file)");
      });
  if (!outcome.run) return {std::nullopt, outcome.output, outcome.exit_code};
  config.config_file = outcome.config_file;
  return {config, "", 0};
}

}  // namespace k8s4r::agent
