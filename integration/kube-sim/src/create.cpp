// POST: decoding, names (generateName), the namespace it lands in, the
// fields only the server sets, the kind's defaults and validation, metadata
// validation, schema admission, and what a new CRD serves.
#include "k8s4r/kube_sim/store.h"

#include "conversion.h"
#include "managed_fields.h"
#include "store_util.h"

#include "k8s4r/kube_sim/builtin_strategies.h"
#include "k8s4r/kube_sim/object_meta_validation.h"

namespace k8s4r::kube_sim {

using nlohmann::json;

std::optional<ApiResponse> Store::decode_errors(const ResourceType& type, const json& body, bool from_patch) {
  std::optional<std::string> error = metadata_type_error(body, type.kind, type.builtin);
  if (!error) error = builtin_decode_error(type, body);
  if (!error) return std::nullopt;
  if (from_patch) {
    // A patch whose result does not decode: 422 naming the patched object.
    return invalid({"", "", ""}, "",
                   {{"FieldValueInvalid", "Invalid value: \"" + body.dump() + "\": " + *error, "patch"}});
  }
  return bad_request(type.kind + " in version \"" + type.version + "\" cannot be handled as a " + type.kind + ": " +
                     *error);
}

ApiResponse Store::create(const Target& target, json body, const WriteOptions& options) {
  std::lock_guard lock(mutex_);
  ApiResponse response = create_locked(target, std::move(body), options);
  run_controllers_locked();
  return response;
}

ApiResponse Store::create_locked(const Target& target, json body, const WriteOptions& options) {
  const ResourceType& type = target.type;
  if (!body.is_object()) return bad_request("the body of the request must be a JSON object");
  if (auto mismatch = check_type_meta(body, type)) return *mismatch;
  if (auto error = decode_errors(type, body, false)) return *error;
  body["apiVersion"] = type.api_version();
  body["kind"] = type.kind;
  if (!body.contains("metadata") || !body["metadata"].is_object()) body["metadata"] = json::object();

  Resource* resource = resource_of(type);
  if (resource == nullptr) return not_found_path(type.key());
  if (type.api_version() != resource->storage_version) body = convert(body, storage_type(*resource));
  json& metadata = body["metadata"];

  std::string name = string_at(metadata, "name");
  if (name.empty() && !string_at(metadata, "generateName").empty()) {
    // As kube-apiserver: the prefix is cut to 58 characters, then 5 random ones.
    name = string_at(metadata, "generateName").substr(0, 58) + random_suffix();
    metadata["name"] = name;
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
      // The NamespaceLifecycle admission plugin.
      json details = {{"name", name.empty() ? "Unknown" : name},
                      {"kind", type.plural},
                      {"causes",
                       {{{"reason", "NamespaceTerminating"},
                         {"message", "namespace " + namespace_ + " is being terminated"},
                         {"field", "metadata.namespace"}}}}};
      if (!type.group.empty()) details["group"] = type.group;
      return {403,
              status_body(403, "Forbidden",
                          type.qualified_plural() + " \"" + (name.empty() ? "Unknown" : name) +
                              "\" is forbidden: unable to create new content in namespace " + namespace_ +
                              " because it is being terminated",
                          details),
              {}};
    }
    metadata["namespace"] = namespace_;
  } else {
    metadata.erase("namespace");
  }

  // Fields only the server sets.
  metadata["uid"] = random_uid();
  metadata["creationTimestamp"] = format_rfc3339(clock_());
  // generation counts spec changes of the kinds that track them: custom
  // resources and CRDs here (core kinds such as ConfigMap leave it unset).
  if (!type.builtin || is_crd(type)) {
    metadata["generation"] = 1;
  } else {
    metadata.erase("generation");
  }
  metadata.erase("resourceVersion");
  metadata.erase("deletionTimestamp");
  metadata.erase("deletionGracePeriodSeconds");
  metadata.erase("selfLink");
  // With a status subresource, status is set only through /status.
  if (type.status_subresource && !type.builtin) body.erase("status");
  prepare_for_create(type, body, clock_());

  std::vector<std::string> warnings;
  settle_request_managed_fields(body["metadata"], nullptr);
  std::vector<FieldCause> causes = validate_builtin(type, body, nullptr);
  for (FieldCause& cause : validate_object_meta(body["metadata"], meta_rules(type))) causes.push_back(cause);
  if (!causes.empty()) return invalid(subject(type, name), type.qualified_kind(), causes);
  if (auto warning = deduplicate_owner_references(body["metadata"])) warnings.push_back(*warning);
  if (!type.builtin) {
    for (std::string& warning : finalizer_warnings(body["metadata"], nullptr)) warnings.push_back(warning);
  }

  const std::string key = object_key(namespace_, name);
  if (auto existing = resource->objects.find(key); existing != resource->objects.end()) {
    ApiResponse exists = already_exists(subject(type, name));
    if (metadata_of(*existing->second).contains("deletionTimestamp"))
      exists.body["message"] = "object is being deleted: " + exists.body["message"].get<std::string>();
    return exists;
  }
  if (auto admitted = admit(target, body, nullptr, options, warnings); !admitted.ok()) return admitted;
  if (is_crd(type)) {
    // Built-in resources are the API server's own: a CRD may not take one over.
    const json& spec = body["spec"];
    const std::string group = string_at(spec, "group");
    const std::string plural =
        spec.contains("names") && spec["names"].is_object() ? string_at(spec["names"], "plural") : "";
    auto served = resources_.find(group + "/" + plural);
    if (served != resources_.end() && !served->second.versions.empty() && storage_type(served->second).builtin) {
      return invalid(
          subject(type, name), type.qualified_kind(),
          {{"FieldValueInvalid",
            "Invalid value: \"" + group + "\": " + plural + "." + group + " is a built-in resource of the API server",
            "spec.group"}});
    }
  }
  track_fields(target, body, nullptr, false, options);
  if (options.dry_run) return {201, for_version(body, type), warnings};

  auto stored = commit(*resource, key, std::make_shared<json>(std::move(body)), "ADDED");
  if (is_crd(type)) register_crd(*stored);
  return {201, for_version(*stored, type), warnings};
}

}  // namespace k8s4r::kube_sim
