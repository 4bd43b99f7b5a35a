// The Task controller: Tasks of their own (no TaskGroup owns them), read,
// planned with plan_task (pure), written. A TaskGroup's Tasks are its
// controller's (task_group_controller.cpp).
#include "k8s4r/manager/manager.h"

#include "k8s4r/common/slots.h"
#include "k8s4r/crd/resources.h"
#include "k8s4r/manager/plan_task.h"

#include <spdlog/spdlog.h>

namespace k8s4r::manager {

using nlohmann::json;

Manager::Outcome Manager::reconcile_task(const std::string& key) {
  Outcome outcome;
  const ObjectName object_name = split_key(key);
  const std::string &ns = object_name.namespace_, &name = object_name.name;
  const kube::ObjectPtr task = tasks_->get(ns, name);
  if (!task || !owner_group(*task).empty()) return outcome;
  const crd::TaskView view = crd::read_task(*task);
  LivenessInputs inputs;
  const kube::ObjectPtr robot = view.target_robot.empty() ? nullptr : robots_->get(ns, view.target_robot);
  if (robot) inputs.robot = robot.get();
  inputs.now = now();
  inputs.dispatch_timeout = config_.dispatch_timeout;
  inputs.disconnect_grace = config_.disconnect_grace;
  inputs.disconnect_stop_after = config_.disconnect_stop_after;
  inputs.disconnect_margin = config_.disconnect_margin;
  {
    std::lock_guard lock(mutex_);
    if (auto since = missing_since_.find(view.uid); since != missing_since_.end()) inputs.missing_since = since->second;
    if (auto seen = seen_dispatching_.find(view.uid); seen != seen_dispatching_.end())
      inputs.seen_dispatching = seen->second;
  }
  const TaskPlan plan = plan_task(*task, inputs);
  {
    std::lock_guard lock(mutex_);
    if (plan.liveness.missing_since) {
      if (*plan.liveness.missing_since)
        missing_since_[view.uid] = **plan.liveness.missing_since;
      else
        missing_since_.erase(view.uid);
    }
    if (plan.liveness.seen_dispatching) seen_dispatching_.emplace(view.uid, *plan.liveness.seen_dispatching);
  }
  if (plan.liveness.recheck) outcome.after(*plan.liveness.recheck);
  if (!plan.status) return outcome;
  // Sent to the robot it names: labelled with that robot's slot first, as a
  // placed Task is (common/slots.h), so the bridge replica of that slot sees it.
  std::string version = crd::string_at(*task, {"metadata", "resourceVersion"});
  if (plan.status->value("state", "") == "dispatching") {
    const auto labelled = label_with_slot(*task, view.target_robot, key, outcome);
    if (!labelled) return outcome;
    version = *labelled;
  }
  // Conditional on the version judged: a report that came in meanwhile wins.
  const json patch = {{"metadata", {{"resourceVersion", version}}}, {"status", *plan.status}};
  auto written = counted("patch_status", client_.merge_patch(crd::kTasks, ns, name, patch, true));
  if (!written) {
    if (written.error().not_found() || written.error().conflict()) return outcome;  // judged again from the event
    spdlog::warn("task {}: {}", key, written.error().to_string());
    outcome.failed = true;
    return outcome;
  }
  if (plan.liveness.lost) {
    spdlog::warn("task {} lost: {}", key, *plan.liveness.lost);
    metrics_.add("k8s4r_manager_lost_tasks_total");
  }
  if (plan.event) record(written.value(), plan.event->type, plan.event->reason, plan.event->message);
  return outcome;
}

std::optional<std::string> Manager::label_with_slot(const json& task, const std::string& robot, const std::string& key,
                                                    Outcome& outcome) {
  const std::string version = crd::string_at(task, {"metadata", "resourceVersion"});
  const std::string slot = std::to_string(slot_of(robot));
  if (crd::string_at(task, {"metadata", "labels", kSlotLabel.data()}) == slot) return version;
  // Conditional too: the labelled version is then the judged one plus the label.
  const json labels = {{"metadata", {{"resourceVersion", version}, {"labels", {{std::string(kSlotLabel), slot}}}}}};
  const ObjectName object = split_key(key);
  auto labelled = counted("patch", client_.merge_patch(crd::kTasks, object.namespace_, object.name, labels));
  if (labelled) return crd::string_at(labelled.value(), {"metadata", "resourceVersion"});
  if (!labelled.error().not_found() && !labelled.error().conflict()) {
    spdlog::warn("task {}: labelling it with its slot: {}", key, labelled.error().to_string());
    outcome.failed = true;
  }
  return std::nullopt;
}

}  // namespace k8s4r::manager
