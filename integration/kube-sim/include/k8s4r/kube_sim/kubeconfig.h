// Writes a kubeconfig (one cluster, user and context, all named
// "k8s4r-kube-sim") that kubectl, client-go and the Python client read.
#pragma once

#include "k8s4r/common/result.h"

#include <string>

namespace k8s4r::kube_sim {

struct KubeconfigContent {
  std::string server_url;             // http(s)://host:port
  std::string certificate_authority;  // PEM to trust for https (embedded as certificate-authority-data)
  std::string token;                  // bearer token, if any
  std::string namespace_ = "default";
};

// Writes atomically (a temporary file renamed into place), mode 0600.
Result<void> write_kubeconfig(const std::string& path, const KubeconfigContent& content);

}  // namespace k8s4r::kube_sim
