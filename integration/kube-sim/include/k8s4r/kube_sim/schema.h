// OpenAPI v3 schemas as CustomResourceDefinitions use them: the structural
// check a CRD must pass, and for a custom resource the steps kube-apiserver
// applies in order: drop nulls where not nullable, prune unknown fields,
// apply defaults, validate.
//
// Supported keywords: type, properties, items, additionalProperties,
// required, enum, nullable, minimum, maximum, exclusiveMinimum/Maximum,
// minLength, maxLength, pattern (ECMAScript), minItems, maxItems, format
// (date-time, int32, int64), default, anyOf/allOf/oneOf (validated, not used
// for pruning), x-kubernetes-int-or-string, x-kubernetes-preserve-unknown-fields,
// x-kubernetes-embedded-resource. Not supported: x-kubernetes-validations
// (CEL rules are ignored), not, uniqueItems.
//
// Thread-safety: pure functions.
#pragma once

#include "k8s4r/kube_sim/api_status.h"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace k8s4r::kube_sim {

// Why `schema` is not structural (every node has a type unless it is
// int-or-string or keeps unknown fields); empty when it is.
std::vector<std::string> structural_errors(const nlohmann::json& schema, const std::string& path);

// Drops null values of fields that are not nullable, removes fields the schema
// does not declare (recording their paths in `pruned`), and fills in defaults.
// For the root of a custom resource, apiVersion, kind and metadata are kept.
void normalize(const nlohmann::json& schema, nlohmann::json& value, const std::string& path,
               std::vector<std::string>& pruned, bool is_root);

// Appends one FieldCause per violation, with the messages kube-apiserver writes.
void validate(const nlohmann::json& schema, const nlohmann::json& value, const std::string& path,
              std::vector<FieldCause>& errors);

}  // namespace k8s4r::kube_sim
