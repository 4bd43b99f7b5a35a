// Just enough of Kubernetes' protobuf encoding to read what kubectl's typed
// clients send for built-in kinds: client-go 1.32 encodes create requests of
// Namespaces, Secrets, ConfigMaps, ServiceAccounts, TokenRequests, the
// review kinds and RBAC objects as application/vnd.kubernetes.protobuf
// ("k8s\0" + runtime.Unknown). The message layouts are tables of field
// numbers (from k8s.io/api's generated.proto files); answers stay JSON,
// which every client accepts.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>

namespace k8s4r::kube_sim {

struct ProtobufResult {
  std::optional<nlohmann::json> object;  // with apiVersion and kind from the envelope
  std::string error;                     // why not, when object is empty
  bool unsupported_kind = false;         // well-formed, but a kind without a table here
};

ProtobufResult decode_protobuf(std::string_view body);

}  // namespace k8s4r::kube_sim
