// An informer for one resource, as client-go's reflector + indexer +
// shared informer: list (all pages), then watch from the list's
// resourceVersion with bookmarks; on a dropped stream, watch again from the
// last resourceVersion seen; on 410 Expired, list again and deliver the
// difference as add, update and delete events, so every change arrives once
// and none is missed. The cache is indexed by namespace/name, by
// metadata.uid, and by any key function the caller adds (spec.targetRobot,
// say).
//
// A consistency check after Kubernetes' own (KEP-4988) runs on an interval
// when enabled: a 64-bit FNV-1a hash of every cached namespace/name/
// resourceVersion is compared with the same hash of a fresh list at the
// cache's resourceVersion; a mismatch is logged, counted, and answered with a
// relist.
//
// Threading: start() runs the reflector on its own thread; handlers are
// called on that thread, one event at a time, outside the cache lock, so a
// handler may read the cache. Reads (get, list, by_index) are safe from any
// thread. stop() returns once the thread has ended (within about a second).
#pragma once

#include "k8s4r/kube/client.h"

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace k8s4r::kube {

using ObjectPtr = std::shared_ptr<const nlohmann::json>;

struct InformerOptions {
  Resource resource;
  std::string namespace_;  // "" for all namespaces
  std::string label_selector, field_selector;
  std::int64_t page_size = 500;
  int watch_timeout_seconds = 300;
  std::chrono::milliseconds retry_delay{1000};              // after a failed list or watch
  std::chrono::milliseconds consistency_check_interval{0};  // 0 = off
};

// Which updates a handler wants, as controller-runtime's predicates: false
// drops the update for that handler.
using UpdatePredicate = std::function<bool(const nlohmann::json& old_object, const nlohmann::json& new_object)>;

// Updates where metadata.generation moved (spec changes, under a status subresource).
bool generation_changed(const nlohmann::json& old_object, const nlohmann::json& new_object);
// Updates where the value at a JSON pointer ("/status/state") changed.
UpdatePredicate field_changed(const std::string& json_pointer);

struct EventHandler {
  std::function<void(const ObjectPtr&)> on_add;
  std::function<void(const ObjectPtr& old_object, const ObjectPtr& new_object)> on_update;
  std::function<void(const ObjectPtr&)> on_delete;
  UpdatePredicate update_filter;  // empty: every update
};

struct InformerMetrics {
  std::uint64_t lists = 0, watches = 0, relists_after_expired = 0, consistency_checks = 0, consistency_mismatches = 0,
                events = 0;
};

// 64-bit FNV-1a over "namespace/name/resourceVersion" of every object, in
// key order.
std::uint64_t cache_hash(const std::vector<ObjectPtr>& objects);

class Informer {
 public:
  using KeyFunction = std::function<std::vector<std::string>(const nlohmann::json&)>;

  Informer(Client& client, InformerOptions options);
  ~Informer();
  Informer(const Informer&) = delete;
  Informer& operator=(const Informer&) = delete;

  // Before start().
  void add_index(const std::string& name, KeyFunction key_of);
  void add_handler(EventHandler handler);

  void start();
  void stop();
  // True once the first list is in the cache and its events delivered.
  bool has_synced() const;
  bool wait_for_sync(std::chrono::milliseconds timeout) const;

  ObjectPtr get(const std::string& namespace_, const std::string& name) const;
  ObjectPtr get_by_uid(const std::string& uid) const;
  std::vector<ObjectPtr> by_index(const std::string& index, const std::string& key) const;
  std::vector<ObjectPtr> list() const;
  std::string resource_version() const;
  InformerMetrics metrics() const;

  // Runs the consistency check now (also what the interval runs); true when
  // the cache matched the server. A mismatch schedules a relist.
  bool check_consistency();

 private:
  struct Delta {
    enum Kind { added, updated, deleted } kind;
    ObjectPtr old_object, new_object;
  };
  void run();
  bool list_and_replace();
  void watch_once();
  // Applies one object to the cache under the lock and returns what changed.
  std::vector<Delta> upsert(ObjectPtr object);
  std::vector<Delta> erase(const ObjectPtr& object);
  void index(const std::string& key, const ObjectPtr& object, bool add);
  void deliver(const std::vector<Delta>& deltas);

  Client& client_;
  InformerOptions options_;
  std::vector<std::pair<std::string, KeyFunction>> index_functions_;
  std::vector<EventHandler> handlers_;

  mutable std::mutex mutex_;
  mutable std::condition_variable synced_changed_;
  std::map<std::string, ObjectPtr> objects_;                                     // namespace/name -> object
  std::map<std::string, std::string> by_uid_;                                    // uid -> namespace/name
  std::map<std::string, std::map<std::string, std::set<std::string>>> indexes_;  // index -> key -> namespace/names
  std::string resource_version_;
  bool synced_ = false;
  bool relist_ = true;
  InformerMetrics metrics_;

  std::atomic<bool> stopping_{false};
  // Ends the current watch stream (within about a second): set by stop() and
  // by a failed consistency check, which needs a relist now.
  std::atomic<bool> end_watch_{false};
  std::thread thread_;
  std::thread checker_;
};

}  // namespace k8s4r::kube
