// The Robot controller's cordon and drain steps. Cordon: since when, in
// status.cordonedAt, with an Event. Drain (robot_drain.h): the Robot's Tasks and
// their Jobs' types from the caches, the plan, then its writes: each Task
// to stop gets the DisruptionTarget condition (conditional on the version
// judged, so a report that came in meanwhile is judged again) and an Event,
// and one never sent is ended; then the Robot's status.drain and its Event. Looked at again at the
// deadline, and whenever a Task on a draining robot changes (manager.cpp).
#include "k8s4r/manager/manager.h"
#include "k8s4r/manager/robot_drain.h"

#include "k8s4r/crd/resources.h"

#include <spdlog/spdlog.h>

namespace k8s4r::manager {

using nlohmann::json;

std::optional<json> Manager::write_robot_status(const std::string& ns, const std::string& name,
                                                const std::string& field, const json& value, Outcome& outcome) {
  auto written =
      counted("patch_status", client_.merge_patch(crd::kRobots, ns, name, {{"status", {{field, value}}}}, true));
  if (written) return std::move(written.value());
  if (!written.error().not_found()) {
    spdlog::warn("robot {}/{}: writing status.{}: {}", ns, name, field, written.error().to_string());
    outcome.failed = true;
  }
  return std::nullopt;
}

void Manager::reconcile_cordon(const kube::ObjectPtr& robot, Outcome& outcome) {
  // Since when it is cordoned (spec.unschedulable, or a drain), in
  // status.cordonedAt, with an Event as it changes: written once each way.
  const bool cordoned =
      crd::value_at(*robot, {"spec", "unschedulable"}) == true || crd::value_at(*robot, {"spec", "drain"}).is_object();
  const bool said = !crd::value_at(*robot, {"status", "cordonedAt"}).is_null();
  if (cordoned == said) return;
  const std::string ns = crd::string_at(*robot, {"metadata", "namespace"});
  const std::string name = crd::string_at(*robot, {"metadata", "name"});
  const auto written =
      write_robot_status(ns, name, "cordonedAt", cordoned ? json(format_rfc3339(now())) : json(nullptr), outcome);
  if (!written) return;
  spdlog::info("robot {}/{}: {}", ns, name, cordoned ? "cordoned" : "uncordoned");
  record(*written, "Normal", cordoned ? "Cordoned" : "Uncordoned",
         cordoned ? "no new task is placed on it (spec.unschedulable" +
                        std::string(crd::value_at(*robot, {"spec", "drain"}).is_object() ? ", spec.drain" : "") + ")"
                  : "it takes new tasks again");
}

void Manager::reconcile_drain(const kube::ObjectPtr& robot, Outcome& outcome) {
  const json& spec = crd::value_at(*robot, {"spec", "drain"});
  const json& status = crd::value_at(*robot, {"status", "drain"});
  if (spec.is_null() && status.is_null()) return;  // never drained: the common case costs nothing
  const std::string ns = crd::string_at(*robot, {"metadata", "namespace"});
  const std::string name = crd::string_at(*robot, {"metadata", "name"});
  DrainView view;
  view.robot = *robot;
  view.now = now();
  const auto tasks = tasks_->by_index("robot", ns + "/" + name);
  for (const auto& task : tasks) {
    DrainTask entry{task.get(), ""};
    if (!owner_group(*task).empty()) {
      entry.job_type = "batch";
      const std::string job = crd::string_at(*task, {"spec", "jobName"});
      if (const kube::ObjectPtr found = jobs_->get(ns, job)) {
        const std::string type = crd::string_at(*found, {"spec", "type"});
        if (!type.empty()) entry.job_type = type;
      }
    }
    view.tasks.push_back(entry);
  }
  DrainPlan plan = plan_drain(view);
  if (plan.requeue_after) outcome.after(*plan.requeue_after);

  for (const auto& [task, why] : plan.stops)
    ask_to_stop(task, std::string(crd::kStopDrained), why, outcome);  // stop_requests.cpp
  // Written even when a stop above must be tried again: its startedAt (the
  // deadline's start) is kept from the first write on.
  if (!plan.status) return;
  const auto written = write_robot_status(ns, name, "drain", *plan.status, outcome);
  if (!written) return;
  if (!plan.status->is_null())
    spdlog::info("robot {}/{}: drain {}: {}", ns, name, plan.status->value("state", ""),
                 plan.status->value("message", ""));
  for (const PlannedEvent& event : plan.events) record(*written, event.type, event.reason, event.message);
}

}  // namespace k8s4r::manager
