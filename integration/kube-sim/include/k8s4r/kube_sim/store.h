// The in-memory object store behind k8s4r-kube-sim, with the semantics of
// kube-apiserver over etcd: one global resourceVersion counter, create / get /
// list / replace / patch / delete with their preconditions, finalizers,
// owner-reference garbage collection, the status subresource, schema
// validation from CRDs, and watches served from a sliding window of recent
// events per resource (kube-apiserver's watch cache), with 410 Expired for a
// resourceVersion that has left the window.
//
// Threading: every public method may be called from any thread; one mutex
// guards the store. Watch events are pushed into each Watcher's own queue
// while that mutex is held, so a watcher sees events in resourceVersion order.
// Ownership: the store owns its objects; watchers are shared with the HTTP
// handler streaming them.
#pragma once

#include "k8s4r/common/rfc3339.h"
#include "k8s4r/kube_sim/api_status.h"
#include "k8s4r/kube_sim/resource_type.h"
#include "k8s4r/kube_sim/selectors.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

namespace k8s4r::kube_sim {

using Clock = std::function<Timestamp()>;

struct StoreOptions {
  std::size_t history_per_resource = 100;   // watch window: events kept per resource
  std::size_t watcher_queue_limit = 10000;  // a watcher further behind than this is closed
};

// Where a request points: a served type at one version, and a namespace
// ("" for all namespaces, or for cluster-scoped types).
struct Target {
  ResourceType type;
  std::string namespace_;
};

struct ListOptions {
  std::string label_selector, field_selector;
  std::string resource_version, resource_version_match;
  std::int64_t limit = 0;
  std::string continue_token;
};

struct WriteOptions {
  bool dry_run = false;
  std::string field_validation;  // Strict, Warn (default), Ignore
  // Who writes, for metadata.managedFields: ?fieldManager, else the
  // User-Agent's product ("" is recorded as "unknown").
  std::string field_manager;
  bool force = false;               // server-side apply: take conflicting fields
  bool from_patch = false;          // set by Store::patch: errors are reported as a patch's
  bool managed_fields_set = false;  // set by apply: the body's managedFields are final
};

enum class PatchType { merge, json, strategic, apply };

struct WatchEvent {
  std::string type;  // ADDED, MODIFIED, DELETED, BOOKMARK, ERROR
  std::shared_ptr<const nlohmann::json> object;
  // The JSON line `{"type":...,"object":...}\n`, encoded once and shared by
  // every watcher that receives the same event; null when not encoded yet.
  std::shared_ptr<const std::string> line = nullptr;
};

// `{"type":...,"object":...}` and a newline, as a watch stream carries it.
std::string encode_watch_line(const std::string& type, const nlohmann::json& object);

class Watcher {
 public:
  // The next event; nullopt when `deadline` passed with none, or when closed
  // and drained (then closed() is true).
  std::optional<WatchEvent> next(std::chrono::steady_clock::time_point deadline);
  // The next event if one is queued; never waits.
  std::optional<WatchEvent> try_next();
  void close();
  bool closed() const;
  // Called (from whichever thread queued it, possibly with the store's lock
  // held: it must only hand the work on, e.g. post to an executor) whenever an
  // event is queued or the watcher closes. Set once, before events matter.
  void set_listener(std::function<void()> listener);

 private:
  friend class Store;
  bool push(WatchEvent event, std::size_t limit);  // false (and closes) when over the limit

  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<WatchEvent> queue_;
  bool closed_ = false;
  std::function<void()> listener_;
  // What it watches and its filters, fixed at creation.
  ResourceType type_;  // objects are shown in its version
  std::string namespace_;
  LabelSelector labels_;
  FieldSelector fields_;
};

struct WatchOptions {
  std::string label_selector, field_selector, resource_version;
  // true: the current state as ADDED events, then (with bookmarks) a
  // BOOKMARK marked k8s.io/initial-events-end; false: no initial events;
  // unset: initial events only when no resourceVersion (or "0") is given.
  std::optional<bool> send_initial_events;
  bool allow_bookmarks = false;
};

class Store {
 public:
  Store(StoreOptions options, Clock clock);

