// An informer for one resource, as client-go's reflector + indexer + shared
// informer: list (page by page), then watch from the list's resourceVersion
// with bookmarks; on a dropped stream, watch again from the last
// resourceVersion seen; on 410 Expired, list again and deliver the difference
// as add, update and delete events, so every change arrives once and none is
// missed. The cache is indexed by namespace/name, by metadata.uid, and by any
// key function the caller adds (spec.targetRobot, say).
//
// Under fleet load:
// - The cache is updated first; each handler then gets the change through its
//   own unbounded buffer and thread (client-go's processorListener), so a
//   slow handler delays only itself, never the cache or the other handlers.
// - A paginated list whose continue token expired (410) falls back to one
//   full list, as client-go's pager does; every failed list or watch waits an
//   exponential backoff with jitter (retry_delay doubling to max_retry_delay).
// - Every object passes through `transform` before it is cached (by default
//   metadata.managedFields is dropped, as client-go's
//   TransformStripManagedFields); pages are taken in one at a time, and the
//   consistency check hashes them as they arrive without keeping them.
// - stop() cancels an in-flight list or watch, its retries included: it
//   returns within about a second.
// - A key function that throws is logged and counted; the object stays
//   cached, under no key of that index.
// - A delete found by a relist (not seen in the watch) carries
//   final_state_unknown = true: the object handed over is the last state the
//   cache had, which may be older than the one deleted (client-go's
//   DeletedFinalStateUnknown).
//
// A consistency check after Kubernetes' own (KEP-4988) runs on an interval
// when enabled: a 64-bit FNV-1a hash of every cached namespace/name/
// resourceVersion is compared with the same hash of a fresh list at the
// cache's resourceVersion; a mismatch is logged, counted, and answered with a
// relist.
//
// Threading: start() runs the reflector on its own thread and one thread per
// handler; a handler sees its events one at a time, in order, and may read
// the cache. Reads (get, list, by_index) are safe from any thread.
// add_handler() may be called before or after start(): a handler added late
// first gets an add for every cached object. has_synced() is true once the
// first list is cached and every handler has handled its share of it.
#pragma once

