// Just enough of Kubernetes' protobuf encoding to read what kubectl's typed
// generators send for built-in kinds (`kubectl create namespace`), which
// client-go encodes as application/vnd.kubernetes.protobuf. Private to
// kube_sim; everything else is JSON.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string_view>

namespace k8s4r::kube_sim {

// A Namespace (metadata: name, generateName, labels, annotations,
// finalizers) from "k8s\0" + runtime.Unknown; nullopt for anything else.
std::optional<nlohmann::json> decode_protobuf_namespace(std::string_view body);

}  // namespace k8s4r::kube_sim
