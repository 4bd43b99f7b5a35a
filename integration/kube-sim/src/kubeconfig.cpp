#include "k8s4r/kube_sim/kubeconfig.h"

#include "k8s4r/common/base64.h"

#include <yaml-cpp/yaml.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <system_error>

namespace k8s4r::kube_sim {

Result<void> write_kubeconfig(const std::string& path, const KubeconfigContent& content) {
  const std::string name = "k8s4r-kube-sim";
  YAML::Emitter out;
  out << YAML::BeginMap;
  out << YAML::Key << "apiVersion" << YAML::Value << "v1";
  out << YAML::Key << "kind" << YAML::Value << "Config";
  out << YAML::Key << "clusters" << YAML::Value << YAML::BeginSeq << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << name;
  out << YAML::Key << "cluster" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "server" << YAML::Value << content.server_url;
  if (!content.certificate_authority.empty()) {
    out << YAML::Key << "certificate-authority-data" << YAML::Value << base64_encode(content.certificate_authority);
  }
  out << YAML::EndMap << YAML::EndMap << YAML::EndSeq;
  out << YAML::Key << "users" << YAML::Value << YAML::BeginSeq << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << name;
  out << YAML::Key << "user" << YAML::Value << YAML::BeginMap;
  if (!content.token.empty()) out << YAML::Key << "token" << YAML::Value << content.token;
  out << YAML::EndMap << YAML::EndMap << YAML::EndSeq;
  out << YAML::Key << "contexts" << YAML::Value << YAML::BeginSeq << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << name;
  out << YAML::Key << "context" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "cluster" << YAML::Value << name;
  out << YAML::Key << "user" << YAML::Value << name;
  out << YAML::Key << "namespace" << YAML::Value << content.namespace_;
  out << YAML::EndMap << YAML::EndMap << YAML::EndSeq;
  out << YAML::Key << "current-context" << YAML::Value << name;
  out << YAML::EndMap;

  const std::string temporary = path + ".tmp";
  {
    std::ofstream file(temporary, std::ios::trunc);
    if (!file) return Error{"kubeconfig", "cannot write " + temporary};
    file << out.c_str() << "\n";
    if (!file) return Error{"kubeconfig", "cannot write " + temporary};
  }
  std::error_code error;
  std::filesystem::permissions(temporary, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write,
                               std::filesystem::perm_options::replace, error);
  std::filesystem::rename(temporary, path, error);
  if (error) return Error{"kubeconfig", "cannot move " + temporary + " to " + path + ": " + error.message()};
  return ok();
}

}  // namespace k8s4r::kube_sim
