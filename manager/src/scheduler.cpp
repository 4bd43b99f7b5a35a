// The scheduler: a replica's unplaced Tasks go to one robot together, as
// Nomad places an allocation. The robots' facts come from the Robot cache
// and their load from RobotLoad (fed by the Task informer, and by this
// scheduler's own placements the moment they are made), so a decision reads
// each robot once and never scans Tasks. Decisions are made one at a time,
// so two workers never both fill the last room on a robot.
//
// A placed Task gets spec.targetRobot, its robot's slot label
// (robot.k8s4r.io/slot, common/slots.h) and the scheduled-at annotation (in
// its create, or in a patch conditional on the version judged) and then
// status.state dispatching, which the bridge acts on. A Task nothing fits
// stays pending with the reason, and its group waits for a robot to change.
//
// A batch Job's Task that asks for caching (spec.cache) is keyed for the
// robot it was placed on (its class: os, arch, keyLabels); a fresh
// TaskCacheEntry with that key in its namespace completes it there and then,
// undispatched, with the entry's result (CacheHit). Otherwise it is
// dispatched with its key in the same status write (status.cacheKey), so its
// successful run is stored (result_store.cpp).
#include "k8s4r/manager/manager.h"

#include "k8s4r/crd/resources.h"
#include "k8s4r/manager/result_cache.h"
#include "k8s4r/manager/task_liveness.h"

#include "k8s4r/common/slots.h"

#include <spdlog/spdlog.h>

#include <atomic>
#include <thread>

