// What kube-controller-manager's garbage collector does with owner
// references, run synchronously after each write (run_controllers_locked):
// - a dependent whose owners are all gone (no object with that uid, or one
//   of another name, kind or namespace) is deleted, with the policy its own
//   finalizers ask for (background by default);
// - with some owners gone and others present, only the dangling references
//   are removed;
// - an owner deleted in the foreground (finalizer foregroundDeletion) gets
//   its dependents deleted, and keeps its finalizer until every dependent
//   whose reference has blockOwnerDeletion: true is really gone (a dependent
//   held by its own finalizers holds the owner too);
// - an owner deleted with orphan has its references removed from every
//   dependent, then its finalizer;
// - a cluster-scoped dependent never counts a namespaced owner, and an owner
//   of an unknown kind is never judged absent.
#include "k8s4r/kube_sim/store.h"

#include "store_util.h"

namespace k8s4r::kube_sim {

using nlohmann::json;

namespace {

bool blocks_owner(const json& dependent, const std::string& owner_uid) {
  for (const json& reference : list_at(metadata_of(dependent), "ownerReferences")) {
    if (reference.is_object() && string_at(reference, "uid") == owner_uid && reference.contains("blockOwnerDeletion") &&
        reference["blockOwnerDeletion"] == true)
      return true;
  }
  return false;
}

}  // namespace

const json* Store::lookup(const ObjectRef& ref) const {
  auto resource = resources_.find(ref.resource);
  if (resource == resources_.end()) return nullptr;
  auto object = resource->second.objects.find(ref.key);
  return object == resource->second.objects.end() ? nullptr : object->second.get();
}

// Keeps the uid and owner indexes in step with a change, and queues what the
// controllers must look at because of it.
void Store::index_and_queue(Resource& resource, const std::string& key, const json* before, const json* after) {
  const ObjectRef self{resource_key(storage_type(resource)), key};
  const auto owner_uids = [](const json* object) {
    std::set<std::string> uids;
    if (object == nullptr) return uids;
    for (const json& reference : list_at(metadata_of(*object), "ownerReferences")) {
      if (reference.is_object() && reference.contains("uid") && reference["uid"].is_string())
        uids.insert(reference["uid"].get<std::string>());
    }
    return uids;
  };
  const std::set<std::string> old_owners = owner_uids(before), new_owners = owner_uids(after);
  for (const std::string& uid : old_owners) {
    if (new_owners.count(uid)) continue;
    auto it = dependents_.find(uid);
    if (it == dependents_.end()) continue;
    it->second.erase(self);
    if (it->second.empty()) dependents_.erase(it);
  }
  for (const std::string& uid : new_owners) dependents_[uid].insert(self);

  const std::string namespace_ = string_at(metadata_of(after ? *after : *before), "namespace");
  if (after == nullptr) {
    const std::string uid = string_at(metadata_of(*before), "uid");
    uids_.erase(uid);
    // Its dependents may now be garbage, and owners waiting for it may go.
    if (auto it = dependents_.find(uid); it != dependents_.end()) {
      for (const ObjectRef& dependent : it->second) garbage_queue_.insert(dependent);
    }
    for (const std::string& owner : old_owners) {
      if (auto found = uids_.find(owner); found != uids_.end()) garbage_queue_.insert(found->second);
    }
  } else {
    uids_[string_at(metadata_of(*after), "uid")] = self;
    if (before == nullptr || old_owners != new_owners) {
      if (!new_owners.empty()) garbage_queue_.insert(self);
    }
    if (metadata_of(*after).contains("deletionTimestamp") &&
        (has_finalizer(*after, "orphan") || has_finalizer(*after, "foregroundDeletion")))
      garbage_queue_.insert(self);
    if (after->value("kind", "") == "Namespace" && metadata_of(*after).contains("deletionTimestamp") &&
        (before == nullptr || !metadata_of(*before).contains("deletionTimestamp")))
      namespaces_to_sync_.insert(string_at(metadata_of(*after), "name"));
  }
  // Whatever changes inside a terminating namespace can change its conditions.
  if (!namespace_.empty()) {
    const json* ns = lookup({"/namespaces", object_key("", namespace_)});
    if (ns != nullptr && metadata_of(*ns).contains("deletionTimestamp")) namespaces_to_sync_.insert(namespace_);
  }
}

void Store::run_controllers_locked() {
  // Each step settles one object; the bound only guards against a bug
  // turning this into an endless loop under the lock.
  for (std::size_t steps = 0; steps < 1'000'000; ++steps) {
    if (!garbage_queue_.empty()) {
      const ObjectRef item = *garbage_queue_.begin();
      garbage_queue_.erase(garbage_queue_.begin());
      collect_garbage(item);
    } else if (!namespaces_to_sync_.empty()) {
      const std::string name = *namespaces_to_sync_.begin();
      namespaces_to_sync_.erase(namespaces_to_sync_.begin());
      sync_namespace(name);
    } else {
      return;
    }
  }
}

void Store::collect_garbage(const ObjectRef& item) {
  auto resource_it = resources_.find(item.resource);
  if (resource_it == resources_.end()) return;
  Resource& resource = resource_it->second;
  auto found = resource.objects.find(item.key);
  if (found == resource.objects.end()) return;
  const std::shared_ptr<const json> object = found->second;
  const json& metadata = metadata_of(*object);
  const std::string uid = string_at(metadata, "uid");
  const std::string namespace_ = string_at(metadata, "namespace");
  const ResourceType type = storage_type(resource);

  const auto dependents = [&] {
    auto it = dependents_.find(uid);
    return it == dependents_.end() ? std::set<ObjectRef>() : it->second;
  };
  if (metadata.contains("deletionTimestamp")) {
    if (has_finalizer(*object, "orphan")) {
      for (const ObjectRef& ref : dependents()) {
        const json* dependent = lookup(ref);
        if (dependent == nullptr) continue;
        auto changed = std::make_shared<json>(*dependent);
        json kept = json::array();
        for (const json& reference : (*changed)["metadata"]["ownerReferences"]) {
          if (!reference.is_object() || string_at(reference, "uid") != uid) kept.push_back(reference);
        }
        if (kept.empty()) {
          (*changed)["metadata"].erase("ownerReferences");
        } else {
          (*changed)["metadata"]["ownerReferences"] = kept;
        }
        commit(resources_.at(ref.resource), ref.key, changed, "MODIFIED");
      }
      remove_finalizer(resource, item.key, "orphan");
    } else if (has_finalizer(*object, "foregroundDeletion")) {
      bool blocked = false;
      for (const ObjectRef& ref : dependents()) {
        const json* dependent = lookup(ref);
        if (dependent == nullptr) continue;
        if (!metadata_of(*dependent).contains("deletionTimestamp")) {
          // A dependent with dependents of its own goes in the foreground
          // too, so the cascade reaches the leaves first.
          const std::string dependent_uid = string_at(metadata_of(*dependent), "uid");
          const bool has_own = dependents_.count(dependent_uid) > 0;
          std::string policy = has_own ? "Foreground" : "Background";
          if (has_finalizer(*dependent, "orphan")) policy = "Orphan";
          Resource& dependent_resource = resources_.at(ref.resource);
          const std::string dependent_namespace = string_at(metadata_of(*dependent), "namespace");
          const std::string dependent_name = string_at(metadata_of(*dependent), "name");
          delete_locked(dependent_resource, storage_type(dependent_resource), dependent_namespace, dependent_name,
                        json{{"propagationPolicy", policy}});
        }
        const json* still = lookup(ref);
        if (still != nullptr && blocks_owner(*still, uid)) blocked = true;
      }
      // Deleting a dependent can take the owner's own resource with it (a CRD
      // owned by one of its objects): look it up again.
      auto still = resources_.find(item.resource);
      if (!blocked && still != resources_.end()) remove_finalizer(still->second, item.key, "foregroundDeletion");
    }
    return;  // otherwise an object being deleted is left to its finalizers
  }

  const json references = list_at(metadata, "ownerReferences");
  if (references.empty()) return;
  json solid = json::array(), kept = json::array();
  bool waiting = false, dangling = false;
  for (const json& reference : references) {
    if (!reference.is_object()) continue;
    const std::string api_version = string_at(reference, "apiVersion");
    const std::string group =
        api_version.find('/') == std::string::npos ? "" : api_version.substr(0, api_version.find('/'));
    // The owner's kind decides where it may live.
    std::optional<ResourceType> owner_type;
    for (const auto& [key, candidate] : resources_) {
      for (const auto& [version, served] : candidate.versions) {
        if (served.group == group && served.kind == string_at(reference, "kind") && !served.create_only)
          owner_type = served;
      }
    }
    if (!owner_type) {
      kept.push_back(reference);  // not judged: the real collector cannot map it either
      solid.push_back(reference);
      continue;
    }
    if (owner_type->namespaced && !type.namespaced) return;  // never collected
    const json* owner = nullptr;
    if (auto at = uids_.find(string_at(reference, "uid")); at != uids_.end()) owner = lookup(at->second);
    const bool present = owner != nullptr && owner->value("kind", "") == owner_type->kind &&
                         string_at(metadata_of(*owner), "name") == string_at(reference, "name") &&
                         (!owner_type->namespaced || string_at(metadata_of(*owner), "namespace") == namespace_);
    if (!present) {
      dangling = true;
    } else if (metadata_of(*owner).contains("deletionTimestamp") && has_finalizer(*owner, "foregroundDeletion")) {
      waiting = true;
    } else {
      solid.push_back(reference);
      kept.push_back(reference);
    }
  }
  if (!solid.empty()) {
    if (dangling || waiting) {
      auto changed = std::make_shared<json>(*object);
      (*changed)["metadata"]["ownerReferences"] = kept;
      commit(resource, item.key, changed, "MODIFIED");
    }
    return;
  }
  std::string policy = "Background";
  if (has_finalizer(*object, "orphan")) policy = "Orphan";
  if (has_finalizer(*object, "foregroundDeletion") || (waiting && dependents_.count(uid))) policy = "Foreground";
  delete_locked(resource, type, namespace_, string_at(metadata, "name"), json{{"propagationPolicy", policy}});
}

}  // namespace k8s4r::kube_sim
