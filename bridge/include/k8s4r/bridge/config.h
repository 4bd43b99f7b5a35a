// The bridge's configuration: one struct, read by the loader every daemon
// shares (k8s4r/daemon/config_loader.h): defaults, then the config file
// (--config or K8S4R_CONFIG, default /etc/k8s4r/bridge.yaml when it exists),
// then K8S4R_* variables, then flags; every error reported together.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace k8s4r::bridge {

struct BridgeConfig {
  std::string broker_url;                  // broker-url (required)
  std::string client_id = "k8s4r-bridge";  // client-id: the bridge's MQTT client id (its persistent session)
  std::string username;                    // mqtt-username
  std::string password;                    // read from mqtt-password-file: never a flag value in the process list
  std::string ca_file;                     // ca-file: for ssl:// brokers
  std::string cert_file, key_file;         // cert-file, key-file: client certificate (mutual TLS)
  std::string kubeconfig;                  // kubeconfig: empty: $KUBECONFIG, in-cluster, ~/.kube/config
  std::string namespace_;                  // namespace: of Robots and Tasks; empty: the kubeconfig's
  std::string metrics_bind_address = "127.0.0.1:9090";  // metrics-bind-address: /metrics, /healthz, /readyz
  std::chrono::nanoseconds heartbeat_write_interval = std::chrono::seconds(60);  // heartbeat-write-interval
  std::chrono::nanoseconds dispatch_resend_after = std::chrono::seconds(30);     // dispatch-resend-after
  // heartbeat-ack-interval: a robot's heartbeats are acknowledged at most this
  // often (its contact with the bridge; every one at the agent's default 30s).
  std::chrono::nanoseconds heartbeat_ack_interval = std::chrono::seconds(5);
  // legacy-topics: also take Go K8s4r agents' register and heartbeat on the
  // shared k8s4r/register and k8s4r/heartbeat, where the robot is named only
  // in the payload and any client can name any robot. Off by default; on
  // only for a fleet with Go agents left (docs/security.md).
  bool legacy_topics = false;
  // dynamic-security: make each robot Secret the robot's login in Mosquitto's
  // dynamic-security plugin, confined to its own topics, and remove it (the
  // robot disconnected at once) when the Secret goes or the Robot is
  // Rejected (docs/security.md). Needs mqtt-username and reading Secrets.
  bool dynamic_security = false;
  // login-plugin: feed each robot Secret's token digest to the broker's
  // k8s4r-auth plugin (broker-plugin/, docs/security.md "Robot logins at
  // fleet scale"), for fleets too large for dynamic-security. Needs
  // mqtt-username (one of the plugin's bridge users) and reading Secrets.
  bool login_plugin = false;
  // replica-id: this bridge's identity among replicas sharing the fleet
  // (docs/bridge.md#replicas). Empty: one bridge serves every robot, with no
  // Lease or slot table. Set: it serves only the slots the table
  // k8s4r-bridge-slots gives it, its MQTT client id is client-id + "-" +
  // replica-id, and each dispatch carries its slot's epoch.
  std::string replica_id;
  std::chrono::nanoseconds replica_lease_duration = std::chrono::seconds(15);  // replica-lease-duration
  std::chrono::nanoseconds replica_renew_deadline = std::chrono::seconds(10);  // replica-renew-deadline
  std::chrono::nanoseconds replica_retry_period = std::chrono::seconds(2);     // replica-retry-period
  // replica-own-subscriptions: a replica subscribes to its own robots'
  // heartbeats and reports only (two filters per robot), so the broker sends
  // each to one replica (docs/bridge.md#replicas). Off: every replica
  // subscribes to every robot's topics and drops what is not its own.
  bool replica_own_subscriptions = true;
  std::size_t kube_writers = 4;  // kube-writers: threads writing to the API server
  // max-unapproved-robots: no Robot is created for a new robot while this
  // many wait for approval (Pending or Rejected); new-robots-per-second: at
  // most this many created a second. What bounds a flood of made-up robots
  // from a client that can reach the broker (docs/security.md).
  std::size_t max_unapproved_robots = 1000;
  std::size_t new_robots_per_second = 100;
  // logs-bind-address: where kubectl k8s4r logs reads tasks' logs
  // (logs_endpoint.h); empty: nowhere. HTTPS with logs-tls-cert-file and
  // logs-tls-key-file; plain HTTP only on a loopback address.
  std::string logs_bind_address;
  std::string logs_cert_file, logs_key_file;
  std::size_t logs_max_followers = 64;  // logs-max-followers
  std::string log_level = "info";
  std::string config_file;

  // The MQTT client id it connects with: client-id, and -replica-id when set.
  std::string mqtt_client_id() const { return replica_id.empty() ? client_id : client_id + "-" + replica_id; }
  // Where robots answer its log requests (a topic level, ...logs/chunks/{this}):
  // the MQTT client id when it is a DNS label, else "bridge-" and its FNV-1a hash.
  std::string log_reply_to() const;
};

struct BridgeConfigOutcome {
  std::optional<BridgeConfig> config;
  std::string output;
  int exit_code = 0;
};

BridgeConfigOutcome parse_bridge_config(const std::vector<std::string>& args,
                                        const std::function<std::string(const std::string&)>& env,
                                        const std::string& default_config_file = "/etc/k8s4r/bridge.yaml");

}  // namespace k8s4r::bridge
