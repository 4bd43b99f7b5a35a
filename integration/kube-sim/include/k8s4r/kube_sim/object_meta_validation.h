// metadata as kube-apiserver 1.32 checks it on every write, with its wording:
// the JSON types (a wrong type is a decode error, 400), names by the rule of
// each kind, label keys and values, annotation keys and total size,
// finalizer names, owner references. Pure functions: no store, no clock.
#pragma once

#include "k8s4r/kube_sim/api_status.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace k8s4r::kube_sim {

// How a kind's object names are checked (k8s.io/apimachinery/pkg/api/validation).
enum class NameRule {
  dns_subdomain,  // custom resources, Secrets, ConfigMaps, ServiceAccounts, Leases, events.k8s.io Events
  dns_label,      // Namespaces
  path_segment,   // RBAC objects, core Events: only ".", ".." and names with '/' or '%' are refused
};

struct MetaRules {
  NameRule name = NameRule::dns_subdomain;
  // Built-ins refuse a finalizer that is neither standard (kubernetes,
  // orphan, foregroundDeletion) nor domain-qualified; custom resources only
  // warn about it.
  bool standard_finalizers_only = false;
};

// The decode error a wrong JSON type in `metadata` gets, e.g. "json: cannot
// unmarshal array into Go struct field ObjectMeta.metadata.labels of type
// map[string]string". Built-in kinds decode the whole body, so their paths
// start at the object and name it (`kind`); custom resources decode metadata
// alone. nullopt when every type is right (null counts as absent).
std::optional<std::string> metadata_type_error(const nlohmann::json& object, const std::string& kind, bool builtin);

// The 422 causes for `metadata` (after generateName was expanded).
std::vector<FieldCause> validate_object_meta(const nlohmann::json& metadata, const MetaRules& rules);

// The name rule's complaints about `name` (empty when valid).
std::vector<std::string> name_problems(const std::string& name, NameRule rule);

// Warnings a custom resource's finalizers get (`metadata.finalizers: "x":
// prefer a domain-qualified finalizer name ...`): on create for all of them,
// on update for those not in `old_metadata`.
std::vector<std::string> finalizer_warnings(const nlohmann::json& metadata, const nlohmann::json* old_metadata);

// Drops repeated owner references (same uid, same content), as the real
// handlers do, and returns the warning they send; nullopt when none repeated.
std::optional<std::string> deduplicate_owner_references(nlohmann::json& metadata);

// IsQualifiedName's complaints (label keys, annotation keys, finalizers).
std::vector<std::string> qualified_name_problems(const std::string& value);

}  // namespace k8s4r::kube_sim
