// DELETE and deletecollection: preconditions, dry runs, finalizers holding
// an object with a deletionTimestamp, propagation policies, and what goes
// with a deleted object (a CRD's resources, a namespace's contents).
#include "k8s4r/kube_sim/store.h"

#include "store_util.h"

namespace k8s4r::kube_sim {

using nlohmann::json;

ApiResponse Store::remove(const Target& target, const std::string& name, const json& delete_options) {
  std::lock_guard lock(mutex_);
  Resource* resource = resource_of(target.type);
  if (resource == nullptr) return not_found_path(target.type.key());
  return delete_locked(*resource, target.type, target.type.namespaced ? target.namespace_ : "", name, delete_options);
}

ApiResponse Store::delete_locked(Resource& resource, const ResourceType& type, const std::string& namespace_,
                                 const std::string& name, const json& delete_options) {
  const std::string key = object_key(namespace_, name);
  auto found = resource.objects.find(key);
  if (found == resource.objects.end()) return not_found(subject(type, name));
  const json& existing = *found->second;
  const json& metadata = metadata_of(existing);
  if (delete_options.is_object() && delete_options.contains("preconditions") &&
      delete_options["preconditions"].is_object()) {
    const json& preconditions = delete_options["preconditions"];
    const std::string uid = string_at(preconditions, "uid");
    if (!uid.empty() && uid != string_at(metadata, "uid")) {
      return conflict(subject(type, name), "Precondition failed: UID in precondition: " + uid +
                                               ", UID in object meta: " + string_at(metadata, "uid"));
    }
    const std::string version = string_at(preconditions, "resourceVersion");
    if (!version.empty() && version != string_at(metadata, "resourceVersion")) {
      return conflict(subject(type, name),
                      "Precondition failed: ResourceVersion in precondition: " + version +
                          ", ResourceVersion in object meta: " + string_at(metadata, "resourceVersion"));
    }
  }
  const bool dry_run =
      delete_options.is_object() && delete_options.contains("dryRun") && !delete_options["dryRun"].empty();
  if (dry_run) return {200, for_version(existing, type), {}};

  json updated = existing;
  std::string policy = delete_options.is_object() ? delete_options.value("propagationPolicy", "") : "";
  if (policy.empty() && delete_options.is_object() && delete_options.contains("orphanDependents") &&
      delete_options["orphanDependents"] == true) {
    policy = "Orphan";
  }
  const std::string uid = string_at(metadata, "uid");
  if (policy == "Orphan") {
    // Dependents lose their owner reference and stay.
    for (auto& [resource_name, other] : resources_) {
      for (auto& [other_key, object] : other.objects) {
        const json& other_metadata = metadata_of(*object);
        if (!other_metadata.contains("ownerReferences")) continue;
        json references = json::array();
        for (const json& reference : other_metadata["ownerReferences"]) {
          if (string_at(reference, "uid") != uid) references.push_back(reference);
        }
        if (references.size() == other_metadata["ownerReferences"].size()) continue;
        auto changed = std::make_shared<json>(*object);
        if (references.empty()) {
          (*changed)["metadata"].erase("ownerReferences");
        } else {
          (*changed)["metadata"]["ownerReferences"] = references;
        }
        commit(other, other_key, changed, "MODIFIED");
      }
    }
  } else if (policy == "Foreground") {
    // Dependents are deleted first. Unlike kube-apiserver, the owner does not
    // wait (with a foregroundDeletion finalizer) for dependents that finalizers
    // still hold; see docs/kube-sim.md.
    collect_garbage(uid);
  }
  if (has_finalizers(existing)) {
    if (!metadata.contains("deletionTimestamp")) {
      updated["metadata"]["deletionTimestamp"] = format_rfc3339(clock_());
      updated["metadata"]["deletionGracePeriodSeconds"] = 0;
      auto stored = commit(resource, key, std::make_shared<json>(std::move(updated)), "MODIFIED");
      return {200, for_version(*stored, type), {}};
    }
    return {200, for_version(existing, type), {}};
  }
  auto last = found->second;
  finish_deletion(resource, key);
  return {200, for_version(*last, type), {}};
}

void Store::finish_deletion(Resource& resource, const std::string& key) {
  const json object = *resource.objects.at(key);
  const std::string kind = object.value("kind", "");
  commit(resource, key, nullptr, "DELETED");
  const json& metadata = metadata_of(object);
  if (kind == "CustomResourceDefinition") unregister_crd(object);
  if (kind == "Namespace") {
    const std::string prefix = string_at(metadata, "name") + "/";
    for (auto& [resource_name, other] : resources_) {
      std::vector<std::string> keys;
      for (const auto& [other_key, other_object] : other.objects) {
        if (other_key.compare(0, prefix.size(), prefix) == 0) keys.push_back(other_key);
      }
      for (const std::string& other_key : keys) commit(other, other_key, nullptr, "DELETED");
    }
  }
  collect_garbage(string_at(metadata, "uid"));
}

// What kube-controller-manager's garbage collector does, at once: an object

ApiResponse Store::remove_collection(const Target& target, const ListOptions& list_options,
                                     const json& delete_options) {
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
    if (removed.ok()) deleted.push_back(removed.body);
  }
  listed.body["items"] = deleted;
  listed.body["metadata"]["resourceVersion"] = std::to_string(resource_version_);
  return listed;
}

}  // namespace k8s4r::kube_sim
