// What kube-apiserver's registry strategies do for the built-in kinds the
// stand-in serves, with their wording: defaults the server fills (a Secret's
// stringData folded into data, a Namespace's phase and finalizer, a CRD's
// status), fields a plain update cannot change, and each kind's validation
// (Secret and ConfigMap keys and sizes, Event rules per API group, RBAC rules,
// subjects and roleRef). Pure functions: the object is in its storage form
// (core/v1 for Events) and `request` is the type the client wrote through.
#pragma once

#include "k8s4r/common/rfc3339.h"
#include "k8s4r/kube_sim/api_status.h"
#include "k8s4r/kube_sim/object_meta_validation.h"
#include "k8s4r/kube_sim/resource_type.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace k8s4r::kube_sim {

// How the kind's metadata is checked.
MetaRules meta_rules(const ResourceType& request);

// The 400 decode error of a wrong type in the kind's own fields (a Secret
// value that is not base64), worded as kube-apiserver words it; nullopt if none.
std::optional<std::string> builtin_decode_error(const ResourceType& request, const nlohmann::json& object);

// Server-set fields on create.
void prepare_for_create(const ResourceType& request, nlohmann::json& object, Timestamp now);
// What a plain update keeps from `existing` (a Namespace's spec.finalizers,
// changed only through /finalize) and what it folds (stringData).
void prepare_for_update(const ResourceType& request, nlohmann::json& object, const nlohmann::json& existing);

// The kind's 422 causes; `existing` is null on create.
std::vector<FieldCause> validate_builtin(const ResourceType& request, const nlohmann::json& object,
                                         const nlohmann::json* existing);

}  // namespace k8s4r::kube_sim
