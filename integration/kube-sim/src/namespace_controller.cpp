// What kube-controller-manager's namespace controller does with a namespace
// being deleted, run synchronously after each write: every object in it is
// deleted (in the background); the status conditions say what remains and
// which finalizers hold it; once nothing remains, "kubernetes" leaves
// spec.finalizers and the namespace goes. Also PUT .../finalize.
#include "k8s4r/kube_sim/store.h"

#include "store_util.h"

#include <map>

namespace k8s4r::kube_sim {

using nlohmann::json;

namespace {

json condition(const char* type, bool failing, const char* reason, const std::string& message) {
  return {{"type", type}, {"status", failing ? "True" : "False"}, {"reason", reason}, {"message", message}};
}

std::string joined(const std::map<std::string, std::size_t>& counts, const char* format_between) {
  std::string text;
  for (const auto& [name, count] : counts) {
    text += (text.empty() ? "" : ", ") + name + format_between + std::to_string(count) + " resource instances";
  }
  return text;
}

}  // namespace

void Store::sync_namespace(const std::string& name) {
  Resource& namespaces = resources_.at("/namespaces");
  const std::string ns_key = object_key("", name);
  auto found = namespaces.objects.find(ns_key);
  if (found == namespaces.objects.end() || !metadata_of(*found->second).contains("deletionTimestamp")) return;
  if (!holds_namespace_open(*found->second)) return;

  // Delete the contents, then count what finalizers still hold.
  std::map<std::string, std::size_t> remaining;   // "tasks.robot.k8s4r.io" -> objects
  std::map<std::string, std::size_t> finalizers;  // finalizer -> objects carrying it
  const std::string prefix = name + "/";
  for (auto& [resource_name, resource] : resources_) {
    if (resource.versions.empty()) continue;
    const ResourceType type = storage_type(resource);
    if (!type.namespaced || type.create_only) continue;
    std::vector<std::string> keys;
    for (auto it = resource.objects.lower_bound(prefix);
         it != resource.objects.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
      keys.push_back(it->first);
    }
    for (const std::string& key : keys) {
      auto object = resource.objects.find(key);
      if (object == resource.objects.end()) continue;
      if (!metadata_of(*object->second).contains("deletionTimestamp")) {
        delete_locked(resource, type, name, string_at(metadata_of(*object->second), "name"),
                      json{{"propagationPolicy", "Background"}});
      }
    }
    for (auto it = resource.objects.lower_bound(prefix);
         it != resource.objects.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
      ++remaining[type.plural + "." + type.group];
      for (const json& finalizer : list_at(metadata_of(*it->second), "finalizers")) {
        if (finalizer.is_string()) ++finalizers[finalizer.get<std::string>()];
      }
    }
  }

  found = namespaces.objects.find(ns_key);
  if (found == namespaces.objects.end()) return;
  json conditions = json::array(
      {condition("NamespaceDeletionDiscoveryFailure", false, "ResourcesDiscovered",
                 "All resources successfully discovered"),
       condition("NamespaceDeletionGroupVersionParsingFailure", false, "ParsedGroupVersions",
                 "All legacy kube types successfully parsed"),
       condition("NamespaceDeletionContentFailure", false, "ContentDeleted",
                 "All content successfully deleted, may be waiting on finalization"),
       remaining.empty()
           ? condition("NamespaceContentRemaining", false, "ContentRemoved", "All content successfully removed")
           : condition("NamespaceContentRemaining", true, "SomeResourcesRemain",
                       "Some resources are remaining: " + joined(remaining, " has ")),
       finalizers.empty()
           ? condition("NamespaceFinalizersRemaining", false, "ContentHasNoFinalizers",
                       "All content-preserving finalizers finished")
           : condition("NamespaceFinalizersRemaining", true, "SomeFinalizersRemain",
                       "Some content in the namespace has finalizers remaining: " + joined(finalizers, " in "))});
  // lastTransitionTime moves only when a condition's status flips.
  const json& status = found->second->contains("status") ? (*found->second)["status"] : json();
  const json old = status.is_object() && status.contains("conditions") && status["conditions"].is_array()
                       ? status["conditions"]
                       : json::array();
  const std::string now = format_rfc3339(clock_());
  bool changed = old.size() != conditions.size();
  for (json& item : conditions) {
    item["lastTransitionTime"] = now;
    for (const json& before : old) {
      if (string_at(before, "type") != item["type"]) continue;
      if (string_at(before, "status") == item["status"])
        item["lastTransitionTime"] =
            string_at(before, "lastTransitionTime").empty() ? now : string_at(before, "lastTransitionTime");
      if (string_at(before, "reason") != item["reason"] || string_at(before, "message") != item["message"] ||
          string_at(before, "status") != item["status"])
        changed = true;
    }
  }
  if (changed) {
    auto updated = std::make_shared<json>(*found->second);
    (*updated)["status"]["conditions"] = conditions;
    commit(namespaces, ns_key, updated, "MODIFIED");
  }
  if (!remaining.empty()) return;
  // finalizeNamespace: "kubernetes" leaves spec.finalizers.
  auto finalized = std::make_shared<json>(*namespaces.objects.at(ns_key));
  json kept = json::array();
  for (const json& finalizer : (*finalized)["spec"]["finalizers"]) {
    if (finalizer != "kubernetes") kept.push_back(finalizer);
  }
  (*finalized)["spec"]["finalizers"] = kept;
  auto stored = commit(namespaces, ns_key, finalized, "MODIFIED");
  if (!holds_namespace_open(*stored) && !has_finalizers(*stored)) finish_deletion(namespaces, ns_key);
}

ApiResponse Store::finalize_namespace(const std::string& name, json body) {
  std::lock_guard lock(mutex_);
  Resource& namespaces = resources_.at("/namespaces");
  const std::string key = object_key("", name);
  auto found = namespaces.objects.find(key);
  if (found == namespaces.objects.end()) return not_found({"", "namespaces", name});
  if (!body.is_object()) return bad_request("the body of the request must be a JSON object");
  const std::string body_name = string_at(metadata_of(body), "name");
  if (!body_name.empty() && body_name != name)
    return bad_request("the name of the object (" + body_name + ") does not match the name on the URL (" + name + ")");
  json finalizers = body.contains("spec") && body["spec"].is_object() && body["spec"].contains("finalizers")
                        ? body["spec"]["finalizers"]
                        : json::array();
  if (!finalizers.is_array()) finalizers = json::array();
  std::vector<FieldCause> causes;
  for (std::size_t i = 0; i < finalizers.size(); ++i) {
    const std::string finalizer = finalizers[i].is_string() ? finalizers[i].get<std::string>() : "";
    if (finalizer.find('/') == std::string::npos && finalizer != "kubernetes") {
      causes.push_back(
          {"FieldValueInvalid",
           "Invalid value: \"" + finalizer + "\": name is neither a standard finalizer name nor is it fully qualified",
           "spec.finalizers[" + std::to_string(i) + "]"});
    }
  }
  if (!causes.empty()) return invalid({"", "namespaces", name}, "Namespace", causes);
  auto updated = std::make_shared<json>(*found->second);
  (*updated)["spec"]["finalizers"] = finalizers;
  const ResourceType type = storage_type(namespaces);
  std::shared_ptr<const json> stored = found->second;
  if (*updated != *found->second) stored = commit(namespaces, key, updated, "MODIFIED");
  if (metadata_of(*stored).contains("deletionTimestamp") && !holds_namespace_open(*stored) && !has_finalizers(*stored))
    finish_deletion(namespaces, key);
  run_controllers_locked();
  return {200, for_version(*stored, type), {}};
}

}  // namespace k8s4r::kube_sim
