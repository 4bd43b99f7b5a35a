// Runs the real k8s4r-kube-sim binary for C++ tests and benchmarks: on a free
// loopback port, with its kubeconfig in a private directory, stopped (SIGTERM,
// then waited for) and cleaned up when the object goes.
#pragma once

#include "k8s4r/crd/resources.h"
#include "k8s4r/kube/client.h"
#include "k8s4r/kube/config.h"

#include <yaml-cpp/yaml.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include <sys/types.h>

namespace k8s4r::testing {

class KubeSimProcess {
 public:
  // Throws std::runtime_error when the server does not come up within 10 s.
  KubeSimProcess(const std::string& binary, std::vector<std::string> args = {});
  ~KubeSimProcess();
  KubeSimProcess(const KubeSimProcess&) = delete;
  KubeSimProcess& operator=(const KubeSimProcess&) = delete;

  const kube::ClientConfig& config() const { return config_; }
  const std::filesystem::path& directory() const { return directory_; }
  int port() const;

  // Creates every CRD in `crd_dir` (YAML files) through `client`.
  kube::ApiResult<void> apply_crds(kube::Client& client, const std::string& crd_dir) const;
  // POST /_sim/<what> (the stand-in's fault injection); false on failure.
  bool admin(const std::string& what, const nlohmann::json& body = nlohmann::json::object()) const;
  // GET /_sim/stats: resourceVersion, open watches, objects per resource.
  nlohmann::json stats() const;
  // Waits up to 10 s until at least `count` watches are open; false if not.
  bool wait_for_watches(std::size_t count) const;

 private:
  void stop();

  std::filesystem::path directory_;
  pid_t pid_ = -1;
  kube::ClientConfig config_;
};

// YAML to JSON with the types YAML's core schema gives plain scalars.
nlohmann::json yaml_to_json(const YAML::Node& node);

// A minimal valid Task named `name` in robot.k8s4r.io/v1alpha1.
nlohmann::json task_json(const std::string& name);

}  // namespace k8s4r::testing
