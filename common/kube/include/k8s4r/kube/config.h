// Where a Kubernetes client finds its server and credentials, as client-go
// does: explicit flags, then a kubeconfig (--kubeconfig or $KUBECONFIG, its
// current context), then in-cluster (the service account under
// /var/run/secrets/kubernetes.io/serviceaccount and KUBERNETES_SERVICE_HOST/PORT),
// then ~/.kube/config. Flags override what the kubeconfig says field by field.
//
// Thread-safety: pure functions over their inputs (and the files they name).
#pragma once

#include "k8s4r/common/result.h"

#include <chrono>
#include <string>

namespace k8s4r::kube {

struct ClientConfig {
  std::string server;  // https://host:port
  std::string token;   // bearer token, as read at start
  // Where the token came from (kubeconfig tokenFile, in-cluster): the
  // transport re-reads it as it rotates (BearerToken). Empty: a fixed token.
  std::string token_file;
  std::string ca_pem;  // trusted CA certificates (PEM); empty: the system's
  std::string client_certificate_pem, client_key_pem;
  bool insecure_skip_tls_verify = false;
  std::string namespace_ = "default";  // the context's namespace
  std::string source;                  // where this came from, for logs

  // Behaviour, not location: set by the daemon's own config.
  double qps = 0;  // client-side rate limit; 0 = off (the default)
  int burst = 0;
  int max_attempts = 5;  // per request, for 429, 5xx and connection errors
  std::chrono::milliseconds request_timeout{30'000};
};

// Everything the loader looks at, so tests can point it anywhere.
struct ConfigSources {
  // Explicit flags: --kube-server, --kube-token, --kube-ca.
  std::string server, token, ca_file;
  std::string kubeconfig_flag;             // --kubeconfig
  std::string kubeconfig_env;              // $KUBECONFIG (':'-separated, first file that exists and parses is used)
  std::string home;                        // $HOME, for ~/.kube/config
  std::string service_host, service_port;  // $KUBERNETES_SERVICE_HOST, $KUBERNETES_SERVICE_PORT
  std::string service_account_dir = "/var/run/secrets/kubernetes.io/serviceaccount";
};

// Reads the environment variables named above.
ConfigSources sources_from_environment();

Result<ClientConfig> load_client_config(const ConfigSources& sources);
// A daemon's configuration: the environment's sources, with its
// --kubeconfig (when not empty) first.
Result<ClientConfig> load_client_config(const std::string& kubeconfig_flag);

// A kubeconfig file's current context.
Result<ClientConfig> load_kubeconfig(const std::string& path);

}  // namespace k8s4r::kube
