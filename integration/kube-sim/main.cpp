// k8s4r-kube-sim: a Kubernetes API server stand-in for tests and the demo.
// See docs/kube-sim.md for what it implements and what it does not.
#include "k8s4r/kube_sim/kubeconfig.h"
#include "k8s4r/kube_sim/server.h"
#include "k8s4r/kube_sim/store.h"

#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>
#include <map>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include <sys/resource.h>

namespace {

volatile std::sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

}  // namespace

int main(int argc, char** argv) {
  using namespace k8s4r::kube_sim;
  CLI::App app{"k8s4r-kube-sim: an in-memory Kubernetes API server stand-in for tests and demos", "k8s4r-kube-sim"};
  app.set_version_flag("--version", std::string("k8s4r-kube-sim ") + K8S4R_VERSION);
  std::string listen = "127.0.0.1:0";
  std::string kubeconfig_path, tls_ca;
  std::size_t history = 100;
  double bookmark_seconds = 10;
  long long latency_ms = 0;
  ServerOptions options;
  app.add_option("--listen", listen, "HOST:PORT to listen on; port 0 picks a free one")->capture_default_str();
  app.add_option("--write-kubeconfig", kubeconfig_path, "write a kubeconfig for this server to FILE");
  app.add_option("--token", options.token, "require this bearer token on API requests");
  app.add_option("--tls-cert", options.tls_cert_file, "serve HTTPS with this PEM certificate")
      ->check(CLI::ExistingFile);
  app.add_option("--tls-key", options.tls_key_file, "PEM private key of --tls-cert")->check(CLI::ExistingFile);
  app.add_option("--tls-ca", tls_ca, "PEM CA to put in the kubeconfig (default: the certificate itself)")
      ->check(CLI::ExistingFile);
  app.add_option("--history", history, "watch window: events kept per resource")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--bookmark-interval", bookmark_seconds, "seconds between BOOKMARK events on idle watches")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--threads", options.threads, "threads serving connections (watches and idle connections hold none)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  app.add_option("--latency-ms", latency_ms, "fault: delay every API request by this many milliseconds");
  app.add_option("--error-rate", options.faults.error_rate, "fault: share of API requests answered with --error-code")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--error-code", options.faults.error_code, "fault: 500 or 429")->check(CLI::IsMember({500, 429}));
  app.add_option("--retry-after", options.faults.retry_after_seconds, "fault: Retry-After seconds sent with 429");
  app.add_flag("--log-requests", options.log_requests, "log every request");
  std::string anonymous;
  app.add_option("--token-auth-file", options.token_auth_file,
                 "CSV of static tokens: token,user,uid,\"group1,group2\" (as kube-apiserver's)")
      ->check(CLI::ExistingFile);
  app.add_option("--client-ca-file", options.client_ca_file,
                 "with --tls-cert: client certificates signed by this CA authenticate (CN user, O groups)")
      ->check(CLI::ExistingFile);
  app.add_option("--anonymous-auth", anonymous,
                 "true|false: requests without credentials (default: allowed when no credentials are configured, "
                 "else only /version, /healthz, /livez, /readyz)")
      ->check(CLI::IsMember({"true", "false"}));
  app.add_option("--authorization-mode", options.authorization_mode, "AlwaysAllow or RBAC")
      ->capture_default_str()
      ->check(CLI::IsMember({"AlwaysAllow", "RBAC"}));
  app.add_option("--service-account-issuer", options.service_account_issuer,
                 "iss of the ServiceAccount tokens TokenRequest issues")
      ->capture_default_str();
  app.add_option("--api-audiences", options.api_audiences, "audiences tokens must carry (default: the issuer)")
      ->delimiter(',');
  // --help names each value's type, as the daemons' does.
  const std::map<std::string, std::string> types = {{"--listen", "host:port"},
                                                    {"--write-kubeconfig", "path"},
                                                    {"--token", "string"},
                                                    {"--tls-cert", "path"},
                                                    {"--tls-key", "path"},
                                                    {"--tls-ca", "path"},
                                                    {"--history", "count"},
                                                    {"--bookmark-interval", "seconds"},
                                                    {"--threads", "count"},
                                                    {"--latency-ms", "milliseconds"},
                                                    {"--error-rate", "0..1"},
                                                    {"--error-code", "500|429"},
                                                    {"--retry-after", "seconds"},
                                                    {"--token-auth-file", "path"},
                                                    {"--client-ca-file", "path"},
                                                    {"--anonymous-auth", "bool"},
                                                    {"--authorization-mode", "AlwaysAllow|RBAC"},
                                                    {"--service-account-issuer", "url"},
                                                    {"--api-audiences", "a,b,..."}};
  for (const auto& [flag, type] : types) app.get_option(flag)->type_name(type);
  CLI11_PARSE(app, argc, argv);
  if (!anonymous.empty()) options.anonymous_auth = anonymous == "true";
  if (!options.client_ca_file.empty() && options.tls_cert_file.empty()) {
    spdlog::error("--client-ca-file needs --tls-cert and --tls-key");
    return 2;
  }

  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    spdlog::error("--tls-cert and --tls-key go together");
    return 2;
  }
  const auto colon = listen.rfind(':');
  if (colon == std::string::npos) {
    spdlog::error("--listen must be HOST:PORT, got '{}'", listen);
    return 2;
  }
  options.host = listen.substr(0, colon);
  try {
    options.port = std::stoi(listen.substr(colon + 1));
  } catch (...) {
    spdlog::error("--listen must be HOST:PORT, got '{}'", listen);
    return 2;
  }
  options.faults.latency = std::chrono::milliseconds(latency_ms);
  options.bookmark_interval = std::chrono::milliseconds(static_cast<long long>(bookmark_seconds * 1000));

  StoreOptions store_options;
  store_options.history_per_resource = history;
  // A server holding thousands of watches needs as many descriptors: take
  // the hard limit, as Go's runtime does for kube-apiserver.
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
  }
  Store store(store_options,
              [] { return std::chrono::time_point_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now()); });
  std::unique_ptr<Server> server_holder;
  try {
    server_holder = std::make_unique<Server>(store, options);
  } catch (const std::exception& error) {
    spdlog::error("{}", error.what());
    return 2;
  }
  Server& server = *server_holder;
  if (!server.start()) return 1;

  if (!kubeconfig_path.empty()) {
    KubeconfigContent content;
    content.server_url = server.url();
    content.token = options.token;
    const std::string ca_file = !tls_ca.empty() ? tls_ca : options.tls_cert_file;
    if (!ca_file.empty()) {
      std::ifstream in(ca_file);
      std::stringstream pem;
      pem << in.rdbuf();
      content.certificate_authority = pem.str();
    }
    if (auto written = write_kubeconfig(kubeconfig_path, content); !written) {
      spdlog::error("{}", written.error().to_string());
      return 1;
    }
  }
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  spdlog::info("k8s4r-kube-sim serving {}", server.url());
  while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  spdlog::info("stopping");
  server.stop();  // ends every watch and connection at once: nothing waits on an idle client
  return 0;
}
