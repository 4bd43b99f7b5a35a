// The built-in kinds the stand-in serves, with the names, scopes, short names
// and table columns kube-apiserver 1.32 gives them.
#include "k8s4r/kube_sim/resource_type.h"

#include "store_util.h"

#include <algorithm>
#include <cctype>

namespace k8s4r::kube_sim {

using nlohmann::json;

namespace {

// RBAC objects and CRDs print their creation time as an RFC 3339 timestamp,
// not as an age.
PrinterColumn created_at_column() {
  PrinterColumn column{"Created At", "date", "", "", ".metadata.creationTimestamp", 0};
  column.raw = true;
  return column;
}

// The number of keys in one or more maps of the object ("data", "binaryData").
PrinterColumn count_column(std::string name, std::vector<std::string> fields) {
  PrinterColumn column{std::move(name), "integer", "", "", "", 0};
  column.compute = [fields](const json& object) -> json {
    std::size_t count = 0;
    for (const std::string& field : fields) {
      if (object.contains(field) && (object[field].is_object() || object[field].is_array()))
        count += object[field].size();
    }
    return count;
  };
  return column;
}

// "Role/name" and the subjects of one kind, as kubectl get rolebinding -o wide shows them.
std::vector<PrinterColumn> binding_columns() {
  PrinterColumn role{"Role", "string", "", "", "", 0};
  role.compute = [](const json& object) -> json {
    const json& ref = object.value("roleRef", json::object());
    return ref.value("kind", "") + "/" + ref.value("name", "");
  };
  const auto subjects = [](std::string name, std::string kind) {
    PrinterColumn column{std::move(name), "string", "", "", "", 1};
    column.compute = [kind](const json& object) -> json {
      std::string text;
      for (const json& subject : object.value("subjects", json::array())) {
        if (!subject.is_object() || subject.value("kind", "") != kind) continue;
        std::string item = subject.value("name", "");
        if (kind == "ServiceAccount") item = subject.value("namespace", "") + "/" + item;
        text += (text.empty() ? "" : ", ") + item;
      }
      return text;
    };
    return column;
  };
  return {role, age_column(), subjects("Users", "User"), subjects("Groups", "Group"),
          subjects("ServiceAccounts", "ServiceAccount")};
}

// Event columns read from either shape: core/v1 (involvedObject, message,
// lastTimestamp) or events.k8s.io/v1 (regarding, note, deprecatedLastTimestamp).
std::vector<PrinterColumn> event_columns(bool core) {
  const std::string regarding = core ? "involvedObject" : "regarding";
  PrinterColumn last_seen{"Last Seen", "string", "", "", "", 0};
  last_seen.compute = [core](const json& object) -> json {
    for (const char* field : {core ? "lastTimestamp" : "deprecatedLastTimestamp", "eventTime",
                              core ? "firstTimestamp" : "deprecatedFirstTimestamp"}) {
      if (object.contains(field) && object[field].is_string()) return object[field];
    }
    return json();
  };
  last_seen.type = "date";
  PrinterColumn object_column{"Object", "string", "", "", "", 0};
  object_column.compute = [regarding](const json& object) -> json {
    const json& ref = object.value(regarding, json::object());
    return lowercase(ref.value("kind", "")) + "/" + ref.value("name", "");
  };
  return {last_seen,
          {"Type", "string", "", "", ".type", 0},
          {"Reason", "string", "", "", ".reason", 0},
          object_column,
          {"Message", "string", "", "", core ? ".message" : ".note", 0}};
}

const std::vector<std::string> kEventFields = {"involvedObject.kind",
                                               "involvedObject.namespace",
                                               "involvedObject.name",
                                               "involvedObject.uid",
                                               "involvedObject.apiVersion",
                                               "involvedObject.resourceVersion",
                                               "involvedObject.fieldPath",
                                               "reason",
                                               "reportingComponent",
                                               "source",
                                               "type"};

}  // namespace

std::vector<ResourceType> builtin_types() {
  std::vector<ResourceType> types = {
      ResourceType{
          .version = "v1",
          .plural = "namespaces",
          .singular = "namespace",
          .kind = "Namespace",
          .list_kind = "NamespaceList",
          .namespaced = false,
          .short_names = {"ns"},
          .status_subresource = true,
          .columns = {{"Status", "string", "", "The status of the namespace", ".status.phase", 0}, age_column()},
          .selectable_fields = {"status.phase"},
          .builtin = true,
          .subresources = {"finalize"}},
      ResourceType{.version = "v1",
                   .plural = "secrets",
                   .singular = "secret",
                   .kind = "Secret",
                   .list_kind = "SecretList",
                   .columns = {{"Type", "string", "", "", ".type", 0}, count_column("Data", {"data"}), age_column()},
                   .selectable_fields = {"type"},
                   .builtin = true},
      ResourceType{.version = "v1",
                   .plural = "configmaps",
                   .singular = "configmap",
                   .kind = "ConfigMap",
                   .list_kind = "ConfigMapList",
                   .short_names = {"cm"},
                   .columns = {count_column("Data", {"data", "binaryData"}), age_column()},
                   .builtin = true},
      ResourceType{.version = "v1",
                   .plural = "serviceaccounts",
                   .singular = "serviceaccount",
                   .kind = "ServiceAccount",
                   .list_kind = "ServiceAccountList",
                   .short_names = {"sa"},
                   .columns = {count_column("Secrets", {"secrets"}), age_column()},
                   .builtin = true,
                   .subresources = {"token"}},
      ResourceType{.version = "v1",
                   .plural = "events",
                   .singular = "event",
                   .kind = "Event",
                   .list_kind = "EventList",
                   .short_names = {"ev"},
                   .columns = event_columns(true),
                   .selectable_fields = kEventFields,
                   .builtin = true},
      ResourceType{.group = "events.k8s.io",
                   .version = "v1",
                   .plural = "events",
                   .singular = "event",
                   .kind = "Event",
                   .list_kind = "EventList",
                   .short_names = {"ev"},
                   .columns = event_columns(false),
                   .builtin = true,
                   .stored_as = "/events"},
      ResourceType{.group = "coordination.k8s.io",
                   .version = "v1",
                   .plural = "leases",
                   .singular = "lease",
                   .kind = "Lease",
                   .list_kind = "LeaseList",
                   .columns = {{"Holder", "string", "", "", ".spec.holderIdentity", 0}, age_column()},
                   .builtin = true},
      ResourceType{.group = "rbac.authorization.k8s.io",
                   .version = "v1",
                   .plural = "roles",
                   .singular = "role",
                   .kind = "Role",
                   .list_kind = "RoleList",
                   .columns = {created_at_column()},
                   .builtin = true},
      ResourceType{.group = "rbac.authorization.k8s.io",
                   .version = "v1",
                   .plural = "clusterroles",
                   .singular = "clusterrole",
                   .kind = "ClusterRole",
                   .list_kind = "ClusterRoleList",
                   .namespaced = false,
                   .columns = {created_at_column()},
                   .builtin = true},
      ResourceType{.group = "rbac.authorization.k8s.io",
                   .version = "v1",
                   .plural = "rolebindings",
                   .singular = "rolebinding",
                   .kind = "RoleBinding",
                   .list_kind = "RoleBindingList",
                   .columns = binding_columns(),
                   .builtin = true},
      ResourceType{.group = "rbac.authorization.k8s.io",
                   .version = "v1",
                   .plural = "clusterrolebindings",
                   .singular = "clusterrolebinding",
                   .kind = "ClusterRoleBinding",
                   .list_kind = "ClusterRoleBindingList",
                   .namespaced = false,
                   .columns = binding_columns(),
                   .builtin = true},
      ResourceType{.group = "apiextensions.k8s.io",
                   .version = "v1",
                   .plural = "customresourcedefinitions",
                   .singular = "customresourcedefinition",
                   .kind = "CustomResourceDefinition",
                   .list_kind = "CustomResourceDefinitionList",
                   .namespaced = false,
                   .short_names = {"crd", "crds"},
                   .categories = {"api-extensions"},
                   .status_subresource = true,
                   .columns = {created_at_column()},
                   .builtin = true},
  };
  // Reviews: POST only, answered from who is asking, never stored.
  const auto review = [](std::string group, std::string plural, std::string kind, bool namespaced) {
    ResourceType type{.group = std::move(group),
                      .version = "v1",
                      .plural = std::move(plural),
                      .kind = std::move(kind),
                      .namespaced = namespaced,
                      .builtin = true,
                      .create_only = true};
    type.list_kind = type.kind + "List";
    return type;
  };
  types.push_back(review("authentication.k8s.io", "tokenreviews", "TokenReview", false));
  types.push_back(review("authentication.k8s.io", "selfsubjectreviews", "SelfSubjectReview", false));
  types.push_back(review("authorization.k8s.io", "selfsubjectaccessreviews", "SelfSubjectAccessReview", false));
  types.push_back(review("authorization.k8s.io", "selfsubjectrulesreviews", "SelfSubjectRulesReview", false));
  types.push_back(review("authorization.k8s.io", "subjectaccessreviews", "SubjectAccessReview", false));
  types.push_back(review("authorization.k8s.io", "localsubjectaccessreviews", "LocalSubjectAccessReview", true));
  return types;
}

}  // namespace k8s4r::kube_sim
