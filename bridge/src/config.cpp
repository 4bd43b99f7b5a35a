#include "k8s4r/bridge/config.h"

#include "k8s4r/bridge/slot_table.h"
#include "k8s4r/kube/leader_election.h"

#include "k8s4r/common/hashing.h"
#include "k8s4r/common/identifiers.h"
#include "k8s4r/daemon/config_loader.h"
#include "k8s4r/mqtt/connect_options.h"

namespace k8s4r::bridge {

#ifndef K8S4R_VERSION
#define K8S4R_VERSION "0.0.0"
#endif

namespace {

using daemon::ApplyResult;

std::vector<daemon::Setting> settings(BridgeConfig& c) {
  const auto text = [](std::string& target) {
    return [&target](const std::string& v) -> ApplyResult {
      target = v;
      return std::nullopt;
    };
  };
  return {
      {"broker-url", daemon::ValueType::Url, "MQTT broker, tcp://HOST:PORT or ssl://HOST:PORT",
       [&c](const std::string& v) { return daemon::parse_broker_url(v, c.broker_url); }},
      {"client-id", daemon::ValueType::String,
       "the bridge's MQTT client id, which names its persistent session (k8s4r-bridge)",
       [&c](const std::string& v) -> ApplyResult {
         if (v.empty() || v.size() > 128 || v.find_first_of("+#/") != std::string::npos)
           return "must be 1 to 128 characters without '+', '#' or '/', got '" + v + "'";
         c.client_id = v;
         return std::nullopt;
       }},
      {"mqtt-username", daemon::ValueType::String, "MQTT user name", text(c.username)},
      {"mqtt-password-file", daemon::ValueType::Path, "file holding the MQTT password (kept out of the process list)",
       [&c](const std::string& v) { return daemon::parse_secret_file(v, c.password); }},
      {"ca-file", daemon::ValueType::Path, "PEM CA bundle to verify an ssl:// broker (default: the system's)",
       [&c](const std::string& v) { return daemon::parse_existing_file(v, c.ca_file); }},
      {"cert-file", daemon::ValueType::Path,
       "PEM client certificate for a broker that asks for one (mutual TLS; with key-file)",
       [&c](const std::string& v) { return daemon::parse_existing_file(v, c.cert_file); }},
      {"key-file", daemon::ValueType::Path, "PEM private key of cert-file",
       [&c](const std::string& v) { return daemon::parse_existing_file(v, c.key_file); }},
      {"kubeconfig", daemon::ValueType::Path,
       "kubeconfig file (default: $KUBECONFIG, then in-cluster, then ~/.kube/config)",
       [&c](const std::string& v) { return daemon::parse_existing_file(v, c.kubeconfig); }},
      {"namespace", daemon::ValueType::String, "namespace of the Robots and Tasks (default: the kubeconfig context's)",
       [&c](const std::string& v) -> ApplyResult {
         if (auto checked = validate_identifier(v); !checked) return checked.error().message;
         c.namespace_ = v;
         return std::nullopt;
       }},
      {"metrics-bind-address", daemon::ValueType::HostPort,
       "host:port for /metrics, /healthz and /readyz (127.0.0.1:9090; port 0: any)",
       [&c](const std::string& v) { return daemon::parse_bind_address(v, c.metrics_bind_address); }},
      {"heartbeat-write-interval", daemon::ValueType::Duration,
       "at most one heartbeat write per robot this often (60s)",
       [&c](const std::string& v) { return daemon::parse_positive_duration(v, c.heartbeat_write_interval); }},
      {"dispatch-resend-after", daemon::ValueType::Duration,
       "publish a Task again when still dispatching this long after (30s)",
       [&c](const std::string& v) { return daemon::parse_positive_duration(v, c.dispatch_resend_after); }},
      {"heartbeat-ack-interval", daemon::ValueType::Duration,
       "acknowledge a robot's heartbeats at most this often (5s); keep it well below the tasks' "
       "disconnect.stopOnRobotAfter",
       [&c](const std::string& v) { return daemon::parse_positive_duration(v, c.heartbeat_ack_interval); }},
      {"legacy-topics", daemon::ValueType::Bool,
       "also take register and heartbeat on Go K8s4r's shared topics, where any client can name any robot; on only "
       "for a fleet with Go K8s4r agents (false)",
       [&c](const std::string& v) { return daemon::parse_bool(v, c.legacy_topics); }},
      {"dynamic-security", daemon::ValueType::Bool,
       "manage each robot's broker login from its Secret k8s4r-robot-<id> through Mosquitto's "
       "dynamic-security plugin (false)",
       [&c](const std::string& v) { return daemon::parse_bool(v, c.dynamic_security); }},
      {"login-plugin", daemon::ValueType::Bool,
       "send each robot's login (its Secret's token digest) to the broker's k8s4r-auth plugin, for fleets of "
       "100,000 robots (false)",
       [&c](const std::string& v) { return daemon::parse_bool(v, c.login_plugin); }},
      {"replica-id", daemon::ValueType::String,
       "this bridge's identity among replicas that share the fleet, e.g. the pod name of a StatefulSet (none: one "
       "bridge serves every robot)",
       [&c](const std::string& v) -> ApplyResult {
         if (auto checked = validate_replica_id(v); !checked) return checked.error().message + ", got '" + v + "'";
         c.replica_id = v;
         return std::nullopt;
       }},
      {"replica-lease-duration", daemon::ValueType::Duration,
       "a replica whose Lease is not renewed this long is gone, and its robots taken over (15s)",
       [&c](const std::string& v) { return daemon::parse_positive_duration(v, c.replica_lease_duration); }},
      {"replica-renew-deadline", daemon::ValueType::Duration,
       "a replica that cannot renew its Lease this long stops serving and exits (10s)",
       [&c](const std::string& v) { return daemon::parse_positive_duration(v, c.replica_renew_deadline); }},
      {"replica-retry-period", daemon::ValueType::Duration,
       "how often a replica renews its Lease; it reads the slot table four times as often (2s)",
       [&c](const std::string& v) { return daemon::parse_positive_duration(v, c.replica_retry_period); }},
      {"replica-own-subscriptions", daemon::ValueType::Bool,
       "a replica subscribes to its own robots' heartbeats and reports only, so the broker sends them to their "
       "owner alone (true; false: every replica receives the whole fleet's messages and drops what another "
       "serves)",
       [&c](const std::string& v) { return daemon::parse_bool(v, c.replica_own_subscriptions); }},
      {"kube-writers", daemon::ValueType::Count, "threads writing to the Kubernetes API (4)",
       [&c](const std::string& v) -> ApplyResult {
         std::size_t writers = 0;
         if (auto problem = daemon::parse_positive_size(v, writers)) return problem;
         if (writers > 64) return "must be at most 64, got " + v;
         c.kube_writers = writers;
         return std::nullopt;
       }},
      {"max-unapproved-robots", daemon::ValueType::Count,
       "create no Robot for a new robot while this many wait for approval, Pending or Rejected (1000)",
       [&c](const std::string& v) { return daemon::parse_positive_size(v, c.max_unapproved_robots); }},
      {"new-robots-per-second", daemon::ValueType::Count,
       "create at most this many Robots a second for robots that register for the first time (100)",
       [&c](const std::string& v) { return daemon::parse_positive_size(v, c.new_robots_per_second); }},
      {"logs-bind-address", daemon::ValueType::HostPort,
       "host:port serving tasks' logs to kubectl k8s4r logs (docs/logs.md); empty (the default): not served",
       [&c](const std::string& v) -> ApplyResult {
         if (v.empty()) {
           c.logs_bind_address.clear();
           return std::nullopt;
         }
         return daemon::parse_bind_address(v, c.logs_bind_address);
       }},
      {"logs-tls-cert-file", daemon::ValueType::Path,
       "PEM certificate of the logs endpoint (HTTPS; with logs-tls-key-file)",
       [&c](const std::string& v) { return daemon::parse_existing_file(v, c.logs_cert_file); }},
      {"logs-tls-key-file", daemon::ValueType::Path, "PEM private key of logs-tls-cert-file",
       [&c](const std::string& v) { return daemon::parse_existing_file(v, c.logs_key_file); }},
      {"logs-max-followers", daemon::ValueType::Count, "logs streamed at once at most; more are refused (64)",
       [&c](const std::string& v) -> ApplyResult {
         if (auto failed = daemon::parse_positive_size(v, c.logs_max_followers)) return failed;
         if (c.logs_max_followers > 4096) return "must be at most 4096, got " + v;
         return std::nullopt;
       }},
      {"log-level", daemon::ValueType::Level, "trace, debug, info, warn or error",
       [&c](const std::string& v) { return daemon::parse_log_level(v, c.log_level); }},
  };
}

}  // namespace

std::string BridgeConfig::log_reply_to() const {
  const std::string id = mqtt_client_id();
  if (validate_identifier(id)) return id;
  return "bridge-" + Fnv1a64().update(id).hex();
}

BridgeConfigOutcome parse_bridge_config(const std::vector<std::string>& args,
                                        const std::function<std::string(const std::string&)>& env,
                                        const std::string& default_config_file) {
  BridgeConfig config;
  const daemon::Program program{"k8s4r-bridge",
                                "k8s4r-bridge: turns robots' MQTT messages into Robot and Task writes, and "
                                "dispatches Tasks to robots.",
                                K8S4R_VERSION, default_config_file};
  const auto outcome =
      daemon::load_settings(program, settings(config), args, env, [&](std::vector<std::string>& errors) {
        if (config.broker_url.empty())
          errors.push_back("broker-url is required (--broker-url, K8S4R_BROKER_URL or the config file)");
        if (config.dynamic_security && config.username.empty())
          errors.push_back(
              "dynamic-security needs mqtt-username: the bridge's own broker user, which no robot may take");
        if (config.dynamic_security && !config.replica_id.empty())
          errors.push_back(
              "dynamic-security is for one bridge: replicas (replica-id) cannot share the broker's logins yet");
        if (config.login_plugin && config.username.empty())
          errors.push_back(
              "login-plugin needs mqtt-username: one of the plugin's bridge users (plugin_opt_bridge_users)");
        if (config.login_plugin && config.dynamic_security)
          errors.push_back("login-plugin and dynamic-security both manage robots' broker logins: choose one");
        // A replica stops serving before another may take its robots over.
        if (!config.replica_id.empty()) {
          for (std::string& error :
               kube::lease_timing_errors("replica-", config.replica_lease_duration, config.replica_renew_deadline,
                                         config.replica_retry_period))
            errors.push_back(std::move(error));
        }
        // Callers send their Kubernetes tokens: over HTTPS, unless they never leave the machine.
        if (config.logs_cert_file.empty() != config.logs_key_file.empty())
          errors.push_back("logs-tls-cert-file and logs-tls-key-file go together");
        if (!config.logs_bind_address.empty() && config.logs_cert_file.empty()) {
          const std::string host = config.logs_bind_address.substr(0, config.logs_bind_address.rfind(':'));
          if (host != "127.0.0.1" && host != "localhost" && host != "[::1]")
            errors.push_back("logs-bind-address " + config.logs_bind_address +
                             " carries bearer tokens: give logs-tls-cert-file and logs-tls-key-file, or bind to "
                             "127.0.0.1");
        }
        const mqtt::TlsFiles tls{config.ca_file, config.cert_file, config.key_file};
        for (std::string& error : mqtt::tls_setting_errors(config.broker_url, tls)) errors.push_back(std::move(error));
        for (std::string& error : mqtt::tls_file_errors(tls)) errors.push_back(std::move(error));
      });
  if (!outcome.run) return {std::nullopt, outcome.output, outcome.exit_code};
  config.config_file = outcome.config_file;
  return {config, "", 0};
}

}  // namespace k8s4r::bridge
