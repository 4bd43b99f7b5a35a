#include "k8s4r/kube/config.h"

#include "k8s4r/kube/bearer_token.h"

#include "k8s4r/common/base64.h"

#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace k8s4r::kube {

namespace fs = std::filesystem;

namespace {

Result<std::string> read_file(const fs::path& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{what, "cannot read " + path.string()};
  std::stringstream content;
  content << in.rdbuf();
  return content.str();
}

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

// A named entry of a kubeconfig list (clusters, users, contexts).
YAML::Node find_named(const YAML::Node& list, const std::string& name) {
  if (!list || !list.IsSequence()) return YAML::Node();
  for (const auto& entry : list) {
    if (entry["name"] && entry["name"].as<std::string>() == name) return entry;
  }
  return YAML::Node();
}

std::string scalar(const YAML::Node& node, const char* key) {
  return node && node[key] && node[key].IsScalar() ? node[key].as<std::string>() : "";
}

// `data` (base64, inline) wins over `file` (a path relative to the kubeconfig).
Result<std::string> data_or_file(const YAML::Node& node, const char* data_key, const char* file_key,
                                 const fs::path& base) {
  if (const std::string data = scalar(node, data_key); !data.empty()) {
    auto decoded = base64_decode(data);
    if (!decoded) return Error{data_key, "is not valid base64"};
    return *decoded;
  }
  if (const std::string file = scalar(node, file_key); !file.empty()) {
    fs::path path(file);
    if (path.is_relative()) path = base / path;
    return read_file(path, file_key);
  }
  return std::string();
}

}  // namespace

ConfigSources sources_from_environment() {
  ConfigSources sources;
  sources.kubeconfig_env = env("KUBECONFIG");
  sources.home = env("HOME");
  sources.service_host = env("KUBERNETES_SERVICE_HOST");
  sources.service_port = env("KUBERNETES_SERVICE_PORT");
  return sources;
}

Result<ClientConfig> load_kubeconfig(const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& error) {
    return Error{"kubeconfig", path + ": " + error.what()};
  }
  const std::string context_name = scalar(root, "current-context");
  if (context_name.empty()) return Error{"kubeconfig", path + ": no current-context"};
  const YAML::Node context = find_named(root["contexts"], context_name)["context"];
  if (!context) return Error{"kubeconfig", path + ": context '" + context_name + "' not found"};
  const YAML::Node cluster = find_named(root["clusters"], scalar(context, "cluster"))["cluster"];
  if (!cluster) return Error{"kubeconfig", path + ": cluster '" + scalar(context, "cluster") + "' not found"};
  const YAML::Node user = find_named(root["users"], scalar(context, "user"))["user"];
  const fs::path base = fs::path(path).parent_path();

  ClientConfig config;
  config.source = "kubeconfig " + path + " (context " + context_name + ")";
  config.server = scalar(cluster, "server");
  if (config.server.empty()) return Error{"kubeconfig", path + ": cluster has no server"};
  config.insecure_skip_tls_verify = scalar(cluster, "insecure-skip-tls-verify") == "true";
  auto ca = data_or_file(cluster, "certificate-authority-data", "certificate-authority", base);
  if (!ca) return ca.error().within("kubeconfig " + path);
  config.ca_pem = ca.value();
  if (user) {
    auto certificate = data_or_file(user, "client-certificate-data", "client-certificate", base);
    if (!certificate) return certificate.error().within("kubeconfig " + path);
    auto key = data_or_file(user, "client-key-data", "client-key", base);
    if (!key) return key.error().within("kubeconfig " + path);
    config.client_certificate_pem = certificate.value();
    config.client_key_pem = key.value();
    config.token = scalar(user, "token");
    if (config.token.empty() && !scalar(user, "tokenFile").empty()) {
      config.token_file = (base / scalar(user, "tokenFile")).string();
      auto token = read_token_file(config.token_file, "tokenFile");
      if (!token) return token.error().within("kubeconfig " + path);
      config.token = token.value();
    }
  }
  if (const std::string ns = scalar(context, "namespace"); !ns.empty()) config.namespace_ = ns;
  return config;
}

namespace {

Result<ClientConfig> in_cluster(const ConfigSources& sources) {
  if (sources.service_host.empty() || sources.service_port.empty()) {
    return Error{"in-cluster", "KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set"};
  }
  const fs::path dir = sources.service_account_dir;
  auto token = read_token_file((dir / "token").string(), "in-cluster");
  if (!token) return token.error();
  ClientConfig config;
  config.source = "in-cluster service account " + dir.string();
  const bool ipv6 = sources.service_host.find(':') != std::string::npos;
  config.server =
      "https://" + (ipv6 ? "[" + sources.service_host + "]" : sources.service_host) + ":" + sources.service_port;
  config.token = token.value();
  config.token_file = (dir / "token").string();  // projected: the kubelet rotates it
  auto ca = read_file(dir / "ca.crt", "in-cluster");
  if (!ca) return ca.error();
  config.ca_pem = ca.value();
  if (auto ns = read_file(dir / "namespace", "in-cluster"); ns && !ns.value().empty()) {
    config.namespace_ = ns.value();
    while (!config.namespace_.empty() && std::isspace(static_cast<unsigned char>(config.namespace_.back()))) {
      config.namespace_.pop_back();
    }
  }
  return config;
}

}  // namespace

Result<ClientConfig> load_client_config(const std::string& kubeconfig_flag) {
  ConfigSources sources = sources_from_environment();
  if (!kubeconfig_flag.empty()) sources.kubeconfig_flag = kubeconfig_flag;
  return load_client_config(sources);
}

Result<ClientConfig> load_client_config(const ConfigSources& sources) {
  ClientConfig config;
  std::string kubeconfig = sources.kubeconfig_flag;
  if (kubeconfig.empty()) {
    std::stringstream paths(sources.kubeconfig_env);
    for (std::string path; std::getline(paths, path, ':');) {
      if (!path.empty() && fs::exists(path)) {
        kubeconfig = path;
        break;
      }
    }
  }
  if (!kubeconfig.empty()) {
    auto loaded = load_kubeconfig(kubeconfig);
    if (!loaded) return loaded.error();
    config = loaded.value();
  } else if (sources.server.empty()) {
    auto cluster = in_cluster(sources);
    if (cluster) {
      config = cluster.value();
    } else if (const fs::path home = fs::path(sources.home) / ".kube" / "config";
               !sources.home.empty() && fs::exists(home)) {
      auto loaded = load_kubeconfig(home.string());
      if (!loaded) return loaded.error();
      config = loaded.value();
    } else {
      return Error{"kubernetes",
                   "no configuration found: give --kube-server, --kubeconfig or $KUBECONFIG, run in a cluster, or "
                   "create ~/.kube/config (" +
                       cluster.error().message + ")"};
    }
  }
  // Flags override the kubeconfig field by field, as client-go's overrides do.
  if (!sources.server.empty()) {
    config.server = sources.server;
    if (config.source.empty()) config.source = "flags";
  }
  if (!sources.token.empty()) {
    config.token = sources.token;
    config.token_file.clear();
  }
  if (!sources.ca_file.empty()) {
    auto ca = read_file(sources.ca_file, "kube-ca");
    if (!ca) return ca.error();
    config.ca_pem = ca.value();
  }
  if (config.server.rfind("http://", 0) != 0 && config.server.rfind("https://", 0) != 0) {
    return Error{"kube-server", "'" + config.server + "' must start with http:// or https://"};
  }
  return config;
}

}  // namespace k8s4r::kube
