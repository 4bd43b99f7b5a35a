// How Go prints values in the error messages kube-apiserver sends, for the
// stand-in to word its own the same way. Private to kube_sim.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace k8s4r::kube_sim {

// Go's %q of a string: double quotes, with quotes, backslashes and control
// characters escaped.
std::string go_quote(const std::string& text);

// The JSON type name encoding/json uses in "cannot unmarshal X": array,
// object, string, bool or number.
std::string json_kind(const nlohmann::json& value);

// "json: cannot unmarshal <kind of value> into Go struct field <field> of type <go_type>"
std::string unmarshal_error(const nlohmann::json& value, const std::string& field, const std::string& go_type);

}  // namespace k8s4r::kube_sim
