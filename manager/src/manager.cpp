// The Manager's wiring: informers and their indexes, the handlers that turn
// their events into keys, the controllers' queues and workers, metrics.
#include "k8s4r/manager/manager.h"

#include "k8s4r/crd/resources.h"
#include "k8s4r/crd/robot_secret.h"
#include "k8s4r/manager/result_cache.h"

#include <spdlog/spdlog.h>

namespace k8s4r::manager {

using nlohmann::json;
using Type = daemon::Metrics::Type;

namespace {

// The namespace/name of the controller owner of `kind`, or "".
std::string owner_key(const json& object, const char* kind) {
  for (const json& owner : crd::value_at(object, {"metadata", "ownerReferences"})) {
    if (owner.is_object() && owner.value("kind", "") == kind && owner.value("controller", false) &&
        owner.contains("name") && owner["name"].is_string()) {
      return crd::string_at(object, {"metadata", "namespace"}) + "/" + owner["name"].get<std::string>();
    }
  }
  return "";
}

std::string controller_uid(const json& object) {
  for (const json& owner : crd::value_at(object, {"metadata", "ownerReferences"})) {
    if (owner.is_object() && owner.value("controller", false) && owner.contains("uid") && owner["uid"].is_string())
      return owner["uid"].get<std::string>();
  }
  return "";
}

}  // namespace

Manager::Manager(ManagerConfig config, kube::Client& client, daemon::Metrics& metrics, std::string instance,
                 const Clock& clock)
    : config_(std::move(config)), client_(client), metrics_(metrics), instance_(std::move(instance)), clock_(clock) {
  robot_policy_ = RobotPolicy{config_.require_robot_token, config_.robot_offline_after, config_.disconnect_grace};

  metrics_.declare("k8s4r_manager_leader", Type::gauge, "1 while this manager is the leader and its controllers run.");
  metrics_.declare("k8s4r_manager_reconciles_total", Type::counter,
                   "Reconciles by controller and result (ok, requeue, error).");
  metrics_.declare("k8s4r_manager_reconcile_seconds", Type::histogram, "Time one reconcile took, by controller.",
                   {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1});
  metrics_.declare("k8s4r_manager_work_queue_depth", Type::gauge, "Keys waiting, by controller.");
  metrics_.declare("k8s4r_manager_work_queue_wait_seconds_total", Type::counter,
                   "Time keys waited in the queue, summed, by controller (divide by processed for the mean).");
  metrics_.declare("k8s4r_manager_work_queue_processed_total", Type::counter, "Keys taken by a worker, by controller.");
  metrics_.declare("k8s4r_manager_work_queue_retries_total", Type::counter, "Keys retried after an error.");
  metrics_.declare("k8s4r_manager_scheduling_decisions_total", Type::counter,
                   "Replicas placed on a robot (result=scheduled) or left pending (result=unschedulable).");
  metrics_.declare("k8s4r_manager_scheduling_seconds", Type::histogram,
                   "Time to choose a robot for one replica (reading the robots' facts included).",
                   {0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05});
  metrics_.declare("k8s4r_manager_reschedules_total", Type::counter,
                   "Replacement Tasks created for a lost or failed Task, by why the first ended.");
  metrics_.declare("k8s4r_manager_lost_tasks_total", Type::counter, "Tasks marked lost, by reason.");
  metrics_.declare("k8s4r_manager_stop_requests_total", Type::counter,
                   "Tasks asked to stop without being deleted (the DisruptionTarget condition), by reason: Drained "
                   "(their robot is drained), RolloutAborted.");
  metrics_.declare("k8s4r_manager_kube_requests_total", Type::counter,
                   "Writes to the Kubernetes API by verb and HTTP code (0: no answer).");
  metrics_.declare("k8s4r_manager_kube_client_requests_total", Type::counter,
                   "Every request of the Kubernetes client (lists, watches, writes) and its retries.");
  metrics_.declare("k8s4r_manager_events_total", Type::counter, "Kubernetes Events recorded (created, dropped).");
  metrics_.declare("k8s4r_manager_robots", Type::gauge, "Robots in the cache, by phase.");
  metrics_.declare("k8s4r_manager_cache_lookups_total", Type::counter,
                   "Result cache lookups at placement of Tasks that ask for caching, by result (hit, miss).");

  const std::string& ns = config_.namespace_;
  kube::InformerOptions secret_options{crd::kSecrets, ns};
  secret_options.label_selector = crd::kRobotIdLabel;
  // Only the digest of a token is ever used; the rest of a Secret stays out of memory.
  secret_options.transform = crd::keep_robot_secret_fields;
  robots_ = std::make_unique<kube::Informer>(client_, kube::InformerOptions{crd::kRobots, ns});
  secrets_ = std::make_unique<kube::Informer>(client_, secret_options);
  jobs_ = std::make_unique<kube::Informer>(client_, kube::InformerOptions{crd::kJobs, ns});
  groups_ = std::make_unique<kube::Informer>(client_, kube::InformerOptions{crd::kTaskGroups, ns});
  kube::InformerOptions task_options{crd::kTasks, ns};
  task_options.consistency_check_interval = std::chrono::minutes(5);
  tasks_ = std::make_unique<kube::Informer>(client_, task_options);
  cache_entries_ = std::make_unique<kube::Informer>(client_, kube::InformerOptions{crd::kTaskCacheEntries, ns});
  artifact_caches_ = std::make_unique<kube::Informer>(client_, kube::InformerOptions{crd::kArtifactCaches, ns});
  const auto by_owner = [](const json& object) -> std::vector<std::string> {
    std::string uid = controller_uid(object);
    if (uid.empty()) return {};
    return {uid};
  };
  tasks_->add_index("owner", by_owner);
  groups_->add_index("owner", by_owner);
  tasks_->add_index("robot", [](const json& task) -> std::vector<std::string> {
    const crd::TaskView view = crd::read_task(task);
    if (view.target_robot.empty()) return {};
    return {view.namespace_ + "/" + view.target_robot};
  });

  events_ = std::make_unique<kube::EventRecorder>(client_, "k8s4r-manager", instance_);

  robot_controller_.name = "robot";
  robot_controller_.reconcile = [this](const std::string& key) { return reconcile_robot(key); };
  job_controller_.name = "job";
  job_controller_.reconcile = [this](const std::string& key) { return reconcile_job(key); };
  group_controller_.name = "taskgroup";
  group_controller_.reconcile = [this](const std::string& key) { return reconcile_group(key); };
  group_controller_.workers = 2;
  task_controller_.name = "task";
  task_controller_.reconcile = [this](const std::string& key) { return reconcile_task(key); };
  cache_controller_.name = "cache";
  cache_controller_.reconcile = [this](const std::string& key) { return reconcile_cache(key); };
  prefetch_controller_.name = "prefetch";
  prefetch_controller_.reconcile = [this](const std::string& key) { return reconcile_prefetch(key); };
  artifact_cache_controller_.name = "artifactcache";
  artifact_cache_controller_.reconcile = [this](const std::string& key) { return reconcile_artifact_cache(key); };
  for (Controller* controller : controllers()) {
    kube::WorkQueueOptions options;
    options.base_delay = std::chrono::milliseconds(50);
    options.max_delay = std::chrono::seconds(30);
    controller->queue = std::make_unique<kube::WorkQueue>(options, clock_);
  }
  add_handlers();

  metrics_.add_collector([this](daemon::Metrics& m) {
    m.set("k8s4r_manager_leader", {}, leading_ ? 1 : 0);
    for (Controller* controller : controllers()) {
      const auto queue = controller->queue->metrics();
      const daemon::Labels labels{{"controller", controller->name}};
      m.set("k8s4r_manager_work_queue_depth", labels, static_cast<double>(queue.depth));
      m.set("k8s4r_manager_work_queue_wait_seconds_total", labels,
            std::chrono::duration<double>(queue.wait_total).count());
      m.set("k8s4r_manager_work_queue_processed_total", labels, static_cast<double>(queue.processed));
      m.set("k8s4r_manager_work_queue_retries_total", labels, static_cast<double>(queue.retries));
    }
    const auto stats = client_.stats();
    m.set("k8s4r_manager_kube_client_requests_total", {{"kind", "request"}}, static_cast<double>(stats.requests));
    m.set("k8s4r_manager_kube_client_requests_total", {{"kind", "retry"}}, static_cast<double>(stats.retries));
    m.set("k8s4r_manager_events_total", {{"result", "created"}}, static_cast<double>(events_->created()));
    m.set("k8s4r_manager_events_total", {{"result", "dropped"}}, static_cast<double>(events_->dropped()));
    std::map<std::string, int> phases;
    for (const auto& robot : robots_->list()) {
      const auto phase = crd::read_robot(*robot).phase;
      ++phases[phase ? std::string(crd::to_string(*phase)) : "Pending"];
    }
    for (const char* phase : {"Pending", "Online", "Offline", "Unknown", "Rejected"})
      m.set("k8s4r_manager_robots", {{"phase", phase}}, phases[phase]);
  });
}

Manager::~Manager() { stop(); }

Timestamp Manager::now() const { return clock_.wall(); }

void Manager::add_handlers() {
  const auto enqueue = [](Controller& controller) {
    return [&controller](const kube::ObjectPtr& object) { controller.queue->add(key_of(*object)); };
  };
  // Robots: their own controller; the groups with Tasks on one whose phase,
  // heartbeat or running tasks changed (lost Tasks); the groups waiting for
  // a robot and system groups, when what fits may have changed.
  const auto robot_changed = [this](const kube::ObjectPtr& old_robot, const kube::ObjectPtr& robot) {
    robot_controller_.queue->add(key_of(*robot));
    static const json none;
    const json& before = old_robot ? *old_robot : none;
    const auto differs = [&](std::initializer_list<const char*> path) {
      return crd::value_at(before, path) != crd::value_at(*robot, path);
    };
    const bool fit_changed = !old_robot || differs({"status", "phase"}) || differs({"spec", "labels"}) ||
                             differs({"spec", "unschedulable"}) || differs({"spec", "drain"}) ||
                             differs({"status", "deviceInfo"});
    const bool tasks_changed = fit_changed || differs({"status", "runningTasks"}) ||
                               differs({"status", "endedTasks"}) || differs({"status", "lastHeartbeatTime"}) ||
                               differs({"status", "reportSeq"}) || differs({"status", "newestDispatch"});
    if (tasks_changed) enqueue_groups_on_robot(key_of(*robot), fit_changed);
    if (fit_changed) enqueue_waiting_groups();
    // What it is to keep ahead of need follows its labels and approval; the
    // caches' statuses follow what it says it holds.
    if (!old_robot || differs({"status", "phase"}) || differs({"spec", "labels"}))
      prefetch_controller_.queue->add(key_of(*robot));
    if (!old_robot || differs({"status", "phase"}) || differs({"spec", "labels"}) || differs({"status", "artifacts"}) ||
        differs({"status", "prefetch"}))
      enqueue_artifact_caches_of(crd::string_at(*robot, {"metadata", "namespace"}));
  };
  robots_->add_handler(
      kube::EventHandler{[robot_changed](const kube::ObjectPtr& robot) { robot_changed(nullptr, robot); },
                         robot_changed,
                         [this](const kube::ObjectPtr& robot, bool) {
                           enqueue_groups_on_robot(key_of(*robot), true);
                           enqueue_waiting_groups();
                           enqueue_artifact_caches_of(crd::string_at(*robot, {"metadata", "namespace"}));
                         },
                         {}});
  // An ArtifactCache: its status, and what each robot of its namespace keeps.
  const auto artifact_cache_changed = [this](const kube::ObjectPtr& cache) {
    artifact_cache_controller_.queue->add(key_of(*cache));
    const std::string ns = crd::string_at(*cache, {"metadata", "namespace"});
    for (const auto& robot : robots_->list())
      if (crd::string_at(*robot, {"metadata", "namespace"}) == ns) prefetch_controller_.queue->add(key_of(*robot));
  };
  artifact_caches_->add_handler(kube::EventHandler{
      artifact_cache_changed,
      [artifact_cache_changed](const kube::ObjectPtr&, const kube::ObjectPtr& cache) { artifact_cache_changed(cache); },
      [artifact_cache_changed](const kube::ObjectPtr& cache, bool) { artifact_cache_changed(cache); },
      kube::generation_changed});
  const auto secret_changed = [this](const kube::ObjectPtr& secret) {
    const std::string robot = crd::string_at(*secret, {"metadata", "labels", crd::kRobotIdLabel});
    if (!robot.empty()) robot_controller_.queue->add(crd::string_at(*secret, {"metadata", "namespace"}) + "/" + robot);
  };
  secrets_->add_handler(kube::EventHandler{
      secret_changed,
      [secret_changed](const kube::ObjectPtr&, const kube::ObjectPtr& secret) { secret_changed(secret); },
      [secret_changed](const kube::ObjectPtr& secret, bool) { secret_changed(secret); },
      {}});
  jobs_->add_handler(kube::EventHandler{
      enqueue(job_controller_),
      [this](const kube::ObjectPtr&, const kube::ObjectPtr& job) {
        job_controller_.queue->add(key_of(*job));
        // A Job's selector or type is read by its groups' placement.
        for (const auto& group : groups_->by_index("owner", crd::string_at(*job, {"metadata", "uid"})))
          group_controller_.queue->add(key_of(*group));
      },
      {},
      kube::generation_changed});
  const auto group_changed = [this](const kube::ObjectPtr& group) {
    group_controller_.queue->add(key_of(*group));
    if (std::string job = owner_key(*group, "Job"); !job.empty()) job_controller_.queue->add(job);
  };
  groups_->add_handler(kube::EventHandler{
      group_changed,
      [this, group_changed](const kube::ObjectPtr& old_group, const kube::ObjectPtr& group) {
        group_changed(group);
        // A group that has completed or failed may be what another group of
        // its Job waits for (its outputs): they look again.
        const std::string state = crd::string_at(*group, {"status", "state"});
        if (state == crd::string_at(*old_group, {"status", "state"}) || (state != "completed" && state != "failed"))
          return;
        for (const json& owner : crd::value_at(*group, {"metadata", "ownerReferences"})) {
          if (!owner.is_object() || owner.value("kind", "") != "Job") continue;
          for (const auto& sibling : groups_->by_index("owner", owner.value("uid", "")))
            if (sibling != group) group_controller_.queue->add(key_of(*sibling));
        }
      },
      [this](const kube::ObjectPtr& group, bool) {
        {
          std::lock_guard lock(mutex_);
          waiting_.erase(key_of(*group));
          system_groups_.erase(key_of(*group));
        }
        if (std::string job = owner_key(*group, "Job"); !job.empty()) job_controller_.queue->add(job);
      },
      {}});
  // Tasks: the load cache, the expectations, their group; a Task that ends
  // or goes may make room for a waiting group.
  const auto seen = [this](const json& task, bool gone) {
    const std::string key = key_of(task);
    const auto state = crd::read_task(task).state;
    std::lock_guard lock(mutex_);
    expected_.erase(key);
    if ((state && *state != crd::TaskState::pending) || gone) dispatch_expected_.erase(key);
    if ((state && crd::is_terminal(*state)) || gone) missing_since_.erase(crd::string_at(task, {"metadata", "uid"}));
    if (state != crd::TaskState::dispatching || gone)
      seen_dispatching_.erase(crd::string_at(task, {"metadata", "uid"}));
  };
  // A Task dispatched with a cache key that has just completed: its run may
  // be stored. Only as it completes, never from a relist: an entry deleted
  // (by hand, or as too old) does not come back from a Task that ended long
  // ago. A run that completes while no manager runs is not stored: a miss.
  const auto store = [this](const json& old_task, const json& task) {
    if (crd::string_at(task, {"status", "cacheKey"}).empty()) return;
    if (crd::read_task(task).state == crd::TaskState::completed &&
        crd::read_task(old_task).state != crd::TaskState::completed)
      cache_controller_.queue->add(key_of(task));
  };
  // A Task on a robot being drained: the drain looks again (what is left).
  const auto drain_of = [this](const json& task) {
    const std::string robot = crd::read_task(task).target_robot;
    if (robot.empty()) return;
    const std::string ns = crd::string_at(task, {"metadata", "namespace"});
    const kube::ObjectPtr found = robots_->get(ns, robot);
    if (found &&
        (!crd::value_at(*found, {"spec", "drain"}).is_null() || !crd::value_at(*found, {"status", "drain"}).is_null()))
      robot_controller_.queue->add(ns + "/" + robot);
  };
  tasks_->add_handler(
      kube::EventHandler{[this, seen, drain_of](const kube::ObjectPtr& task) {
                           seen(*task, false);
                           load_.observe(*task);
                           enqueue_group_of_task(*task);
                           drain_of(*task);
                         },
                         [this, seen, store, drain_of](const kube::ObjectPtr& old_task, const kube::ObjectPtr& task) {
                           seen(*task, false);
                           load_.observe(*task);
                           enqueue_group_of_task(*task);
                           drain_of(*task);
                           store(*old_task, *task);
                           const auto before = crd::read_task(*old_task).state, after = crd::read_task(*task).state;
                           if (after && crd::is_terminal(*after) && !(before && crd::is_terminal(*before)))
                             enqueue_waiting_groups();
                         },
                         [this, seen, drain_of](const kube::ObjectPtr& task, bool) {
                           seen(*task, true);
                           load_.forget(key_of(*task));
                           enqueue_group_of_task(*task);
                           drain_of(*task);
                           enqueue_waiting_groups();
                         },
                         {}});
}

std::string Manager::owner_group(const json& task) { return owner_key(task, "TaskGroup"); }

void Manager::enqueue_group_of_task(const json& task) {
  if (std::string group = owner_key(task, "TaskGroup"); !group.empty()) {
    group_controller_.queue->add(group);
  } else {
    task_controller_.queue->add(key_of(task));  // a Task of its own
  }
}

void Manager::enqueue_groups_on_robot(const std::string& robot_key, bool with_system_groups) {
  std::set<std::string> groups;
  for (const auto& task : tasks_->by_index("robot", robot_key)) {
    const auto state = crd::read_task(*task).state;
    if (state && crd::is_terminal(*state)) continue;  // nothing of it depends on the robot any more
    if (std::string group = owner_key(*task, "TaskGroup"); !group.empty()) {
      groups.insert(group);
    } else {
      task_controller_.queue->add(key_of(*task));  // a Task of its own: its robot changed, or came
    }
  }
  std::lock_guard lock(mutex_);
  if (with_system_groups) groups.insert(system_groups_.begin(), system_groups_.end());
  for (const std::string& group : groups) group_controller_.queue->add(group);
}

void Manager::enqueue_waiting_groups() {
  std::lock_guard lock(mutex_);
  for (const std::string& group : waiting_) group_controller_.queue->add(group);
}

void Manager::start() {
  spdlog::info("k8s4r-manager: watching {}",
               config_.namespace_.empty() ? "every namespace" : "namespace " + config_.namespace_);
  if (!config_.require_robot_token) {
    spdlog::warn(
        "every robot that registers is approved (--require-robot-token=false): anyone who reaches the broker can "
        "join the fleet and be given work. The default approves a robot only by its Secret k8s4r-robot-<robot id> "
        "(key token, label {}=<robot id>) (docs/security.md)",
        crd::kRobotIdLabel);
  }
  for (auto* informer : {robots_.get(), secrets_.get(), jobs_.get(), groups_.get(), tasks_.get()}) informer->start();
  // Not waited for by lead(): a cluster without the TaskCacheEntry CRD (an
  // older install) runs every Task, as without a cache (result_store.cpp).
  cache_entries_->start();
  // Nor this: without the ArtifactCache CRD, nothing is kept ahead of need.
  artifact_caches_->start();
}

void Manager::lead() {
  if (stopping_ || leading_.exchange(true)) return;
  for (auto* informer : {robots_.get(), secrets_.get(), jobs_.get(), groups_.get(), tasks_.get()}) {
    while (!stopping_ && !informer->wait_for_sync(std::chrono::milliseconds(500))) {
    }
  }
  std::lock_guard lifecycle(lifecycle_mutex_);
  if (stopping_) return;
  spdlog::info("caches synced: {} robot(s), {} job(s), {} task group(s), {} task(s); controllers starting",
               robots_->list().size(), jobs_->list().size(), groups_->list().size(), tasks_->list().size());
  for (Controller* controller : controllers()) {
    for (int i = 0; i < controller->workers; ++i)
      controller->threads.emplace_back([this, controller] { run_worker(*controller); });
  }
  cache_controller_.queue->add(kCacheGarbageKey);  // then every kCacheGarbageInterval
}

void Manager::run_worker(Controller& controller) {
  while (auto key = controller.queue->get()) {
    const auto started = clock_.steady();
    Outcome outcome;
    try {
      outcome = controller.reconcile(*key);
    } catch (const std::exception& error) {
      // A broken invariant in one object's reconcile must not stop the others.
      spdlog::error("{} {}: reconcile threw: {}", controller.name, *key, error.what());
      outcome.failed = true;
    }
    metrics_.observe("k8s4r_manager_reconcile_seconds", {{"controller", controller.name}},
                     std::chrono::duration<double>(clock_.steady() - started).count());
    const char* result = outcome.failed ? "error" : outcome.requeue_after ? "requeue" : "ok";
    metrics_.add("k8s4r_manager_reconciles_total", {{"controller", controller.name}, {"result", result}});
    if (outcome.failed) {
      controller.queue->add_rate_limited(*key);
    } else {
      controller.queue->forget(*key);
      if (outcome.requeue_after) controller.queue->add_after(*key, *outcome.requeue_after);
    }
    controller.queue->done(*key);
  }
}

void Manager::count_write(const std::string& verb, int code) {
  metrics_.add("k8s4r_manager_kube_requests_total", {{"verb", verb}, {"code", std::to_string(code)}});
}

void Manager::record(const json& object, const std::string& type, const std::string& reason,
                     const std::string& message) {
  events_->record(object, type, reason, message);
}

std::string Manager::not_ready_reason() const {
  for (const auto& [name, informer] :
       {std::pair{"robots", robots_.get()}, std::pair{"secrets", secrets_.get()}, std::pair{"jobs", jobs_.get()},
        std::pair{"taskgroups", groups_.get()}, std::pair{"tasks", tasks_.get()}}) {
    if (!informer->has_synced()) return std::string(name) + " not synced";
  }
  return "";
}

void Manager::stop() {
  if (stopping_.exchange(true)) return;
  std::lock_guard lifecycle(lifecycle_mutex_);
  for (Controller* controller : controllers()) {
    if (controller->queue) controller->queue->shut_down();
    for (auto& thread : controller->threads) thread.join();
    controller->threads.clear();
  }
  leading_ = false;
  if (events_) events_->stop();
  for (auto* informer : {robots_.get(), secrets_.get(), jobs_.get(), groups_.get(), tasks_.get(), cache_entries_.get(),
                         artifact_caches_.get()})
    if (informer) informer->stop();
}

}  // namespace k8s4r::manager
