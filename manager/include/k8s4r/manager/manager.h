// The manager daemon: the controllers that turn Jobs into Tasks on robots,
// approve robots and notice when they go away. It talks only to Kubernetes.
//
// Level-triggered, as Kubernetes controllers are: informers (with indexes)
// keep Robots, robot Secrets, Jobs, TaskGroups and Tasks cached; their
// events put keys on one rate-limited work queue per controller; a worker
// takes a key, reads the cache, decides with the pure functions of this
// folder and writes the difference. Nothing is remembered that the
// resources do not say, so a manager killed at any moment and started again
// picks up where it was (names are functions of the Job; a create that finds
// its name taken is done).
//
//   robot_controller       phase: approval by token digest, Online/Offline
//   job_controller         a Job's TaskGroups, and its status from theirs
//   task_group_controller  a group's slots: Tasks created, lost ones marked,
//                          failed ones replaced per reschedulePolicy, status
//   task_controller        Tasks of their own: sent to their robot, lost ones marked
//   scheduler              a replica's unplaced Tasks onto one robot, from
//                          the RobotLoad cache, never a scan of Tasks
//
// Only the leader's workers run (leader election is main's, on a Lease); a
// follower keeps its caches warm and takes over within a lease duration.
//
// Threading: informer handlers run on informer threads and only enqueue;
// each controller runs its own worker threads. Shared state (RobotLoad, the
// expectations and waiting sets) is behind mutexes.
#pragma once

#include "k8s4r/common/rfc3339.h"
#include "k8s4r/daemon/metrics.h"
#include "k8s4r/kube/client.h"
#include "k8s4r/kube/event_recorder.h"
#include "k8s4r/kube/informer.h"
#include "k8s4r/kube/work_queue.h"
#include "k8s4r/manager/config.h"
#include "k8s4r/manager/plan_group.h"
#include "k8s4r/manager/reschedule.h"
#include "k8s4r/manager/robot_lifecycle.h"
#include "k8s4r/manager/robot_load.h"
#include "k8s4r/manager/templates.h"

