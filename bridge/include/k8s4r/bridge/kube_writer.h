// Every write the bridge makes to Kubernetes, through a keyed work queue
// (k8s4r/kube/work_queue.h): one pending write per object, newer data
// merged into it, a pool of writer threads, retries with jittered backoff.
// A slow or failing API server makes writes to the same object coalesce, so
// memory stays bounded by the number of robots and tasks, and the last
// state written is always the newest: a terminal task state is retried
// until the server takes it or the Task is gone (404).
//
// A pending write on one object runs its steps in this order: create (409
// AlreadyExists counts as done), the main resource's merge patch, the
// finalizer when it is added (a JSON patch computed from the freshest cached
// object when the step runs, tested against it), the /status merge patch,
// the finalizer when it is removed (so a Task's last state is in before it
// goes). A failed step keeps itself and the steps after it pending; a status
// the server refuses for good does not hold up a release.
//
// Events are their own keys, created once each. Task writes are handed out
// before Robot writes and Events.
//
// Threading: every method may be called from any thread; `done` callbacks
// run on a writer thread.
#pragma once

#include "k8s4r/common/packed_json.h"
#include "k8s4r/daemon/metrics.h"
#include "k8s4r/kube/client.h"
#include "k8s4r/kube/informer.h"
#include "k8s4r/kube/work_queue.h"

#include <nlohmann/json.hpp>

#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace k8s4r::bridge {

struct ObjectRef {
  kube::Resource resource;
  std::string namespace_, name;
  std::string key() const { return resource.plural + "/" + namespace_ + "/" + name; }
};

// ok, and the error when not.
using WriteDone = std::function<void(bool ok, const std::string& error)>;
// The freshest cached copy of an object (null when the cache has none).
using CacheLookup = std::function<kube::ObjectPtr(const ObjectRef&)>;

struct WriteRequest {
  std::optional<nlohmann::json> create;  // the whole object, when it may not exist yet
  // The create must make it: one that exists already (409) fails the write
  // for good, as the object is not what the caller judged by (a replica's
  // cache holds only its slots' objects: this one has no slot label yet).
  bool must_be_new = false;
  // With must_be_new: the merge patch made on the object found existing
  // instead of the rest (its slot label, so the owner's cache takes it in).
  nlohmann::json exists_patch;
  nlohmann::json main_patch;      // merge patch on the object; null: none
  std::optional<bool> finalizer;  // want crd::kBridgeFinalizer present (true) or absent (false)
  nlohmann::json status_patch;    // merge patch on /status; null: none
  WriteDone done;
};

class KubeWriter {
 public:
  KubeWriter(kube::Client& client, CacheLookup lookup, daemon::Metrics& metrics, std::size_t threads,
             kube::WorkQueueOptions retry = {});
  ~KubeWriter();
  KubeWriter(const KubeWriter&) = delete;
  KubeWriter& operator=(const KubeWriter&) = delete;

  void write(const ObjectRef& object, WriteRequest request);
  void create_event(const nlohmann::json& event);

  // Stops taking work; writes in flight finish, pending ones are dropped
  // (they are read back from the resources and MQTT after a restart).
  void stop();
  kube::WorkQueueMetrics queue_metrics() const { return queue_.metrics(); }
  // Whether a write to an object `matches` picks is waiting or under way: a
  // replica hands a slot over only once its own writes to the slot's
  // objects are in, so none lands after the new owner's.
  bool any_pending(const std::function<bool(const ObjectRef&)>& matches) const;
  // Completions of the writes waiting (a metric).
  std::size_t waiting_callbacks() const;

 private:
  // Documents wait packed: a reconnect storm leaves a pending write for each
  // of 10,000 robots, and parsed JSON, most of which glibc keeps afterwards,
  // took 50 MiB of them.
  struct Pending {
    ObjectRef object;
    PackedJson create;
    bool must_be_new = false;
    PackedJson exists_patch;
    PackedJson main_patch;
    std::optional<bool> finalizer;
    PackedJson status_patch;
    std::vector<WriteDone> done;
    bool is_event = false;
  };
  static void merge(Pending& older, Pending newer);
  void run();
  // Runs the steps, clearing each one done; false when one failed, with
  // `permanent` telling whether retrying could help.
  bool execute(Pending& pending, std::string& error, bool& permanent);
  void count(const std::string& verb, int code);

  kube::Client& client_;
  CacheLookup lookup_;
  daemon::Metrics& metrics_;
  kube::WorkQueue queue_;
  mutable std::mutex mutex_;
  std::map<std::string, Pending> pending_;
  std::map<std::string, ObjectRef> in_flight_;  // taken by a writer thread, not yet done
  std::vector<std::thread> threads_;
};

}  // namespace k8s4r::bridge
