// DELETE and deletecollection as kube-apiserver's generic registry does them:
// DeleteOptions validation, preconditions, dry runs, the garbage collector's
// finalizers (orphan, foregroundDeletion) from the propagation policy,
// finalizers holding an object with a deletionTimestamp, namespaces that
// terminate instead of vanishing, and what goes with a deleted object.
#include "k8s4r/kube_sim/store.h"

#include "store_util.h"

#include <algorithm>

namespace k8s4r::kube_sim {

using nlohmann::json;

namespace {

const std::vector<std::string> kImmortalNamespaces = {"default", "kube-system", "kube-public"};

// ValidateDeleteOptions: 422 DeleteOptions.meta.k8s.io "" is invalid.
std::optional<ApiResponse> validate_delete_options(const json& options) {
  std::vector<FieldCause> causes;
  const bool has_policy = options.contains("propagationPolicy") && !options["propagationPolicy"].is_null();
  const std::string policy = has_policy && options["propagationPolicy"].is_string()
                                 ? options["propagationPolicy"].get<std::string>()
                                 : (has_policy ? options["propagationPolicy"].dump() : "");
  if (has_policy && options.contains("orphanDependents") && !options["orphanDependents"].is_null()) {
    causes.push_back({"FieldValueInvalid",
                      "Invalid value: \"" + policy + "\": orphanDependents and deletionPropagation cannot be both set",
                      "propagationPolicy"});
  }
  if (has_policy && policy != "Foreground" && policy != "Background" && policy != "Orphan") {
    causes.push_back(
        {"FieldValueNotSupported",
         "Unsupported value: \"" + policy + "\": supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\"",
         "propagationPolicy"});
  }
  if (options.contains("dryRun") && options["dryRun"].is_array()) {
    for (const json& value : options["dryRun"]) {
      if (value != "All") {
        causes.push_back({"FieldValueNotSupported",
                          "Unsupported value: []string{\"" + (value.is_string() ? value.get<std::string>() : "") +
                              "\"}: supported values: \"All\"",
                          "dryRun"});
        break;
      }
    }
  }
  if (causes.empty()) return std::nullopt;
  ApiResponse response = invalid({"", "", ""}, "DeleteOptions.meta.k8s.io", causes);
  response.body["details"]["group"] = "meta.k8s.io";
  return response;
}

std::optional<bool> flag(const json& options, const char* key) {
  if (!options.contains(key) || !options[key].is_boolean()) return std::nullopt;
  return options[key].get<bool>();
}

// deletionFinalizersForGarbageCollection: the object's finalizers without the
// garbage collector's two, then "orphan" and "foregroundDeletion" as the
// options (or, when they say nothing, the finalizers already there) ask.
json finalizers_for_deletion(const json& existing_finalizers, const json& options, bool garbage_collected) {
  const std::string policy = string_at(options, "propagationPolicy");
  const std::optional<bool> orphan_dependents = flag(options, "orphanDependents");
  const auto had = [&](const char* name) {
    return std::find(existing_finalizers.begin(), existing_finalizers.end(), name) != existing_finalizers.end();
  };
  json finalizers = json::array();
  for (const json& finalizer : existing_finalizers) {
    if (finalizer != "orphan" && finalizer != "foregroundDeletion") finalizers.push_back(finalizer);
  }
  if (!garbage_collected) return existing_finalizers;
  bool orphan = false, foreground = false;
  if (orphan_dependents) {
    orphan = *orphan_dependents;
  } else if (!policy.empty()) {
    orphan = policy == "Orphan";
    foreground = policy == "Foreground";
  } else {
    orphan = had("orphan");
    foreground = !orphan && had("foregroundDeletion");
  }
  if (orphan) finalizers.push_back("orphan");
  if (foreground) finalizers.push_back("foregroundDeletion");
  return finalizers;
}

// Kinds whose DELETE answers with the deleted object; the others answer
// with a Success Status (ReturnDeletedObject in kube-apiserver's stores).
bool returns_deleted_object(const ResourceType& type) {
  return type.group.empty() && (type.plural == "namespaces" || type.plural == "serviceaccounts");
}

}  // namespace

ApiResponse Store::remove(const Target& target, const std::string& name, const json& delete_options) {
  if (auto error = validate_delete_options(delete_options)) return *error;
  std::lock_guard lock(mutex_);
  Resource* resource = resource_of(target.type);
  if (resource == nullptr) return not_found_path(target.type.key());
  ApiResponse response =
      delete_locked(*resource, target.type, target.type.namespaced ? target.namespace_ : "", name, delete_options);
  run_controllers_locked();
  return response;
}

ApiResponse Store::delete_locked(Resource& resource, const ResourceType& type, const std::string& namespace_,
                                 const std::string& name, const json& delete_options) {
  const std::string key = object_key(namespace_, name);
  auto found = resource.objects.find(key);
  if (found == resource.objects.end()) return not_found(subject(type, name));
  const std::shared_ptr<const json> existing = found->second;
  const json& metadata = metadata_of(*existing);
  if (delete_options.contains("preconditions") && delete_options["preconditions"].is_object()) {
    const json& preconditions = delete_options["preconditions"];
    const std::string uid = string_at(preconditions, "uid");
    if (!uid.empty() && uid != string_at(metadata, "uid")) {
      return conflict(subject(type, name), "the UID in the precondition (" + uid +
                                               ") does not match the UID in record (" + string_at(metadata, "uid") +
                                               "). The object might have been deleted and then recreated");
    }
    const std::string version = string_at(preconditions, "resourceVersion");
    if (!version.empty() && version != string_at(metadata, "resourceVersion")) {
      return conflict(subject(type, name), "the ResourceVersion in the precondition (" + version +
                                               ") does not match the ResourceVersion in record (" +
                                               string_at(metadata, "resourceVersion") +
                                               "). The object might have been modified");
    }
  }
  const bool namespace_type = type.group.empty() && type.plural == "namespaces";
  if (namespace_type &&
      std::find(kImmortalNamespaces.begin(), kImmortalNamespaces.end(), name) != kImmortalNamespaces.end()) {
    // The NamespaceLifecycle admission plugin.
    return {403,
            status_body(403, "Forbidden", "namespaces \"" + name + "\" is forbidden: this namespace may not be deleted",
                        json{{"name", name}, {"kind", "namespaces"}}),
            {}};
  }
  const bool dry_run = delete_options.contains("dryRun") && !delete_options["dryRun"].empty();
  if (dry_run) return {200, for_version(*existing, type), {}};

  const json old_finalizers = list_at(metadata, "finalizers");
  json updated = *existing;
  if (namespace_type) {
    // A namespace terminates: the namespace controller empties it, then
    // removes the "kubernetes" finalizer from spec.finalizers.
    if (!metadata.contains("deletionTimestamp")) {
      updated["metadata"]["deletionTimestamp"] = format_rfc3339(clock_());
      updated["status"]["phase"] = "Terminating";
      const std::string policy = string_at(delete_options, "propagationPolicy");
      json finalizers = json::array();
      for (const json& finalizer : old_finalizers) {
        if (finalizer != "orphan" && finalizer != "foregroundDeletion") finalizers.push_back(finalizer);
      }
      if (policy == "Orphan" || (policy.empty() && has_finalizer(*existing, "orphan"))) finalizers.push_back("orphan");
      if (policy == "Foreground" || (policy.empty() && has_finalizer(*existing, "foregroundDeletion")))
        finalizers.push_back("foregroundDeletion");
      if (finalizers.empty()) {
        updated["metadata"].erase("finalizers");
      } else {
        updated["metadata"]["finalizers"] = finalizers;
      }
      auto stored = commit(resource, key, std::make_shared<json>(std::move(updated)), "MODIFIED");
      return {200, for_version(*stored, type), {}};
    }
    if (holds_namespace_open(*existing)) return {200, for_version(*existing, type), {}};
  }

  // Core Events are not garbage-collected: their finalizers stay as they are.
  const bool garbage_collected = !(type.storage_key() == "/events");
  const json finalizers = finalizers_for_deletion(old_finalizers, delete_options, garbage_collected);
  if (!finalizers.empty()) {
    updated["metadata"]["finalizers"] = finalizers;
    if (!metadata.contains("deletionTimestamp")) {
      updated["metadata"]["deletionTimestamp"] = format_rfc3339(clock_());
      updated["metadata"]["deletionGracePeriodSeconds"] = 0;
      if (metadata.contains("generation") && metadata["generation"].is_number_integer() &&
          metadata["generation"].get<std::int64_t>() > 0)
        updated["metadata"]["generation"] = metadata["generation"].get<std::int64_t>() + 1;
    }
    std::shared_ptr<const json> stored = existing;
    if (updated != *existing) stored = commit(resource, key, std::make_shared<json>(std::move(updated)), "MODIFIED");
    // 202 only for the deprecated orphanDependents=false, as kube-apiserver.
    const int code = flag(delete_options, "orphanDependents") == false ? 202 : 200;
    return {code, for_version(*stored, type), {}};
  }
  finish_deletion(resource, key);
  if (returns_deleted_object(type)) return {200, for_version(*existing, type), {}};
  json details = {{"name", name}, {"kind", type.plural}, {"uid", string_at(metadata, "uid")}};
  if (!type.group.empty()) details["group"] = type.group;
  return {200,
          {{"kind", "Status"},
           {"apiVersion", "v1"},
           {"metadata", json::object()},
           {"status", "Success"},
           {"details", details}},
          {}};
}

void Store::finish_deletion(Resource& resource, const std::string& key) {
  const json object = *resource.objects.at(key);
  const bool crd = is_crd(storage_type(resource));
  commit(resource, key, nullptr, "DELETED");
  if (crd) unregister_crd(object);
}

void Store::remove_finalizer(Resource& resource, const std::string& key, const std::string& finalizer) {
  auto found = resource.objects.find(key);
  if (found == resource.objects.end() || !has_finalizer(*found->second, finalizer)) return;
  auto updated = std::make_shared<json>(*found->second);
  json remaining = json::array();
  for (const json& item : (*updated)["metadata"]["finalizers"]) {
    if (item != finalizer) remaining.push_back(item);
  }
  if (remaining.empty()) {
    (*updated)["metadata"].erase("finalizers");
  } else {
    (*updated)["metadata"]["finalizers"] = remaining;
  }
  auto stored = commit(resource, key, updated, "MODIFIED");
  if (metadata_of(*stored).contains("deletionTimestamp") && !has_finalizers(*stored) && !holds_namespace_open(*stored))
    finish_deletion(resource, key);
}

ApiResponse Store::remove_collection(const Target& target, const ListOptions& list_options,
                                     const json& delete_options) {
  if (auto error = validate_delete_options(delete_options)) return *error;
  ApiResponse listed = list(target, list_options);
  if (!listed.ok()) return listed;
  json deleted = json::array();
  std::lock_guard lock(mutex_);
  Resource* resource = resource_of(target.type);
  if (resource == nullptr) return not_found_path(target.type.key());
  for (const json& item : listed.body["items"]) {
    const json& metadata = metadata_of(item);
    ApiResponse removed = delete_locked(*resource, target.type, string_at(metadata, "namespace"),
                                        string_at(metadata, "name"), delete_options);
    if (removed.ok()) deleted.push_back(item);
  }
  run_controllers_locked();
  listed.body["items"] = deleted;
  listed.body["metadata"]["resourceVersion"] = std::to_string(resource_version_);
  return listed;
}

}  // namespace k8s4r::kube_sim
