// What kube-controller-manager's garbage collector does with owner
// references.
#include "k8s4r/kube_sim/store.h"

#include "store_util.h"

#include <set>

namespace k8s4r::kube_sim {

using nlohmann::json;

void Store::collect_garbage(const std::string& owner_uid) {
  if (owner_uid.empty()) return;
  std::set<std::string> live_uids;
  for (const auto& [name, resource] : resources_) {
    for (const auto& [key, object] : resource.objects) live_uids.insert(string_at(metadata_of(*object), "uid"));
  }
  live_uids.erase(owner_uid);
  for (auto& [resource_name, resource] : resources_) {
    std::vector<std::pair<std::string, std::string>> orphans;  // namespace, name
    for (const auto& [key, object] : resource.objects) {
      const json& metadata = metadata_of(*object);
      if (!metadata.contains("ownerReferences") || !metadata["ownerReferences"].is_array()) continue;
      bool owned_by_it = false, any_owner_alive = false;
      for (const json& reference : metadata["ownerReferences"]) {
        const std::string uid = string_at(reference, "uid");
        owned_by_it = owned_by_it || uid == owner_uid;
        any_owner_alive = any_owner_alive || live_uids.count(uid);
      }
      if (owned_by_it && !any_owner_alive)
        orphans.emplace_back(string_at(metadata, "namespace"), string_at(metadata, "name"));
    }
    if (orphans.empty() || resource.versions.empty()) continue;
    const ResourceType type = storage_type(resource);
    for (const auto& [namespace_, name] : orphans) {
      if (resource.objects.count(object_key(namespace_, name)))
        delete_locked(resource, type, namespace_, name, json::object());
    }
  }
}

}  // namespace k8s4r::kube_sim
