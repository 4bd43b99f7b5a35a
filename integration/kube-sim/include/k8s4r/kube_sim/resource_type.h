// What the stand-in knows about a kind of resource: names for URLs and
// discovery, scope, subresources, schema and printer columns. Built-in types
// (builtin_types.cpp: namespaces, secrets, configmaps, serviceaccounts, events
// in core and events.k8s.io, leases, RBAC, the review kinds, CRDs) are fixed;
// every other type comes from a CustomResourceDefinition applied at run time.
#pragma once

#include "k8s4r/common/result.h"

#include <nlohmann/json.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace k8s4r::kube_sim {

struct PrinterColumn {
  std::string name, type, format, description, json_path;
  int priority = 0;
  // For built-in columns that are not a JSON path (a Secret's DATA counts
  // its keys): the cell as the server sends it, shown by kubectl as is.
  std::function<nlohmann::json(const nlohmann::json& object)> compute = nullptr;
  // The value is the cell as is: a "date" stays a timestamp instead of an age
  // (kubectl get crd, role: CREATED AT).
  bool raw = false;
};

struct ResourceType {
  std::string group;  // "" for the core group
  std::string version;
  std::string plural, singular, kind, list_kind;
  bool namespaced = true;
  std::vector<std::string> short_names, categories;
  bool status_subresource = false;
  // openAPIV3Schema of a CRD version; null for built-ins, which are not
  // validated. Shared: types are copied per request, schemas are large.
  std::shared_ptr<const nlohmann::json> schema;
  std::vector<PrinterColumn> columns;  // besides Name; Age is one of them when wanted
  // Field selector paths besides metadata.name and metadata.namespace.
  std::vector<std::string> selectable_fields;
  // Built-ins accept strategic merge patches (applied as merge patches).
  bool builtin = false;
  // Subresources besides status: "token" (serviceaccounts), "finalize" (namespaces).
  std::vector<std::string> subresources;
  // Where the objects live when another group's resource stores them
  // (events.k8s.io/v1 events are core events): "group/plural"; "" for its own.
  std::string stored_as;
  // Only POST is served, and nothing is stored: reviews (SelfSubjectAccessReview).
  bool create_only = false;

  std::string api_version() const { return group.empty() ? version : group + "/" + version; }
  // "tasks.robot.k8s4r.io" or "namespaces": how errors name the resource.
  std::string qualified_plural() const { return group.empty() ? plural : plural + "." + group; }
  // "Task.robot.k8s4r.io": how 422 Invalid names the kind.
  std::string qualified_kind() const { return group.empty() ? kind : kind + "." + group; }
  // Unique key: group/version/plural.
  std::string key() const { return group + "/" + version + "/" + plural; }
  // The stored resource it reads and writes: "group/plural".
  std::string storage_key() const { return stored_as.empty() ? group + "/" + plural : stored_as; }
};

std::vector<ResourceType> builtin_types();

// The Age column tables get when nothing else is declared.
PrinterColumn age_column();

// The served types a CRD defines (one per served version), or why the CRD is
// invalid, as 422 field errors ("spec.names.plural: Required value").
struct CrdProblem {
  std::string field, message, reason;
};
std::vector<ResourceType> types_from_crd(const nlohmann::json& crd, std::vector<CrdProblem>& problems);

}  // namespace k8s4r::kube_sim