#include "k8s4r/common/packed_json.h"
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
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace k8s4r::kube {

using ObjectPtr = std::shared_ptr<const nlohmann::json>;

// Drops metadata.managedFields, which no controller here reads and which is
// often the largest part of an object.
void strip_managed_fields(nlohmann::json& object);

struct InformerOptions {
  Resource resource;
  std::string namespace_;  // "" for all namespaces
  std::string label_selector, field_selector;
  std::int64_t page_size = 500;
  int watch_timeout_seconds = 300;
  std::chrono::milliseconds retry_delay{800};  // the first wait after a failed list or watch
  std::chrono::milliseconds max_retry_delay{30'000};
  std::chrono::milliseconds consistency_check_interval{0};  // 0 = off
  // Applied to every object before it is cached; must keep metadata.name,
  // namespace, uid and resourceVersion. Empty: keep objects whole.
  std::function<void(nlohmann::json&)> transform = strip_managed_fields;
  // Keep each cached object packed (MessagePack: about a seventh of what the
  // parsed object takes) and parse it again on every read: get(), list(),
  // by_index() and each update's old object then return a fresh copy. For a
  // large cache read a few times a second per object, as the bridge's 10,000
  // Robots are: a read costs a few microseconds.
  bool packed = false;
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
  std::function<void(const ObjectPtr& last_known, bool final_state_unknown)> on_delete;
  UpdatePredicate update_filter;  // empty: every update
};

struct InformerMetrics {
  std::uint64_t lists = 0, watches = 0, relists_after_expired = 0, consistency_checks = 0, consistency_mismatches = 0,
                events = 0;
  std::uint64_t list_fallbacks = 0;  // continue token expired: listed again in one piece
  std::uint64_t retries = 0;         // failed lists and watches, each followed by a backoff
  std::uint64_t index_errors = 0, handler_errors = 0;
  std::uint64_t handler_backlog = 0;  // events buffered for handlers, all handlers together
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
  // Before or after start().
  void add_handler(EventHandler handler);

  void start();
  void stop();
  bool has_synced() const;
  bool wait_for_sync(std::chrono::milliseconds timeout) const;

  ObjectPtr get(const std::string& namespace_, const std::string& name) const;
  ObjectPtr get_by_uid(const std::string& uid) const;
  std::vector<ObjectPtr> by_index(const std::string& index, const std::string& key) const;
  std::vector<ObjectPtr> list() const;
  std::size_t size() const;  // objects cached
  std::string resource_version() const;
  InformerMetrics metrics() const;

  // Runs the consistency check now (also what the interval runs); true when
  // the cache matched the server. A mismatch schedules a relist.
  bool check_consistency();

  // Watches what `label_selector` selects from now on: the cache is listed
  // again with it and the difference delivered, as after 410 Expired (an
  // object no longer selected is a delete with final_state_unknown = true).
  // Returns a number that selected() reaches once that list is in the
  // cache; the same selector again starts nothing. Any thread.
  std::uint64_t select(const std::string& label_selector);
  bool selected(std::uint64_t selection) const;

 private:
  enum class Kind { added, updated, deleted };
  struct Delta {
    Kind kind;
    ObjectPtr old_object, new_object;
    bool final_state_unknown = false;
  };
  class Listener;

  void run();
  // Lists page by page, handing each (transformed) item to `on_item`;
  // `on_restart` is called when the pages so far must be thrown away (the
  // continue token expired and a full list follows). Returns the list's
  // resourceVersion, or nothing on failure.
  std::optional<std::string> list_pages(ListOptions options, const std::function<void(nlohmann::json&&)>& on_item,
                                        const std::function<void()>& on_restart);
  bool list_and_replace();
  void watch_once();
  // Apply one object to the cache and hand the change to every handler, both
  // under the lock, so a handler added meanwhile misses nothing.
  void upsert(ObjectPtr object);
  void erase(const ObjectPtr& object);
  // One cached object: the parsed object, or its MessagePack when packed.
  struct Entry {
    ObjectPtr object;
    PackedJson packed;
    std::string version;  // metadata.resourceVersion
  };
  Entry entry_of(ObjectPtr object) const;
  ObjectPtr object_of(const Entry& entry) const;
  void index(const std::string& key, const ObjectPtr& object, bool add);
  void publish(const Delta& delta);  // with mutex_ held
  bool listeners_synced() const;     // with mutex_ held
  // Waits the next backoff step (ended early by stop()).
  void back_off();

  Client& client_;
  InformerOptions options_;
  std::vector<std::pair<std::string, KeyFunction>> index_functions_;

  mutable std::mutex mutex_;
  mutable std::condition_variable synced_changed_;
  std::map<std::string, Entry> objects_;                                         // namespace/name -> object
  std::map<std::string, std::string> by_uid_;                                    // uid -> namespace/name
  std::map<std::string, std::map<std::string, std::set<std::string>>> indexes_;  // index -> key -> namespace/names
  std::vector<std::unique_ptr<Listener>> listeners_;
  std::string resource_version_;
  bool synced_ = false;
  bool started_ = false;
  bool relist_ = true;
  // select(): the selection wanted (options_.label_selector, under mutex_)
  // and the newest one listed.
  std::uint64_t selection_ = 0, listed_selection_ = 0;
  InformerMetrics metrics_;
  std::chrono::milliseconds backoff_{0};

  std::atomic<bool> stopping_{false};
  std::mutex stop_mutex_;
  std::condition_variable stop_changed_;
  bool wake_ = false;  // under stop_mutex_: select() ends a back-off
  // Ends the current watch stream (within about a second): set by stop() and
  // by a failed consistency check, which needs a relist now.
  std::atomic<bool> end_watch_{false};
  std::thread thread_;
  std::thread checker_;
};

}  // namespace k8s4r::kube
