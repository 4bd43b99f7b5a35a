#include "k8s4r/kube_sim/discovery.h"

#include <algorithm>
#include <map>
#include <set>

namespace k8s4r::kube_sim {

using nlohmann::json;

namespace {

const json kVerbs = {"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"};

// Groups in a stable order: built-in groups first, as kube-apiserver lists them.
std::vector<std::string> groups_of(const std::vector<ResourceType>& types) {
  std::vector<std::string> groups;
  for (const ResourceType& type : types) {
    if (!type.group.empty() && std::find(groups.begin(), groups.end(), type.group) == groups.end()) {
      groups.push_back(type.group);
    }
  }
  std::stable_sort(groups.begin(), groups.end(), [](const std::string& a, const std::string& b) {
    const bool a_builtin = a.find("k8s.io") != std::string::npos;
    const bool b_builtin = b.find("k8s.io") != std::string::npos;
    return a_builtin != b_builtin ? a_builtin : a < b;
  });
  return groups;
}

json group_json(const std::vector<ResourceType>& types, const std::string& group) {
  json versions = json::array();
  std::set<std::string> seen;
  for (const ResourceType& type : types) {
    if (type.group == group && seen.insert(type.version).second) {
      versions.push_back({{"groupVersion", type.api_version()}, {"version", type.version}});
    }
  }
  return {{"name", group}, {"versions", versions}, {"preferredVersion", versions.empty() ? json() : versions[0]}};
}

}  // namespace

json version_info() {
  return {{"major", "1"},
          {"minor", "32"},
          {"gitVersion", "v1.32.0-k8s4r-kube-sim"},
          {"gitCommit", "0000000000000000000000000000000000000000"},
          {"gitTreeState", "clean"},
          {"buildDate", "2026-01-01T00:00:00Z"},
          {"goVersion", "n/a (C++)"},
          {"compiler", "gc"},
          {"platform", "linux/amd64"}};
}

json api_versions(const std::string& server_address) {
  return {{"kind", "APIVersions"},
          {"versions", {"v1"}},
          {"serverAddressByClientCIDRs", {{{"clientCIDR", "0.0.0.0/0"}, {"serverAddress", server_address}}}}};
}

json api_group_list(const std::vector<ResourceType>& types) {
  json groups = json::array();
  for (const std::string& group : groups_of(types)) groups.push_back(group_json(types, group));
  return {{"kind", "APIGroupList"}, {"apiVersion", "v1"}, {"groups", groups}};
}

std::optional<json> api_group(const std::vector<ResourceType>& types, const std::string& group) {
  json found = group_json(types, group);
  if (found["versions"].empty()) return std::nullopt;
  found["kind"] = "APIGroup";
  found["apiVersion"] = "v1";
  return found;
}

std::optional<json> api_resource_list(const std::vector<ResourceType>& types, const std::string& group,
                                      const std::string& version) {
  json resources = json::array();
  for (const ResourceType& type : types) {
    if (type.group != group || type.version != version) continue;
    json entry = {{"name", type.plural},
                  {"singularName", type.singular},
                  {"namespaced", type.namespaced},
                  {"kind", type.kind},
                  {"verbs", type.create_only ? json{"create"} : kVerbs}};
    if (!type.short_names.empty()) entry["shortNames"] = type.short_names;
    if (!type.categories.empty()) entry["categories"] = type.categories;
    resources.push_back(entry);
    if (type.status_subresource) {
      resources.push_back({{"name", type.plural + "/status"},
                           {"singularName", ""},
                           {"namespaced", type.namespaced},
                           {"kind", type.kind},
                           {"verbs", {"get", "patch", "update"}}});
    }
    for (const std::string& subresource : type.subresources) {
      json sub = {{"name", type.plural + "/" + subresource}, {"singularName", ""}, {"namespaced", type.namespaced}};
      if (subresource == "token") {
        sub.update(
            {{"group", "authentication.k8s.io"}, {"version", "v1"}, {"kind", "TokenRequest"}, {"verbs", {"create"}}});
      } else {
        sub.update({{"kind", type.kind}, {"verbs", {"update"}}});
      }
      resources.push_back(sub);
    }
  }
  if (resources.empty()) return std::nullopt;
  return json{{"kind", "APIResourceList"},
              {"apiVersion", "v1"},
              {"groupVersion", group.empty() ? version : group + "/" + version},
              {"resources", resources}};
}

// ---- OpenAPI v3 ----------------------------------------------------------------------

namespace {

std::string path_of(const ResourceType& type) {
  return type.group.empty() ? "api/" + type.version : "apis/" + type.group + "/" + type.version;
}

// io.k8s4r.robot.v1alpha1.Task: the reversed group, as kube-openapi names CRD schemas.
std::string schema_name(const ResourceType& type) {
  std::string reversed;
  std::string group = type.group.empty() ? "core" : type.group;
  std::size_t end = group.size();
  while (true) {
    const std::size_t dot = group.rfind('.', end - 1);
    const std::size_t start = dot == std::string::npos ? 0 : dot + 1;
    reversed += (reversed.empty() ? "" : ".") + group.substr(start, end - start);
    if (dot == std::string::npos) break;
    end = dot;
  }
  return reversed + "." + type.version + "." + type.kind;
}

json gvk(const ResourceType& type) {
  return json::array({{{"group", type.group}, {"version", type.version}, {"kind", type.kind}}});
}

json query_parameter(const std::string& name, const std::string& description) {
  return {{"name", name},
          {"in", "query"},
          {"description", description},
          {"schema", {{"type", "string"}}},
          {"uniqueItems", true}};
}

json operation(const ResourceType& type, const std::string& verb, const std::string& id, bool with_body) {
  const json schema_ref = {{"$ref", "#/components/schemas/" + schema_name(type)}};
  json parameters = json::array();
  parameters.push_back(
      query_parameter("dryRun", "When present, indicates that modifications should not be persisted."));
  parameters.push_back(query_parameter("fieldManager", "A name associated with the actor making these changes."));
  parameters.push_back(query_parameter(
      "fieldValidation", "How the server handles unknown or duplicate fields: Ignore, Warn (default) or Strict."));
  json op = json::object();
  op["tags"] = json::array({path_of(type)});
  op["description"] = verb + " the specified " + type.kind;
  op["operationId"] = id;
  op["parameters"] = parameters;
  op["responses"]["200"]["description"] = "OK";
  op["responses"]["200"]["content"]["application/json"]["schema"] = schema_ref;
  op["x-kubernetes-action"] = verb;
  // kubectl looks for this and the fieldValidation parameter on PATCH to
  // decide that the server validates fields itself.
  op["x-kubernetes-group-version-kind"] = gvk(type)[0];
  if (with_body) {
    op["requestBody"]["content"]["*/*"]["schema"] = schema_ref;
    op["requestBody"]["required"] = true;
  }
  return op;
}

}  // namespace

json openapi_v3_root(const std::vector<ResourceType>& types) {
  json paths = json::object();
  for (const ResourceType& type : types) {
    const std::string path = path_of(type);
    paths[path] = {{"serverRelativeURL", "/openapi/v3/" + path}};
  }
  return {{"paths", paths}};
}

std::optional<json> openapi_v3_document(const std::vector<ResourceType>& types, const std::string& group_version_path) {
  json paths = json::object();
  json schemas = json::object();
  for (const ResourceType& type : types) {
    if (path_of(type) != group_version_path) continue;
    const std::string prefix = "/" + path_of(type) + (type.namespaced ? "/namespaces/{namespace}/" : "/") + type.plural;
    const std::string id_suffix = type.kind;
    paths[prefix] = {{"get", operation(type, "list", "list" + id_suffix, false)},
                     {"post", operation(type, "post", "create" + id_suffix, true)},
                     {"delete", operation(type, "deletecollection", "deletecollection" + id_suffix, false)}};
    paths[prefix + "/{name}"] = {{"get", operation(type, "get", "read" + id_suffix, false)},
                                 {"put", operation(type, "put", "replace" + id_suffix, true)},
                                 {"patch", operation(type, "patch", "patch" + id_suffix, true)},
                                 {"delete", operation(type, "delete", "delete" + id_suffix, false)}};
    if (type.status_subresource) {
      paths[prefix + "/{name}/status"] = {{"get", operation(type, "get", "read" + id_suffix + "Status", false)},
                                          {"put", operation(type, "put", "replace" + id_suffix + "Status", true)},
                                          {"patch", operation(type, "patch", "patch" + id_suffix + "Status", true)}};
    }
    json schema = type.schema ? *type.schema : json{{"type", "object"}, {"x-kubernetes-preserve-unknown-fields", true}};
    if (schema.contains("properties")) {
      schema["properties"]["metadata"] = {
          {"description", "Standard object's metadata."},
          {"allOf", {{{"$ref", "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}}}}};
    }
    schema["x-kubernetes-group-version-kind"] = gvk(type);
    schemas[schema_name(type)] = schema;
    schemas[schema_name(type) + "List"] = {
        {"type", "object"},
        {"required", {"items"}},
        {"properties",
         {{"apiVersion", {{"type", "string"}}},
          {"kind", {{"type", "string"}}},
          {"items", {{"type", "array"}, {"items", {{"$ref", "#/components/schemas/" + schema_name(type)}}}}},
          {"metadata",
           {{"allOf", {{{"$ref", "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta"}}}}}}}},
        {"x-kubernetes-group-version-kind",
         json::array({{{"group", type.group}, {"version", type.version}, {"kind", type.list_kind}}})}};
  }
  if (paths.empty()) return std::nullopt;
  schemas["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"] = {
      {"type", "object"},
      {"description", "ObjectMeta is metadata that all persisted resources must have."},
      {"properties",
       {{"name", {{"type", "string"}}},
        {"generateName", {{"type", "string"}}},
        {"namespace", {{"type", "string"}}},
        {"uid", {{"type", "string"}}},
        {"resourceVersion", {{"type", "string"}}},
        {"generation", {{"type", "integer"}, {"format", "int64"}}},
        {"creationTimestamp", {{"type", "string"}, {"format", "date-time"}}},
        {"deletionTimestamp", {{"type", "string"}, {"format", "date-time"}}},
        {"deletionGracePeriodSeconds", {{"type", "integer"}, {"format", "int64"}}},
        {"labels", {{"type", "object"}, {"additionalProperties", {{"type", "string"}}}}},
        {"annotations", {{"type", "object"}, {"additionalProperties", {{"type", "string"}}}}},
        {"finalizers", {{"type", "array"}, {"items", {{"type", "string"}}}}},
        {"ownerReferences",
         {{"type", "array"}, {"items", {{"type", "object"}, {"x-kubernetes-preserve-unknown-fields", true}}}}},
        {"managedFields",
         {{"type", "array"}, {"items", {{"type", "object"}, {"x-kubernetes-preserve-unknown-fields", true}}}}}}}};
  schemas["io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta"] = {
      {"type", "object"},
      {"properties",
       {{"resourceVersion", {{"type", "string"}}},
        {"continue", {{"type", "string"}}},
        {"remainingItemCount", {{"type", "integer"}, {"format", "int64"}}}}}};
  return json{{"openapi", "3.0.0"},
              {"info", {{"title", "Kubernetes"}, {"version", "v1.32.0"}}},
              {"paths", paths},
              {"components", {{"schemas", schemas}}}};
}

}  // namespace k8s4r::kube_sim
