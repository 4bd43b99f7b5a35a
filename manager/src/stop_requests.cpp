// Asking a Task to stop without deleting it (a drained robot's, a rollout's
// that aborted): the DisruptionTarget condition with the reason, written
// conditional on the version judged (a report or a dispatch that came in
// meanwhile is judged again from its event), and an Event. A Task never set
// dispatching was never sent (only this manager sets that), so it is ended
// here in the same write; the bridge stops one dispatching or running on its
// robot, and the Task ends as the robot reports.
#include "k8s4r/manager/manager.h"

#include "k8s4r/crd/resources.h"

#include <spdlog/spdlog.h>

namespace k8s4r::manager {

using nlohmann::json;

void Manager::ask_to_stop(const json& task, const std::string& reason, const std::string& why, Outcome& outcome) {
  const crd::TaskView t = crd::read_task(task);
  const Timestamp at = now();
  json status = {
      {"conditions", crd::set_condition(task, {std::string(crd::kDisruptionTarget), "True", reason, why}, at)}};
  const bool unsent = !t.state || *t.state == crd::TaskState::pending;
  if (unsent) {
    status["state"] = "failed";
    status["reason"] = reason;
    status["message"] = (t.target_robot.empty() ? std::string("stopped before it was placed")
                                                : "stopped before it was sent to robot " + t.target_robot) +
                        ": " + why;
    status["finishedAt"] = format_rfc3339(at);
  }
  const json patch = {{"metadata", {{"resourceVersion", crd::string_at(task, {"metadata", "resourceVersion"})}}},
                      {"status", std::move(status)}};
  auto written = counted("patch_status", client_.merge_patch(crd::kTasks, t.namespace_, t.name, patch, true));
  if (!written) {
    if (written.error().not_found() || written.error().conflict()) return;  // judged again from its event
    spdlog::warn("task {}/{}: asking it to stop ({}): {}", t.namespace_, t.name, reason, written.error().to_string());
    outcome.failed = true;
    return;
  }
  spdlog::info("task {}/{}: {}: {}", t.namespace_, t.name, unsent ? "ended before it was sent" : "asked to stop", why);
  metrics_.add("k8s4r_manager_stop_requests_total", {{"reason", reason}});
  record(written.value(), "Normal", reason == crd::kStopDrained ? "Draining" : reason, why);
}

}  // namespace k8s4r::manager
