// What the stand-in knows about a kind of resource: names for URLs and
// discovery, scope, subresources, schema and printer columns. Built-in types
// (namespaces, events, leases, customresourcedefinitions) are fixed; every
// other type comes from a CustomResourceDefinition applied at run time.
#pragma once

#include "k8s4r/common/result.h"

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

namespace k8s4r::kube_sim {

struct PrinterColumn {
  std::string name, type, format, description, json_path;
  int priority = 0;
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

  std::string api_version() const { return group.empty() ? version : group + "/" + version; }
  // "tasks.robot.k8s4r.io" or "namespaces": how errors name the resource.
  std::string qualified_plural() const { return group.empty() ? plural : plural + "." + group; }
  // "Task.robot.k8s4r.io": how 422 Invalid names the kind.
  std::string qualified_kind() const { return group.empty() ? kind : kind + "." + group; }
  // Unique key: group/version/plural.
  std::string key() const { return group + "/" + version + "/" + plural; }
};

std::vector<ResourceType> builtin_types();

// The served types a CRD defines (one per served version), or why the CRD is
// invalid, as 422 field errors ("spec.names.plural: Required value").
struct CrdProblem {
  std::string field, message, reason;
};
std::vector<ResourceType> types_from_crd(const nlohmann::json& crd, std::vector<CrdProblem>& problems);

}  // namespace k8s4r::kube_sim
