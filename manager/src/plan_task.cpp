#include "k8s4r/manager/plan_task.h"

#include "k8s4r/crd/resources.h"

namespace k8s4r::manager {

using nlohmann::json;

TaskPlan plan_task(const json& task, const LivenessInputs& inputs) {
  TaskPlan plan;
  const crd::TaskView view = crd::read_task(task);
  if (view.deleting || (view.state && crd::is_terminal(*view.state))) return plan;
  const auto say = [&](const std::string& state, const std::string& message, const char* type, const char* reason) {
    if (crd::string_at(task, {"status", "state"}) == state && crd::string_at(task, {"status", "message"}) == message)
      return;  // said already
    plan.status = json{{"state", state}, {"message", message}};
    if (reason) plan.event = PlannedEvent{task, type, reason, message};
  };
  if (!view.state || *view.state == crd::TaskState::pending) {
    if (crd::stop_request(task)) return plan;  // never sent: ended by its stop request (stop_requests.cpp)
    if (view.target_robot.empty()) {
      say("pending", "spec.targetRobot is not set: a Task of its own must name its robot (or belong to a Job)",
          "Warning", "NoRobot");
      return plan;
    }
    if (!inputs.robot) {
      say("pending", "robot " + view.target_robot + " does not exist", "Warning", "RobotNotFound");
      return plan;
    }
    const auto phase = crd::read_robot(*inputs.robot).phase;
    if (phase != crd::RobotPhase::online) {
      say("pending",
          "waiting for robot " + view.target_robot + " to be Online (it is " +
              (phase ? std::string(crd::to_string(*phase)) : std::string("not yet approved")) + ")",
          "Normal", "WaitingForRobot");
      return plan;
    }
    say("dispatching", "sent to robot " + view.target_robot, "Normal", "Scheduled");
    return plan;
  }
  plan.liveness = judge_liveness(task, inputs);
  if (plan.liveness.lost) {
    plan.status = json{{"state", "failed"},
                       {"reason", "Lost"},
                       {"message", *plan.liveness.lost},
                       {"finishedAt", format_rfc3339(inputs.now)}};
    plan.event = PlannedEvent{task, "Warning", "Lost", *plan.liveness.lost};
  }
  return plan;
}

}  // namespace k8s4r::manager
