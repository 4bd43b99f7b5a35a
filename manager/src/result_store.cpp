// The result cache's store (docs/caching.md): a Task dispatched with a cache
// key (status.cacheKey, written with its dispatch) that completed with exit
// code 0 becomes a TaskCacheEntry named after its key, if its key, computed
// again from its spec and its robot now, is still that key; a run that ended
// at least kRefreshAfter after the stored one replaces it, never the reverse.
// Every kCacheGarbageInterval, entries older than cache-entry-max-age, and
// the oldest beyond cache-max-entries in a namespace, are deleted.
//
// The store is the manager's alone (its Role; no robot or bridge may write
// an entry), and an entry is only ever made from a Task the cache shows
// completed: a result is never cached from a message.
#include "k8s4r/manager/manager.h"

#include "k8s4r/common/duration.h"
#include "k8s4r/crd/resources.h"
#include "k8s4r/manager/result_cache.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace k8s4r::manager {

using nlohmann::json;

namespace {

constexpr std::chrono::minutes kRefreshAfter{1};
// Only a run that has just ended is stored: a manager that takes the lead
// with completions queued long ago must not bring back an entry deleted
// meanwhile (by hand, or as too old).
constexpr std::chrono::minutes kStoreWithin{10};

// An entry's completedAt; the epoch when it has none (so it sorts oldest).
Timestamp completed_at(const json& entry) { return cache_entry_completed_at(entry).value_or(Timestamp{}); }

}  // namespace

Manager::Outcome Manager::reconcile_cache(const std::string& key) {
  if (key == kCacheGarbageKey) return collect_cache_garbage();
  Outcome outcome;
  const ObjectName object_name = split_key(key);
  const std::string &ns = object_name.namespace_, &name = object_name.name;
  const kube::ObjectPtr task = tasks_->get(ns, name);
  if (!task) return outcome;
  const std::string recorded = crd::string_at(*task, {"status", "cacheKey"});
  auto entry = cache_entry_for(*task, recorded, now());
  if (!entry) {
    spdlog::debug("task {}: its run is not stored: {}", key, entry.error().to_string());
    return outcome;
  }
  if (elapsed(completed_at(entry.value()), now()) > kStoreWithin) {
    spdlog::debug("task {}: its run ended more than {} ago: not stored", key, format_go_duration(kStoreWithin));
    return outcome;
  }
  // What the recorded key says is what the Task is: not stored if its spec
  // or its robot's class changed since the dispatch.
  const kube::ObjectPtr robot = robots_->get(ns, crd::string_at(*task, {"spec", "targetRobot"}));
  auto request = cache_request(*task);
  auto again = robot && request && request.value() ? cache_key(*task, *request.value(), *robot)
                                                   : Result<std::string>(Error{"spec.targetRobot", "no such Robot"});
  if (!again || again.value() != recorded) {
    spdlog::warn("task {}: its result is not stored: its key is no longer {} ({})", key, recorded,
                 again ? "its spec or its robot's class changed" : again.error().to_string());
    return outcome;
  }
  const std::string entry_name = entry.value()["metadata"]["name"];
  if (const kube::ObjectPtr stored = cache_entries_->get(ns, entry_name)) {
    if (crd::string_at(*stored, {"spec", "task", "uid"}) == crd::string_at(*task, {"metadata", "uid"})) return outcome;
    // A run as new or newer stays; so does one less than kRefreshAfter older
    // (identical Tasks completing together would otherwise each rewrite it).
    if (completed_at(*stored) + kRefreshAfter >= completed_at(entry.value())) return outcome;
    entry.value()["metadata"]["resourceVersion"] = crd::string_at(*stored, {"metadata", "resourceVersion"});
    auto replaced = counted("update", client_.replace(crd::kTaskCacheEntries, ns, entry_name, entry.value()));
    if (!replaced) {
      if (!replaced.error().conflict() && !replaced.error().not_found())
        spdlog::warn("task {}: storing its result: {}", key, replaced.error().to_string());
      outcome.failed = true;  // judged again from the newer entry
      return outcome;
    }
  } else {
    auto created = counted("create", client_.create(crd::kTaskCacheEntries, ns, entry.value()));
    if (!created) {
      if (created.error().already_exists()) {
        outcome.after(std::chrono::seconds(1));  // another run of the key was stored: compared once the cache has it
        return outcome;
      }
      if (created.error().not_found()) {
        spdlog::warn(
            "task {}: its result is not stored: the TaskCacheEntry CRD is not installed "
            "(kubectl apply -f proto-schemas/crds/)",
            key);
        return outcome;
      }
      spdlog::warn("task {}: storing its result: {}", key, created.error().to_string());
      outcome.failed = true;
      return outcome;
    }
  }
  spdlog::info("task {}: result stored as TaskCacheEntry {}", key, entry_name);
  record(*task, "Normal", "CacheStored",
         "its result is stored as TaskCacheEntry " + entry_name + " for later Tasks with key " + recorded);
  return outcome;
}

Manager::Outcome Manager::collect_cache_garbage() {
  Outcome outcome;
  outcome.after(kCacheGarbageInterval);
  if (!cache_entries_->has_synced()) return outcome;
  const Timestamp oldest_kept = now() - config_.cache_entry_max_age;
  std::map<std::string, std::vector<kube::ObjectPtr>> by_namespace;
  for (const kube::ObjectPtr& entry : cache_entries_->list())
    by_namespace[crd::string_at(*entry, {"metadata", "namespace"})].push_back(entry);
  for (auto& [ns, entries] : by_namespace) {
    std::sort(entries.begin(), entries.end(),
              [](const kube::ObjectPtr& a, const kube::ObjectPtr& b) { return completed_at(*a) > completed_at(*b); });
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const bool too_old = completed_at(*entries[i]) < oldest_kept;
      if (!too_old && i < config_.cache_max_entries) continue;
      const std::string name = crd::string_at(*entries[i], {"metadata", "name"});
      auto removed = counted("delete", client_.remove(crd::kTaskCacheEntries, ns, name));
      if (!removed && !removed.error().not_found()) {
        spdlog::warn("cache entry {}/{}: deleting it: {}", ns, name, removed.error().to_string());
        continue;
      }
      spdlog::info("cache entry {}/{} deleted: {}", ns, name,
                   too_old ? "older than cache-entry-max-age " + format_go_duration(config_.cache_entry_max_age)
                           : "beyond cache-max-entries " + std::to_string(config_.cache_max_entries));
    }
  }
  return outcome;
}

}  // namespace k8s4r::manager
