// The JSON types of the built-in kinds' own fields, so a wrong type is the
// decode error kube-apiserver gives (400: "json: cannot unmarshal number into
// Go struct field PolicyRule.rules.verbs of type string"), never a value the
// rest of the stand-in trips over. Private to kube_sim.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace k8s4r::kube_sim {

// The decode error of `object` as the built-in `kind` of `group`; nullopt when
// every field it knows has the right type (null counts as absent; fields it
// does not know are left to the kind's validation).
std::optional<std::string> builtin_shape_error(const std::string& group, const std::string& kind,
                                               const nlohmann::json& object);

}  // namespace k8s4r::kube_sim