namespace k8s4r::manager {

using nlohmann::json;

std::vector<RobotFacts> Manager::robot_facts_for(const std::string& namespace_, const std::string& group) const {
  std::vector<RobotFacts> out;
  for (const auto& robot : robots_->list()) {
    if (crd::string_at(*robot, {"metadata", "namespace"}) != namespace_) continue;
    RobotFacts facts = robot_facts(*robot);
    if (auto heartbeat = crd::timestamp_at(*robot, {"status", "lastHeartbeatTime"}))
      facts.silent_for = elapsed(*heartbeat, now());
    load_.fill(facts, namespace_ + "/" + facts.name, group);
    out.push_back(std::move(facts));
  }
  return out;
}

Placement Manager::plan_replica(const json& task_group, const TaskNeeds& needs, const std::string& only_robot,
                                const std::string& sibling_robot, const std::vector<Unplaced>& tasks,
                                std::optional<std::vector<RobotFacts>>& robots_seen) {
  const std::string ns = crd::string_at(task_group, {"metadata", "namespace"});
  const std::string group_key = key_of(task_group);
  TaskNeeds replica = needs;
  replica.cpu_milli = replica.memory_bytes = 0;
  LivenessInputs liveness;
  liveness.disconnect_stop_after = config_.disconnect_stop_after;
  liveness.disconnect_margin = config_.disconnect_margin;
  for (const Unplaced& item : tasks) {
    replica.cpu_milli += item.cpu_milli;
    replica.memory_bytes += item.memory_bytes;
    if (auto after = lost_after(item.task, liveness); after && (!replica.lost_after || *after < *replica.lost_after))
      replica.lost_after = after;
  }
  Placement placement;
  {
    std::lock_guard lock(schedule_mutex_);
    const auto started = clock_.steady();
    // The robots' facts are read once per reconcile; their load, which each
    // decision changes, before every decision.
    if (!robots_seen) robots_seen = robot_facts_for(ns, group_key);
    std::vector<RobotFacts>& robots = *robots_seen;
    for (RobotFacts& facts : robots) load_.fill(facts, ns + "/" + facts.name, group_key);
    // A rollout's perLabel limit: the group's tasks not ended, by the value
    // of the label on their robots (robots without it share one value).
    if (!needs.rollout_label.empty()) {
      const auto value_of = [&](const RobotFacts& facts) {
        auto found = facts.labels.find(needs.rollout_label);
        return found == facts.labels.end() ? std::string("\n") : found->second;  // "\n" is no label value
      };
      std::map<std::string, int> in_flight;
      for (const RobotFacts& facts : robots) in_flight[value_of(facts)] += facts.tasks_of_group;
      // The replica's tasks go together: all of them must fit under it, or,
      // a replica of more tasks than the limit, go where none is in flight.
      const int adding = static_cast<int>(tasks.size());
      for (RobotFacts& facts : robots) {
        const int there = in_flight[value_of(facts)];
        facts.rollout_full = there > 0 && there + adding > needs.rollout_max;
      }
    }
    const std::string& preferred = only_robot.empty() ? sibling_robot : only_robot;
    if (!preferred.empty()) {
      std::vector<RobotFacts> one;
      for (const RobotFacts& facts : robots)
        if (facts.name == preferred) one.push_back(facts);
      placement = place(replica, one);
      // Its sibling's robot is full (or its value of the rollout's label,
      // counting the sibling): elsewhere.
      if (!placement.robot && only_robot.empty()) placement = place(replica, robots);
    } else {
      placement = place(replica, robots);
    }
    metrics_.observe("k8s4r_manager_scheduling_seconds", {},
                     std::chrono::duration<double>(clock_.steady() - started).count());
    if (placement.robot) {
      for (const Unplaced& item : tasks)
        load_.assume(item.key, Claim{ns + "/" + *placement.robot, group_key, item.cpu_milli, item.memory_bytes});
    }
  }
  metrics_.add("k8s4r_manager_scheduling_decisions_total",
               {{"result", placement.robot ? "scheduled" : "unschedulable"}});
  return placement;
}

std::optional<json> Manager::cached_result(const Unplaced& item, const std::string& robot, std::string& key,
                                           std::string& not_cacheable) {
  key.clear();
  const json& task = item.task;
  auto request = cache_request(task);
  if (!request) {
    not_cacheable = request.error().to_string();
    return std::nullopt;
  }
  if (!request.value()) return std::nullopt;
  if (!item.job_type.empty() && item.job_type != "batch") {
    // Reused, a service's task would be replaced by one that also never
    // runs; a system job's work is on each robot.
    not_cacheable = "spec.cache: a " + item.job_type + " Job's tasks are not cached: their work is to run";
    return std::nullopt;
  }
  const std::string ns = crd::string_at(task, {"metadata", "namespace"});
  const kube::ObjectPtr robot_object = robots_->get(ns, robot);
  if (!robot_object) return std::nullopt;
  auto computed = cache_key(task, *request.value(), *robot_object);
  if (!computed) {
    not_cacheable = computed.error().to_string();
    return std::nullopt;
  }
  key = computed.value();
  // Not synced (or no CRD): a miss, so the Task runs, as without a cache.
  if (!cache_entries_->has_synced()) return std::nullopt;
  const kube::ObjectPtr entry = cache_entries_->get(ns, cache_entry_name(key).value());
  if (!entry) return std::nullopt;
  return cache_hit_status(*entry, key, *request.value(), now());
}

bool Manager::write_placement(Unplaced& item, const Placement& placement) {
  const std::string ns = crd::string_at(item.task, {"metadata", "namespace"});
  const std::string name = crd::string_at(item.task, {"metadata", "name"});
  const bool placed = placement.robot.has_value();
  std::string key, not_cacheable;
  const std::optional<json> reused = placed ? cached_result(item, *placement.robot, key, not_cacheable) : std::nullopt;
  const bool dispatch = placed && !reused;
  json status = reused     ? *reused
                : dispatch ? json{{"state", "dispatching"}, {"message", "placed on robot " + *placement.robot}}
                           : json{{"state", "pending"}, {"message", "no robot fits: " + placement.why}};
  // Where only the manager and the bridge write: the key its run is stored under.
  if (dispatch && !key.empty()) status["cacheKey"] = key;
  if (reused) load_.forget(item.key);  // runs nowhere
  if (!item.exists) {
    json task = std::move(item.task);
    if (dispatch) {
      task["spec"]["targetRobot"] = *placement.robot;
      task["metadata"]["annotations"][kScheduledAtAnnotation] = format_rfc3339(now(), TimePrecision::milliseconds);
      task["metadata"]["labels"][std::string(kSlotLabel)] = std::to_string(slot_of(*placement.robot));
    }
    {
      std::lock_guard lock(mutex_);
      expected_[item.key] = clock_.steady();
    }
    auto created = counted("create", client_.create(crd::kTasks, ns, task));
    if (!created) {
      {
        std::lock_guard lock(mutex_);
        expected_.erase(item.key);
      }
      load_.forget(item.key);  // the Task there, whatever it is, counts once the cache shows it
      if (created.error().already_exists()) return true;  // made before; judged again from the cache
      spdlog::warn("task {}: creating it: {}", item.key, created.error().to_string());
      return false;
    }
  } else if (placed) {
    json patch = {{"metadata", {{"resourceVersion", crd::string_at(item.task, {"metadata", "resourceVersion"})}}}};
    if (dispatch) {
      patch["metadata"]["annotations"][kScheduledAtAnnotation] = format_rfc3339(now(), TimePrecision::milliseconds);
      patch["metadata"]["labels"][std::string(kSlotLabel)] = std::to_string(slot_of(*placement.robot));
      patch["spec"]["targetRobot"] = *placement.robot;
    }
    auto patched = counted("patch", client_.merge_patch(crd::kTasks, ns, name, patch));
    if (!patched) {
      load_.forget(item.key);
      if (patched.error().not_found()) return true;
      if (!patched.error().conflict())
        spdlog::warn("task {}: placing it on {}: {}", item.key, *placement.robot, patched.error().to_string());
      return false;  // a conflict: judged again from the newer version
    }
  } else if (crd::string_at(item.task, {"status", "state"}) == "pending" &&
             crd::string_at(item.task, {"status", "message"}) == status["message"]) {
    return true;  // says so already
  }
  if (dispatch) {
    std::lock_guard lock(mutex_);
    dispatch_expected_.insert(item.key);
  }
  auto updated = counted("patch_status", client_.merge_patch(crd::kTasks, ns, name, {{"status", status}}, true));
  if (!updated) {
    std::lock_guard lock(mutex_);
    dispatch_expected_.erase(item.key);
    return updated.error().not_found();
  }
  if (!not_cacheable.empty()) record(updated.value(), "Warning", "NotCacheable", "runs uncached: " + not_cacheable);
  if (reused) {
    spdlog::info("task {}: {}", item.key, (*reused)["message"].get<std::string>());
    metrics_.add("k8s4r_manager_cache_lookups_total", {{"result", "hit"}});
    record(updated.value(), "Normal", "CacheHit", (*reused)["message"]);
  } else if (placed) {
    if (!key.empty()) metrics_.add("k8s4r_manager_cache_lookups_total", {{"result", "miss"}});
    spdlog::debug("task {} placed on robot {}", item.key, *placement.robot);
    std::string said = "placed on robot " + *placement.robot;
    if (placement.artifacts_wanted > 0) {
      said += ", which holds " + std::to_string(placement.artifacts_held) + " of the " +
              std::to_string(placement.artifacts_wanted) + " artifact(s) of its replica";
    }
    record(updated.value(), "Normal", "Scheduled", said);
  } else {
    spdlog::info("task {} pending: no robot fits: {}", item.key, placement.why);
    record(updated.value(), "Warning", "FailedScheduling", "no robot fits: " + placement.why);
  }
  return true;
}

void Manager::write_placements(std::vector<std::pair<Unplaced, std::shared_ptr<const Placement>>>& writes,
                               Outcome& outcome) {
  // Independent writes on different Tasks: several at once, so a Job of a
  // thousand Tasks waits on the API server's throughput, not its latency.
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  const auto work = [&] {
    for (std::size_t i = next++; i < writes.size(); i = next++) {
      try {
        if (!write_placement(writes[i].first, *writes[i].second)) failed = true;
      } catch (const std::exception& error) {
        // One Task's write must not end the daemon: the group is retried.
        spdlog::error("task {}: writing its placement threw: {}", writes[i].first.key, error.what());
        failed = true;
      }
    }
  };
  const std::size_t helpers = std::min<std::size_t>(kPlacementWriters - 1, writes.size() / 4);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < helpers; ++i) threads.emplace_back(work);
  work();
  for (auto& thread : threads) thread.join();
  if (failed) outcome.failed = true;
}

}  // namespace k8s4r::manager
