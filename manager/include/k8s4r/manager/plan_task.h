// What a Task of its own (one no TaskGroup owns: `kubectl apply -f
// examples/task.yaml`) needs, as a pure function of the Task and its Robot:
//   no targetRobot       pending, saying it must name its robot
//   its robot missing    pending, naming the robot (Warning RobotNotFound)
//   its robot not Online pending, saying so
//   its robot Online     dispatching (the bridge sends it)
//   dispatched, running  lost as task_liveness judges (failed, reason Lost,
//                        Warning Lost); never replaced: nothing owns it
// A message already said is not written again, nor its Event recorded.
//
// Thread-safety: a pure function.
#pragma once

#include "k8s4r/manager/plan_group.h"
#include "k8s4r/manager/task_liveness.h"

#include <nlohmann/json.hpp>

#include <optional>

namespace k8s4r::manager {

struct TaskPlan {
  // A /status merge patch to write, conditional on the version judged.
  std::optional<nlohmann::json> status;
  std::optional<PlannedEvent> event;
  Liveness liveness;  // what to remember, and when to look again
};

TaskPlan plan_task(const nlohmann::json& task, const LivenessInputs& inputs);

}  // namespace k8s4r::manager