  // Served types now: built-ins and those of established CRDs.
  std::vector<ResourceType> served_types() const;
  std::optional<ResourceType> find_type(const std::string& group, const std::string& version,
                                        const std::string& plural) const;
  bool namespace_exists(const std::string& name) const;

  ApiResponse create(const Target& target, nlohmann::json body, const WriteOptions& options);
  ApiResponse get(const Target& target, const std::string& name) const;
  ApiResponse list(const Target& target, const ListOptions& options) const;
  ApiResponse replace(const Target& target, const std::string& name, nlohmann::json body, bool status_subresource,
                      const WriteOptions& options);
  ApiResponse patch(const Target& target, const std::string& name, PatchType type, const std::string& patch,
                    bool status_subresource, const WriteOptions& options);
  ApiResponse remove(const Target& target, const std::string& name, const nlohmann::json& delete_options);
  ApiResponse remove_collection(const Target& target, const ListOptions& list_options,
                                const nlohmann::json& delete_options);
  // PUT /api/v1/namespaces/NAME/finalize: only spec.finalizers moves; a
  // namespace being deleted goes once they are empty.
  ApiResponse finalize_namespace(const std::string& name, nlohmann::json body);

  // A watcher with its first events queued, or the error (400 for a bad
  // selector). A resourceVersion older than the window gives a watcher whose
  // only event is an ERROR carrying 410 Expired, as kube-apiserver does.
  std::shared_ptr<Watcher> watch(const Target& target, const WatchOptions& options, ApiResponse& error);
  void unwatch(const std::shared_ptr<Watcher>& watcher);
  // A BOOKMARK for `watcher` at the current resourceVersion, when everything
  // up to it has been queued to the watcher and taken.
  std::optional<WatchEvent> bookmark(const std::shared_ptr<Watcher>& watcher) const;

  std::uint64_t resource_version() const;

  // Fault injection and inspection.
  void close_all_watches();
  void compact();  // forget all history: every older resourceVersion now gets 410
  // The next `count` changes reach no watcher (they are stored and listed as
  // usual): a lost event, for testing clients' consistency checks.
  void drop_watch_events(std::uint64_t count);
  nlohmann::json stats() const;

 private:
  struct HistoryEvent {
    std::uint64_t resource_version;
    std::string type;
    std::shared_ptr<const nlohmann::json> object;    // after (for DELETED: the object as deleted)
    std::shared_ptr<const nlohmann::json> previous;  // before; null for ADDED
  };
  // One per stored resource (group + plural), shared by its served versions.
  struct Resource {
    std::map<std::string, ResourceType> versions;                          // apiVersion -> served type
    std::string storage_version;                                           // the apiVersion objects are stored in
    std::map<std::string, std::shared_ptr<const nlohmann::json>> objects;  // "namespace/name" -> object
    std::deque<HistoryEvent> history;
    std::uint64_t window_start = 0;  // history holds every event after this resourceVersion
    std::vector<std::shared_ptr<Watcher>> watchers;
  };
  using Objects = std::map<std::string, std::shared_ptr<const nlohmann::json>>;

  std::optional<ResourceType> find_type_locked(const std::string& group, const std::string& version,
                                               const std::string& plural) const;
  Resource* resource_of(const ResourceType& type);
  const Resource* resource_of(const ResourceType& type) const;
  static std::string resource_key(const ResourceType& type) { return type.storage_key(); }
  static const ResourceType& storage_type(const Resource& resource);
  static std::string object_key(const std::string& namespace_, const std::string& name) {
    return namespace_ + "/" + name;
  }
  StatusSubject subject(const ResourceType& type, const std::string& name) const;

