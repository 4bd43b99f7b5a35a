// Serving the types a CustomResourceDefinition defines, and withdrawing
// them (with their objects and watches) when it goes.
#include "k8s4r/kube_sim/store.h"

#include "store_util.h"

namespace k8s4r::kube_sim {

using nlohmann::json;

void Store::register_crd(const json& crd) {
  std::vector<CrdProblem> problems;
  std::vector<ResourceType> types = types_from_crd(crd, problems);
  if (types.empty()) return;
  Resource& resource = resources_[resource_key(types.front())];
  // A built-in resource stays the server's own, whatever a CRD says.
  if (!resource.versions.empty() && storage_type(resource).builtin) return;
  resource.versions.clear();
  for (const json& version : crd["spec"]["versions"]) {
    if (version.is_object() && version.contains("storage") && version["storage"] == true)
      resource.storage_version = types.front().group + "/" + string_at(version, "name");
  }
  for (ResourceType& type : types) resource.versions[type.api_version()] = std::move(type);
}

void Store::unregister_crd(const json& crd) {
  std::vector<CrdProblem> problems;
  std::vector<ResourceType> types = types_from_crd(crd, problems);
  if (types.empty()) return;
  auto it = resources_.find(resource_key(types.front()));
  if (it == resources_.end() || it->second.versions.empty() || storage_type(it->second).builtin) return;
  std::vector<std::string> keys;
  for (const auto& [key, object] : it->second.objects) keys.push_back(key);
  for (const std::string& key : keys) commit(it->second, key, nullptr, "DELETED");
  for (auto& watcher : it->second.watchers) watcher->close();
  resources_.erase(it);
}

}  // namespace k8s4r::kube_sim