#include <array>
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace k8s4r::manager {

class Manager {
 public:
  Manager(ManagerConfig config, kube::Client& client, daemon::Metrics& metrics, std::string instance,
          const Clock& clock = real_clock());
  ~Manager();
  Manager(const Manager&) = delete;
  Manager& operator=(const Manager&) = delete;

  // Starts the informers; the controllers wait for lead().
  void start();
  // Starts the controllers' workers once the caches have synced.
  void lead();
  void stop();
  // Empty when ready (caches synced); else why not. Any thread.
  std::string not_ready_reason() const;

 private:
  // What one reconcile asks of its queue: look again after a while (time
  // alone changes the verdict), or retry with backoff (a write failed).
  struct Outcome {
    std::optional<std::chrono::nanoseconds> requeue_after;
    bool failed = false;
    void after(std::chrono::nanoseconds delay) {
      if (!requeue_after || delay < *requeue_after) requeue_after = delay;
    }
  };
  struct Controller {
    std::string name;
    std::unique_ptr<kube::WorkQueue> queue;
    std::function<Outcome(const std::string& key)> reconcile;
    int workers = 1;
    std::vector<std::thread> threads;
  };

  // manager.cpp: wiring, queues, workers, metrics, writes.
  std::array<Controller*, 7> controllers() {
    return {&robot_controller_, &job_controller_,      &group_controller_,         &task_controller_,
            &cache_controller_, &prefetch_controller_, &artifact_cache_controller_};
  }
  void add_handlers();
  void run_worker(Controller& controller);
  void enqueue_group_of_task(const nlohmann::json& task);
  // namespace/name of the TaskGroup that owns a Task, "" for a Task of its own.
  static std::string owner_group(const nlohmann::json& task);
  // The groups with unfinished Tasks on a robot; and every system group
  // when what fits on it may have changed.
  void enqueue_groups_on_robot(const std::string& robot_key, bool with_system_groups);
  void enqueue_waiting_groups();
  Timestamp now() const;
  // A write's result, counted by verb and code.
  void count_write(const std::string& verb, int code);
  template <class T>
  kube::ApiResult<T> counted(const std::string& verb, kube::ApiResult<T> result) {
    count_write(verb, result ? 200 : result.error().code);
    return result;
  }
  void record(const nlohmann::json& object, const std::string& type, const std::string& reason,
              const std::string& message);

  // robot_controller.cpp
  Outcome reconcile_robot(const std::string& key);
  std::optional<std::string> secret_digest(const std::string& namespace_, const std::string& robot) const;
  // drain_controller.cpp: status.cordonedAt and its Events; spec.drain (robot_drain.h).
  void reconcile_cordon(const kube::ObjectPtr& robot, Outcome& outcome);
  // The Robot as written with status.<field> = value (null removes it); none
  // when it is gone, or the write failed (then `outcome` says to retry).
  std::optional<nlohmann::json> write_robot_status(const std::string& namespace_, const std::string& name,
                                                   const std::string& field, const nlohmann::json& value,
                                                   Outcome& outcome);
  void reconcile_drain(const kube::ObjectPtr& robot, Outcome& outcome);
  // stop_requests.cpp: the DisruptionTarget condition, with `reason`.
  void ask_to_stop(const nlohmann::json& task, const std::string& reason, const std::string& why, Outcome& outcome);

  // job_controller.cpp
  Outcome reconcile_job(const std::string& key);

  // task_controller.cpp: Tasks no TaskGroup owns (plan_task.h).
  Outcome reconcile_task(const std::string& key);
  // A Task about to be sent to `robot` is labelled with that robot's slot
  // first (common/slots.h), so the bridge replica that serves the slot sees
  // it, conditional on the version judged. The resourceVersion to write on
  // next (the labelled one; the judged one when it had the label), or none
  // when the caller is to stop: judged again (404, 409), or `outcome` failed.
  std::optional<std::string> label_with_slot(const nlohmann::json& task, const std::string& robot,
                                             const std::string& key, Outcome& outcome);
  // task_group_controller.cpp: read the caches, plan (plan_group.h), apply.
  Outcome reconcile_group(const std::string& key);
  GroupView view_of_group(const std::string& namespace_, const std::string& name);
  // The groups of `job` whose outputs `group`'s tasks use, as the caches show them.
  std::map<std::string, ProducerOutputs> producers_of(const nlohmann::json& group, const nlohmann::json& job);
  Outcome apply_group_plan(const std::string& key, const GroupView& view, GroupPlan& plan);
  bool mark_lost(const nlohmann::json& task, const std::string& why);

  // artifact_cache_controller.cpp (artifact_caches.h).
  Outcome reconcile_prefetch(const std::string& robot_key);
  Outcome reconcile_artifact_cache(const std::string& key);
  std::vector<nlohmann::json> artifact_caches_of(const std::string& namespace_) const;
  void enqueue_artifact_caches_of(const std::string& namespace_);

  // result_store.cpp: a cacheable Task's successful run stored as a
  // TaskCacheEntry (result_cache.h); kCacheGarbageKey: entries past
  // cache-entry-max-age or cache-max-entries deleted.
  Outcome reconcile_cache(const std::string& key);
  Outcome collect_cache_garbage();
  static constexpr const char* kCacheGarbageKey = "cache-garbage";
  static constexpr std::chrono::minutes kCacheGarbageInterval{10};
  // At placement: the status of a Task whose result is reused, when a fresh
  // entry has its key; `key` is set to the key whenever it has one, so the
  // dispatch records it for the store (status.cacheKey).
  // `not_cacheable` says why a Task that asks for caching cannot be keyed.
  std::optional<nlohmann::json> cached_result(const Unplaced& item, const std::string& robot, std::string& key,
                                              std::string& not_cacheable);

  // scheduler.cpp
  // Chooses one robot for a replica's unplaced Tasks (beside a sibling still
  // running, when its robot still fits; only `only_robot` for a system
  // job's replica) and counts them on it at once (RobotLoad::assume).
  // `robots_seen`: the robots' facts, read on the first decision of a
  // reconcile and kept for the next ones.
  Placement plan_replica(const nlohmann::json& task_group, const TaskNeeds& needs, const std::string& only_robot,
                         const std::string& sibling_robot, const std::vector<Unplaced>& tasks,
                         std::optional<std::vector<RobotFacts>>& robots_seen);
  // Writes one Task's placement: created or patched with spec.targetRobot,
  // then status dispatching; pending with the reason when nothing fits.
  // False when a write failed and the group should be retried.
  bool write_placement(Unplaced& item, const Placement& placement);
  // Every write of one reconcile, kPlacementWriters at a time.
  void write_placements(std::vector<std::pair<Unplaced, std::shared_ptr<const Placement>>>& writes, Outcome& outcome);
  static constexpr std::size_t kPlacementWriters = 8;
  std::vector<RobotFacts> robot_facts_for(const std::string& namespace_, const std::string& group) const;

  ManagerConfig config_;
  kube::Client& client_;
  daemon::Metrics& metrics_;
  std::string instance_;
  const Clock& clock_;
  RobotPolicy robot_policy_;

  std::unique_ptr<kube::Informer> robots_, secrets_, jobs_, groups_, tasks_, cache_entries_, artifact_caches_;
  std::unique_ptr<kube::EventRecorder> events_;
  Controller robot_controller_, job_controller_, group_controller_, task_controller_, cache_controller_;
  // artifact_cache_controller.cpp: what each Robot is to keep ahead of need
  // (status.prefetch), keyed by Robot; each ArtifactCache's status.
  Controller prefetch_controller_, artifact_cache_controller_;
  RobotLoad load_;

  std::mutex lifecycle_mutex_;  // lead() and stop(): workers start only before a stop
  std::mutex schedule_mutex_;   // one placement decision at a time
  mutable std::mutex mutex_;
  // Tasks created by this manager that the cache has not shown yet
  // (client-go's "expectations"): never created twice from a stale cache.
  // An entry older than kExpectationTimeout is forgotten (client-go's 5
  // minutes): a Task deleted before the cache ever showed it is made again.
  std::map<std::string, SteadyTime> expected_;
  static constexpr std::chrono::minutes kExpectationTimeout{5};
  // Tasks this manager set dispatching that the cache has not shown so yet.
  std::set<std::string> dispatch_expected_;
  // TaskGroups with a Task no robot fits: looked at again when a robot or
  // a Task's end changes what fits.
  std::set<std::string> waiting_;
  // TaskGroups of system Jobs: looked at again when any robot changes.
  std::set<std::string> system_groups_;
  // Running Tasks (by uid) their robot's heartbeats have stopped listing:
  // the first such heartbeat's time. Lost after --disconnect-grace of them.
  std::map<std::string, Timestamp> missing_since_;
  // Tasks (by uid) seen dispatching with nothing on them saying since when:
  // when this manager first saw them so (their dispatch timeout's start).
  std::map<std::string, Timestamp> seen_dispatching_;

  std::atomic<bool> leading_{false}, stopping_{false};
};

}  // namespace k8s4r::manager