  // Records a change: assigns the next resourceVersion, updates the objects,
  // the history window and the watchers. `object` null means deleted.
  std::shared_ptr<const nlohmann::json> commit(Resource& resource, const std::string& key,
                                               std::shared_ptr<nlohmann::json> object, const std::string& event_type);
  void notify(Resource& resource, const HistoryEvent& event);
  // The objects as they were at `resource_version`, from the history window.
  std::optional<Objects> snapshot_at(const Resource& resource, std::uint64_t resource_version) const;

  ApiResponse admit(const Target& target, nlohmann::json& object, const nlohmann::json* existing,
                    const WriteOptions& options, std::vector<std::string>& warnings);
  // The 400 (or, for a patch's result, 422) a wrong JSON type in metadata or
  // in a built-in's own fields gets.
  static std::optional<ApiResponse> decode_errors(const ResourceType& type, const nlohmann::json& body,
                                                  bool from_patch);
  ApiResponse create_locked(const Target& target, nlohmann::json body, const WriteOptions& options);
  // Server-side apply (apply.cpp): the configuration in the body (JSON or
  // YAML) as checked before anything is locked, then merge, prune,
  // conflicts; creates the object when it does not exist.
  static std::variant<nlohmann::json, ApiResponse> apply_config_of(const Target& target, const std::string& name,
                                                                   const std::string& patch);
  ApiResponse apply_locked(const Target& target, const std::string& name, nlohmann::json config,
                           bool status_subresource, const WriteOptions& options);
  // metadata.managedFields of `object` after this write (managed_fields.h);
  // `existing` null for a create.
  void track_fields(const Target& target, nlohmann::json& object, const nlohmann::json* existing,
                    bool status_subresource, const WriteOptions& options) const;
  ApiResponse update_locked(const Target& target, const std::string& name, nlohmann::json body, bool status_subresource,
                            const WriteOptions& options, bool from_patch);
  ApiResponse delete_locked(Resource& resource, const ResourceType& type, const std::string& namespace_,
                            const std::string& name, const nlohmann::json& delete_options);
  void finish_deletion(Resource& resource, const std::string& key);
  // Removes `finalizer` from a stored object; deletes it when it was being
  // deleted and nothing holds it any more.
  void remove_finalizer(Resource& resource, const std::string& key, const std::string& finalizer);

  // ---- controllers: what kube-controller-manager would do, run at the end of
  // every write while the lock is held (garbage_collector.cpp,
  // namespace_controller.cpp). commit() queues the work.
  struct ObjectRef {
    std::string resource;  // resource_key
    std::string key;       // object_key
    bool operator<(const ObjectRef& other) const {
      return resource != other.resource ? resource < other.resource : key < other.key;
    }
  };
  void index_and_queue(Resource& resource, const std::string& key, const nlohmann::json* before,
                       const nlohmann::json* after);
  void run_controllers_locked();
  void collect_garbage(const ObjectRef& item);
  void sync_namespace(const std::string& name);
  const nlohmann::json* lookup(const ObjectRef& ref) const;
  void register_crd(const nlohmann::json& crd);
  void unregister_crd(const nlohmann::json& crd);
  nlohmann::json for_version(const nlohmann::json& object, const ResourceType& type) const;

  StoreOptions options_;
  Clock clock_;
  mutable std::mutex mutex_;
  std::uint64_t resource_version_ = 1;
  std::uint64_t events_to_drop_ = 0;
  std::map<std::string, Resource> resources_;              // resource_key -> resource
  std::map<std::string, ObjectRef> uids_;                  // uid -> where the object is
  std::map<std::string, std::set<ObjectRef>> dependents_;  // owner uid -> objects naming it in ownerReferences
  std::set<ObjectRef> garbage_queue_;                      // objects the garbage collector looks at next
  std::set<std::string> namespaces_to_sync_;               // terminating namespaces to look at next
};

}  // namespace k8s4r::kube_sim
