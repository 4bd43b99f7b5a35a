// The TaskGroup controller: read what the caches show of a group (a
// GroupView), plan with plan_group (pure), then apply the plan: delete,
// mark lost, place and create, set dispatching, record Events, write the
// group's status. See k8s4r/manager/plan_group.h for what is decided.
#include "k8s4r/manager/manager.h"

#include "k8s4r/common/rfc3339.h"
#include "k8s4r/crd/resources.h"
#include "k8s4r/manager/plan_group.h"
#include "k8s4r/manager/status_rollup.h"
#include "k8s4r/manager/templates.h"

#include <spdlog/spdlog.h>

#include <cstdlib>

namespace k8s4r::manager {

using nlohmann::json;

GroupView Manager::view_of_group(const std::string& ns, const std::string& name) {
  GroupView view;
  const kube::ObjectPtr group = groups_->get(ns, name);
  if (!group) return view;
  view.group = *group;
  if (const kube::ObjectPtr job = jobs_->get(ns, crd::string_at(*group, {"spec", "jobName"}))) view.job = *job;
  view.now = now();
  view.dispatch_timeout = config_.dispatch_timeout;
  view.disconnect_grace = config_.disconnect_grace;
  view.disconnect_stop_after = config_.disconnect_stop_after;
  view.disconnect_margin = config_.disconnect_margin;
  for (const auto& task : tasks_->by_index("owner", crd::string_at(*group, {"metadata", "uid"}))) {
    view.tasks.push_back(*task);
    const crd::TaskView t = crd::read_task(*task);
    if (!t.target_robot.empty() && !view.robots.count(t.target_robot)) {
      if (const kube::ObjectPtr robot = robots_->get(ns, t.target_robot)) view.robots[t.target_robot] = *robot;
    }
    const std::string key = ns + "/" + t.name;
    if (t.target_robot.empty()) {
      if (std::string assumed = load_.robot_of(key); !assumed.empty()) view.assumed_robots[key] = assumed;
    }
  }
  if (crd::string_at(view.job, {"spec", "type"}) == "system") view.robot_facts = robot_facts_for(ns, ns + "/" + name);
  view.producers = producers_of(view.group, view.job);
  std::lock_guard lock(mutex_);
  for (const json& task : view.tasks) {
    const std::string uid = crd::string_at(task, {"metadata", "uid"});
    if (auto since = missing_since_.find(uid); since != missing_since_.end()) view.missing_since.insert(*since);
  }
  const auto steady = clock_.steady();
  for (auto it = expected_.begin(); it != expected_.end();) {
    // An expectation the cache never met in kExpectationTimeout is
    // forgotten (client-go's 5 minutes): a Task deleted before the cache
    // ever showed it is made again.
    if (steady - it->second >= kExpectationTimeout) {
      it = expected_.erase(it);
      continue;
    }
    if (it->first.rfind(ns + "/", 0) == 0) view.expected_creates.insert(it->first);
    ++it;
  }
  view.expected_dispatches = dispatch_expected_;
  return view;
}

std::map<std::string, ProducerOutputs> Manager::producers_of(const json& group, const json& job) {
  std::map<std::string, ProducerOutputs> producers;
  auto references = output_references(crd::value_at(group, {"spec"}));
  if (!references || job.is_null()) return producers;
  const std::string ns = crd::string_at(group, {"metadata", "namespace"});
  const std::string job_name = crd::string_at(job, {"metadata", "name"});
  for (const OutputReference& reference : references.value()) {
    if (producers.count(reference.group)) continue;
    ProducerOutputs& producer = producers[reference.group];
    const kube::ObjectPtr made = groups_->get(ns, object_name({job_name, reference.group}));
    // Only this Job's group of that name: not one of a Job deleted and made
    // again that is still going, nor another Job's whose name joins the same.
    bool owned = false;
    if (made) {
      for (const json& owner : crd::value_at(*made, {"metadata", "ownerReferences"}))
        owned |= owner.is_object() && owner.value("uid", "") == crd::string_at(job, {"metadata", "uid"});
    }
    if (!made || !owned || !crd::value_at(*made, {"metadata", "deletionTimestamp"}).is_null() ||
        crd::string_at(*made, {"spec", "groupName"}) != reference.group)
      continue;  // not made yet: waiting
    const std::string state = crd::string_at(*made, {"status", "state"});
    if (state == "failed") {
      producer.state = ProducerOutputs::State::failed;
      producer.why = crd::string_at(*made, {"status", "statusDescription"});
    } else if (state == "completed") {
      // Each task's newest completed attempt (of a group of count 1, one
      // replica); none in the cache yet: waiting, not "declared none".
      std::map<std::string, int> attempt_of_task;
      for (const auto& task : tasks_->by_index("owner", crd::string_at(*made, {"metadata", "uid"}))) {
        if (crd::read_task(*task).state != crd::TaskState::completed) continue;
        producer.state = ProducerOutputs::State::completed;
        const std::string name = crd::string_at(*task, {"spec", "name"});
        const std::string attempt_label = crd::string_at(*task, {"metadata", "labels", kAttemptLabel});
        const int attempt = attempt_label.empty() ? 0 : std::atoi(attempt_label.c_str());
        if (auto seen = attempt_of_task.find(name); seen != attempt_of_task.end() && seen->second > attempt) continue;
        attempt_of_task[name] = attempt;
        const json& outputs = crd::value_at(*task, {"status", "outputs"});
        if (outputs.is_object()) {
          producer.outputs[name] = outputs;
        } else {
          producer.outputs.erase(name);
        }
      }
    }
  }
  return producers;
}

bool Manager::mark_lost(const json& task, const std::string& why) {
  const crd::TaskView view = crd::read_task(task);
  // Conditional on the version judged: a report that came in meanwhile wins,
  // and the Task is judged again from it.
  const json patch = {
      {"metadata", {{"resourceVersion", crd::string_at(task, {"metadata", "resourceVersion"})}}},
      {"status", {{"state", "failed"}, {"reason", "Lost"}, {"message", why}, {"finishedAt", format_rfc3339(now())}}}};
  auto written = counted("patch_status", client_.merge_patch(crd::kTasks, view.namespace_, view.name, patch, true));
  if (!written) {
    if (written.error().not_found() || written.error().conflict()) return true;  // judged again from the event
    spdlog::warn("task {}/{}: marking it lost: {}", view.namespace_, view.name, written.error().to_string());
    return false;
  }
  spdlog::warn("task {}/{} lost: {}", view.namespace_, view.name, why);
  metrics_.add("k8s4r_manager_lost_tasks_total");
  record(written.value(), "Warning", "Lost", why);
  return true;
}

Manager::Outcome Manager::reconcile_group(const std::string& key) {
  const ObjectName object_name = split_key(key);
  const std::string &ns = object_name.namespace_, &name = object_name.name;
  const GroupView view = view_of_group(ns, name);
  GroupPlan plan = plan_group(view);
  return apply_group_plan(key, view, plan);
}

Manager::Outcome Manager::apply_group_plan(const std::string& key, const GroupView& view, GroupPlan& plan) {
  Outcome outcome;
  const ObjectName object_name = split_key(key);
  const std::string &ns = object_name.namespace_, &name = object_name.name;
  const auto forget_group = [&] {
    std::lock_guard lock(mutex_);
    waiting_.erase(key);
    system_groups_.erase(key);
  };
  if (plan.gone) {
    forget_group();
    return outcome;
  }
  {
    std::lock_guard lock(mutex_);
    if (plan.system)
      system_groups_.insert(key);
    else
      system_groups_.erase(key);
    for (const auto& [uid, since] : plan.missing_since) {
      if (since)
        missing_since_.emplace(uid, *since);
      else
        missing_since_.erase(uid);
    }
  }
  const auto record_events = [&] {
    for (const PlannedEvent& event : plan.events) record(event.object, event.type, event.reason, event.message);
  };
  if (plan.invalid_status) {
    add_conditions(*plan.invalid_status, view.group, format_rfc3339(now()));
    if (status_differs(view.group, *plan.invalid_status)) {  // said once, not on every pass
      auto written = counted("patch_status",
                             client_.merge_patch(crd::kTaskGroups, ns, name, {{"status", *plan.invalid_status}}, true));
      if (!written && !written.error().not_found()) outcome.failed = true;
      record_events();
    }
    forget_group();
    return outcome;
  }
  record_events();
  if (plan.requeue_after) outcome.after(*plan.requeue_after);

  for (const json& task : plan.deletes) {
    const crd::TaskView t = crd::read_task(task);
    const json options = {{"preconditions", {{"uid", t.uid}}}, {"propagationPolicy", "Background"}};
    auto removed = counted("delete", client_.remove(crd::kTasks, ns, t.name, options));
    if (!removed && !removed.error().not_found() && !removed.error().conflict()) outcome.failed = true;
    if (removed) {
      spdlog::info("task {}/{} deleted: replica {} is no longer wanted", ns, t.name,
                   crd::string_at(task, {"metadata", "labels", "replica"}));
    }
  }
  for (const auto& [task, why] : plan.lost) {
    if (!mark_lost(task, why)) outcome.failed = true;
  }
  for (const std::string& reason : plan.reschedules)
    metrics_.add("k8s4r_manager_reschedules_total", {{"reason", reason}});

  int unschedulable = 0, waiting = 0;
  std::string why_waiting;  // the first replica's reason, said on the group and its Job
  std::vector<std::pair<Unplaced, std::shared_ptr<const Placement>>> writes;
  std::optional<std::vector<RobotFacts>> robots_seen;
  for (const auto& [task, why] : plan.stops)
    ask_to_stop(task, std::string(crd::kStopRolloutAborted), why, outcome);  // stop_requests.cpp
  if (!plan.placements.empty()) {
    auto needs = replica_needs(view.job, view.group);
    if (plan.per_label) {
      needs.value().rollout_label = plan.per_label->label;
      needs.value().rollout_max = plan.per_label->max_in_flight;
    }
    for (ReplicaPlan& replica : plan.placements) {
      auto placement = std::make_shared<const Placement>(plan_replica(
          view.group, needs.value(), replica.only_robot, replica.sibling_robot, replica.tasks, robots_seen));
      if (!placement->robot) {
        ++unschedulable;
        waiting += static_cast<int>(replica.tasks.size());
        if (why_waiting.empty()) why_waiting = "no robot fits: " + placement->why;
      }
      for (Unplaced& item : replica.tasks) writes.emplace_back(std::move(item), placement);
    }
  }
  for (const json& task : plan.dispatches) {
    const crd::TaskView t = crd::read_task(task);
    // Labelled with its robot's slot first (a Task placed before slots
    // existed, or named its robot itself), for the bridge replica of that slot.
    Outcome labelling;
    const auto version = label_with_slot(task, t.target_robot, key_of(task), labelling);
    if (!version) {
      outcome.failed = outcome.failed || labelling.failed;
      continue;
    }
    // Conditional on the version judged: a cache behind a report must not
    // set a running Task back to dispatching.
    const json patch = {{"metadata", {{"resourceVersion", *version}}},
                        {"status", {{"state", "dispatching"}, {"message", "placed on robot " + t.target_robot}}}};
    auto written = counted("patch_status", client_.merge_patch(crd::kTasks, ns, t.name, patch, true));
    if (!written && !written.error().not_found() && !written.error().conflict()) outcome.failed = true;
  }
  write_placements(writes, outcome);
  {
    std::lock_guard lock(mutex_);
    if (unschedulable)
      waiting_.insert(key);
    else
      waiting_.erase(key);
  }
  with_unplaced(plan.status, waiting, why_waiting);
  add_conditions(plan.status, view.group, format_rfc3339(now()));
  if (status_differs(view.group, plan.status)) {
    auto written =
        counted("patch_status", client_.merge_patch(crd::kTaskGroups, ns, name, {{"status", plan.status}}, true));
    if (!written && !written.error().not_found()) outcome.failed = true;
  }
  return outcome;
}

}  // namespace k8s4r::manager
