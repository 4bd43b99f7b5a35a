// POST: names (generateName), the namespace it lands in, the fields only the
// server sets, admission, and what a new CRD or Namespace gets.
#include "k8s4r/kube_sim/store.h"

#include "conversion.h"
#include "store_util.h"

#include "k8s4r/kube_sim/schema.h"

#include <algorithm>

namespace k8s4r::kube_sim {

using nlohmann::json;

ApiResponse Store::create(const Target& target, json body, const WriteOptions& options) {
  const ResourceType& type = target.type;
  if (!body.is_object()) return bad_request("the body of the request must be a JSON object");
  if (auto mismatch = check_type_meta(body, type)) return *mismatch;
  body["apiVersion"] = type.api_version();
  body["kind"] = type.kind;
  if (!body.contains("metadata") || !body["metadata"].is_object()) body["metadata"] = json::object();

  std::lock_guard lock(mutex_);
  Resource* resource = resource_of(type);
  if (resource == nullptr) return not_found_path(type.key());
  if (type.api_version() != resource->storage_version) {
    body = convert(body, storage_type(*resource));
  }
  json& metadata = body["metadata"];

  std::string name = string_at(metadata, "name");
  if (name.empty() && !string_at(metadata, "generateName").empty()) {
    name = string_at(metadata, "generateName") + random_suffix();
    metadata["name"] = name;
  }
  if (name.empty()) {
    return invalid(subject(type, ""), type.qualified_kind(),
                   {{"FieldValueRequired", "Required value: name or generateName is required", "metadata.name"}});
  }
  if (!valid_object_name(name, type.plural == "namespaces")) {
    return invalid(subject(type, name), type.qualified_kind(),
                   {{"FieldValueInvalid",
                     "Invalid value: \"" + name +
                         "\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
                         "or '.', and must start and end with an alphanumeric character",
                     "metadata.name"}});
  }
  std::string namespace_;
  if (type.namespaced) {
    namespace_ = string_at(metadata, "namespace");
    if (namespace_.empty()) namespace_ = target.namespace_;
    if (!target.namespace_.empty() && namespace_ != target.namespace_) {
      return bad_request("the namespace of the provided object does not match the namespace sent on the request");
    }
    if (namespace_.empty()) return bad_request("namespace is required for a namespaced resource");
    const Resource& namespaces = resources_.at("/namespaces");
    auto ns = namespaces.objects.find(object_key("", namespace_));
    if (ns == namespaces.objects.end()) return not_found({"", "namespaces", namespace_});
    if (metadata_of(*ns->second).contains("deletionTimestamp")) {
      return {403,
              status_body(403, "Forbidden",
                          type.qualified_plural() + " \"" + name +
                              "\" is forbidden: unable to create new content in namespace " + namespace_ +
                              " because it is being terminated"),
              {}};
    }
    metadata["namespace"] = namespace_;
  } else {
    metadata.erase("namespace");
  }
  const std::string key = object_key(namespace_, name);
  if (resource->objects.count(key)) return already_exists(subject(type, name));

  // Fields only the server sets.
  metadata["uid"] = random_uid();
  metadata["creationTimestamp"] = format_rfc3339(clock_());
  metadata["generation"] = 1;
  metadata.erase("resourceVersion");
  metadata.erase("deletionTimestamp");
  metadata.erase("deletionGracePeriodSeconds");
  // With a status subresource, status is set only through /status.
  if (type.status_subresource && !type.builtin) body.erase("status");

  std::vector<std::string> warnings;
  if (auto admitted = admit(target, body, nullptr, options, warnings); !admitted.ok()) return admitted;

  if (type.plural == "customresourcedefinitions") {
    std::vector<CrdProblem> problems;
    types_from_crd(body, problems);
    if (!problems.empty()) {
      std::vector<FieldCause> causes;
      for (const CrdProblem& problem : problems) causes.push_back({problem.reason, problem.message, problem.field});
      return invalid(subject(type, name), type.qualified_kind(), causes);
    }
    const json& names = body["spec"]["names"];
    json accepted = names;
    if (!accepted.contains("singular")) {
      std::string singular = names.value("kind", "");
      std::transform(singular.begin(), singular.end(), singular.begin(),
                     [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      accepted["singular"] = singular;
    }
    if (!accepted.contains("listKind")) accepted["listKind"] = names.value("kind", "") + "List";
    const std::string now = format_rfc3339(clock_());
    json stored = json::array();
    for (const json& version : body["spec"]["versions"]) {
      if (version.value("storage", false)) stored.push_back(version["name"]);
    }
    body["status"] = {{"acceptedNames", accepted},
                      {"conditions",
                       {{{"type", "NamesAccepted"},
                         {"status", "True"},
                         {"lastTransitionTime", now},
                         {"reason", "NoConflicts"},
                         {"message", "no conflicts found"}},
                        {{"type", "Established"},
                         {"status", "True"},
                         {"lastTransitionTime", now},
                         {"reason", "InitialNamesAccepted"},
                         {"message", "the initial names have been accepted"}}}},
                      {"storedVersions", stored}};
  }
  if (type.plural == "namespaces") {
    body["status"] = {{"phase", "Active"}};
    if (!metadata.contains("labels") || !metadata["labels"].is_object()) metadata["labels"] = json::object();
    metadata["labels"]["kubernetes.io/metadata.name"] = name;
  }
  if (options.dry_run) return {201, body, warnings};

  auto stored = commit(*resource, key, std::make_shared<json>(std::move(body)), "ADDED");
  if (type.plural == "customresourcedefinitions") register_crd(*stored);
  return {201, for_version(*stored, type), warnings};
}

}  // namespace k8s4r::kube_sim
