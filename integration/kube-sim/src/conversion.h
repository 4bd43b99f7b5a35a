// Converting an object between the API versions that share its storage, as
// kube-apiserver does through its internal version: custom resources only
// change apiVersion; core/v1 and events.k8s.io/v1 Events map their fields.
// Private to kube_sim.
#pragma once

#include "k8s4r/kube_sim/resource_type.h"

#include <nlohmann/json.hpp>

namespace k8s4r::kube_sim {

// `object` (in any version of its resource) as `to` serves it.
nlohmann::json convert(const nlohmann::json& object, const ResourceType& to);

}  // namespace k8s4r::kube_sim
