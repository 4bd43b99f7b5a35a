// The shapes server-side apply merges by: ObjectMeta's, and the built-in
// kinds' (what kube-openapi derives from their Go types' list and map
// markers), written as the OpenAPI v3 a CRD would carry. Only what decides
// merging is here: struct fields, maps, and lists that are sets or keyed.
// Lists without a marker are atomic, as in Kubernetes.
#include "structured_merge.h"

#include "store_util.h"

#include "k8s4r/kube_sim/resource_type.h"

#include <map>

namespace k8s4r::kube_sim {

using nlohmann::json;

namespace {

const char* kObjectMeta = R"({"type":"object","properties":{
  "name":{"type":"string"},"generateName":{"type":"string"},"namespace":{"type":"string"},
  "selfLink":{"type":"string"},"uid":{"type":"string"},"resourceVersion":{"type":"string"},
  "generation":{"type":"integer"},"creationTimestamp":{"type":"string"},"deletionTimestamp":{"type":"string"},
  "deletionGracePeriodSeconds":{"type":"integer"},
  "labels":{"type":"object","additionalProperties":{"type":"string"}},
  "annotations":{"type":"object","additionalProperties":{"type":"string"}},
  "ownerReferences":{"type":"array","x-kubernetes-list-type":"map","x-kubernetes-list-map-keys":["uid"],
    "items":{"type":"object","properties":{"apiVersion":{"type":"string"},"kind":{"type":"string"},
      "name":{"type":"string"},"uid":{"type":"string"},"controller":{"type":"boolean"},
      "blockOwnerDeletion":{"type":"boolean"}}}},
  "finalizers":{"type":"array","x-kubernetes-list-type":"set","items":{"type":"string"}},
  "managedFields":{"type":"array","items":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}})";

// A struct with these fields, each deduced from its value.
std::string fields(std::initializer_list<const char*> names) {
  std::string out = R"({"type":"object","properties":{)";
  bool first = true;
  for (const char* name : names) {
    out += std::string(first ? "" : ",") + "\"" + name + "\":{}";
    first = false;
  }
  return out + "}}";
}

const std::map<std::string, std::string>& builtin_schemas() {
  static const auto* table = new std::map<std::string, std::string>{
      {"/ConfigMap",
       R"({"type":"object","properties":{"data":{"type":"object","additionalProperties":{"type":"string"}},
          "binaryData":{"type":"object","additionalProperties":{"type":"string"}},"immutable":{"type":"boolean"}}})"},
      {"/Secret",
       R"({"type":"object","properties":{"data":{"type":"object","additionalProperties":{"type":"string"}},
          "stringData":{"type":"object","additionalProperties":{"type":"string"}},"type":{"type":"string"},
          "immutable":{"type":"boolean"}}})"},
      {"/Namespace",
       R"({"type":"object","properties":{"spec":{"type":"object","properties":{"finalizers":{"type":"array"}}},
          "status":{"type":"object","properties":{"phase":{"type":"string"},"conditions":{"type":"array",
          "x-kubernetes-list-type":"map","x-kubernetes-list-map-keys":["type"]}}}}})"},
      {"/ServiceAccount",
       R"({"type":"object","properties":{"secrets":{"type":"array","x-kubernetes-list-type":"map",
          "x-kubernetes-list-map-keys":["name"]},"imagePullSecrets":{"type":"array"},
          "automountServiceAccountToken":{"type":"boolean"}}})"},
      {"/Event",
       fields({"involvedObject", "related", "reason", "message", "type", "action", "reportingComponent",
               "reportingInstance", "count", "source", "series", "firstTimestamp", "lastTimestamp", "eventTime"})},
      {"events.k8s.io/Event", fields({"regarding", "related", "reason", "note", "type", "action", "reportingController",
                                      "reportingInstance", "deprecatedCount", "deprecatedSource", "series",
                                      "deprecatedFirstTimestamp", "deprecatedLastTimestamp", "eventTime"})},
      {"coordination.k8s.io/Lease",
       R"({"type":"object","properties":{"spec":{"type":"object","properties":{"holderIdentity":{},
          "leaseDurationSeconds":{},"acquireTime":{},"renewTime":{},"leaseTransitions":{},"strategy":{},
          "preferredHolder":{}}}}})"},
      {"rbac.authorization.k8s.io/Role", R"({"type":"object","properties":{"rules":{"type":"array"}}})"},
      {"rbac.authorization.k8s.io/ClusterRole",
       R"({"type":"object","properties":{"rules":{"type":"array"},"aggregationRule":{"type":"object",
          "properties":{"clusterRoleSelectors":{"type":"array"}}}}})"},
      {"rbac.authorization.k8s.io/RoleBinding",
       R"({"type":"object","properties":{"subjects":{"type":"array"},
          "roleRef":{"type":"object","x-kubernetes-map-type":"atomic"}}})"},
      {"rbac.authorization.k8s.io/ClusterRoleBinding",
       R"({"type":"object","properties":{"subjects":{"type":"array"},
          "roleRef":{"type":"object","x-kubernetes-map-type":"atomic"}}})"},
      {"apiextensions.k8s.io/CustomResourceDefinition",
       R"({"type":"object","properties":{"spec":{"type":"object","properties":{"group":{},"scope":{},
          "names":{"type":"object","properties":{"plural":{},"singular":{},"kind":{},"listKind":{},
          "shortNames":{"type":"array"},"categories":{"type":"array"}}},"versions":{"type":"array"},
          "conversion":{"type":"object","properties":{"strategy":{},"webhook":{}}},"preserveUnknownFields":{}}},
          "status":{"type":"object","properties":{"conditions":{"type":"array","x-kubernetes-list-type":"map",
          "x-kubernetes-list-map-keys":["type"]},"acceptedNames":{"type":"object","properties":{"plural":{},
          "singular":{},"kind":{},"listKind":{},"shortNames":{"type":"array"},"categories":{"type":"array"}}},
          "storedVersions":{"type":"array"}}}}})"},
  };
  return *table;
}

}  // namespace

const json& object_meta_schema() {
  static const json* schema = new json(json::parse(kObjectMeta));
  return *schema;
}

ApplySchema apply_schema_for(const ResourceType& type) {
  if (!type.builtin) return ApplySchema(type.schema, type.schema != nullptr);
  // Built-in kinds are fixed: parsed once, shared by every write.
  static const auto* parsed = [] {
    auto* out = new std::map<std::string, std::shared_ptr<const json>>();
    for (const auto& [key, text] : builtin_schemas())
      out->emplace(key, std::make_shared<const json>(json::parse(text)));
    return out;
  }();
  static const auto any_object = std::make_shared<const json>(json{{"type", "object"}});
  auto found = parsed->find(type.group + "/" + type.kind);
  return ApplySchema(found == parsed->end() ? any_object : found->second, false);
}

}  // namespace k8s4r::kube_sim
