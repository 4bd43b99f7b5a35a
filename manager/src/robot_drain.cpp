#include "k8s4r/manager/robot_drain.h"

#include "k8s4r/common/duration.h"
#include "k8s4r/crd/resources.h"

namespace k8s4r::manager {

using nlohmann::json;
using std::chrono::nanoseconds;

namespace {

std::string count_of(int n, const std::string& what) { return std::to_string(n) + " " + what + (n == 1 ? "" : "s"); }

// Writes `status` unless status.drain already says it; an Event as its
// state changes. Every key is in every status (null: none), so a merge patch
// leaves nothing of an earlier one behind.
void settle(DrainPlan& plan, const json& robot, json status) {
  const json& before = crd::value_at(robot, {"status", "drain"});
  for (const char* key : {"state", "startedAt", "deadline", "remaining", "message", "observedGeneration"})
    if (!status.contains(key)) status[key] = nullptr;
  json stored = status;  // as the API server keeps it: without the nulls
  for (auto it = stored.begin(); it != stored.end();) it = it->is_null() ? stored.erase(it) : std::next(it);
  if (before == stored) return;
  const std::string state = status.value("state", "");
  if (crd::string_at(before, {"state"}) != state) {
    if (state == "Draining") {
      plan.events.push_back({robot, "Normal", "Draining",
                             "draining until " + status.value("deadline", "") + ": " + status.value("message", "")});
    } else if (state == "Drained") {
      plan.events.push_back({robot, "Normal", "Drained", status.value("message", "")});
    } else if (state == "Invalid") {
      plan.events.push_back({robot, "Warning", "InvalidDrain", status.value("message", "")});
    }
  }
  plan.status = std::move(status);
}

}  // namespace

DrainPlan plan_drain(const DrainView& view) {
  DrainPlan plan;
  const json& robot = view.robot;
  const std::string name = crd::string_at(robot, {"metadata", "name"});
  const json& spec = crd::value_at(robot, {"spec", "drain"});
  const json& before = crd::value_at(robot, {"status", "drain"});
  if (!spec.is_object()) {
    if (!before.is_null()) {
      plan.status = json(nullptr);
      if (crd::string_at(before, {"state"}) == "Draining") {
        plan.events.push_back({robot, "Normal", "DrainStopped",
                               "spec.drain was removed: the tasks still on the robot go on, and it takes new ones "
                               "unless it is cordoned"});
      }
    }
    return plan;
  }

  // The spec this status answers: a drain asked again (other settings) is
  // not Drained until it is judged (the plugin waits for it).
  const json& generation = crd::value_at(robot, {"metadata", "generation"});
  const json observed = generation.is_number_integer() ? generation : json(nullptr);
  // When the drain began: as first written, or now.
  const Timestamp started = crd::timestamp_at(before, {"startedAt"}).value_or(view.now);
  const std::string started_text =
      before.contains("startedAt") ? crd::string_at(before, {"startedAt"}) : format_rfc3339(started);
  nanoseconds deadline = kDefaultDrainDeadline;
  std::optional<std::string> invalid;
  if (const json& field = spec.value("deadline", json()); !field.is_null()) {
    auto parsed = field.is_string() ? parse_non_negative_go_duration(field.get<std::string>())
                                    : Result<nanoseconds>(Error{"", "must be a duration"});
    if (parsed) {
      deadline = parsed.value();
    } else {
      invalid = "spec.drain.deadline: " + parsed.error().message;
    }
  }
  bool ignore_system = false;
  if (const json& field = spec.value("ignoreSystemJobs", json()); !field.is_null()) {
    if (field.is_boolean()) {
      ignore_system = field.get<bool>();
    } else {
      invalid = "spec.drain.ignoreSystemJobs: must be true or false";
    }
  }
  if (invalid) {
    settle(plan, robot,
           json{{"state", "Invalid"},
                {"startedAt", started_text},
                {"observedGeneration", observed},
                {"message", *invalid + "; the robot stays cordoned, and no task is stopped"}});
    return plan;
  }
  const Timestamp due = later_by(started, deadline);
  const std::string due_text = format_rfc3339(due);
  const bool past_deadline = view.now >= due;

  // What is left on the robot, and what of it the drain still waits for.
  struct Left {
    const json* task;
    std::string type;
    bool running;   // started: one not yet started moves at once
    bool stopping;  // asked already
  };
  std::vector<Left> left;
  int others = 0;  // left that are not a system job's
  for (const DrainTask& entry : view.tasks) {
    const crd::TaskView task = crd::read_task(*entry.task);
    if (task.state && crd::is_terminal(*task.state)) continue;
    if (entry.job_type == "system" && ignore_system) continue;
    const bool running = task.state == crd::TaskState::running;
    const bool stopping = task.deleting || crd::stop_request(*entry.task).has_value();
    left.push_back({entry.task, entry.job_type, running, stopping});
    if (entry.job_type != "system") ++others;
  }

  int stopping = 0, waiting = 0, system_last = 0;
  for (const Left& task : left) {
    std::optional<std::string> why;
    if (task.stopping) {
      ++stopping;
      continue;
    }
    if (!task.running) {
      why = "robot " + name + " is drained: a task not yet started is stopped at once" +
            (task.type == "system" || task.type.empty() ? "" : ", and placed elsewhere");
    } else if (task.type == "service") {
      why = "robot " + name + " is drained: a service's task is stopped at once and placed elsewhere";
    } else if (task.type == "system") {
      // Even past the deadline: the robot's own services (logs, monitoring)
      // outlive the work they serve, which the deadline has stopped.
      if (others > 0) {
        ++system_last;
        continue;
      }
      why = "robot " + name + " is drained: a system job's task stops last, once no other task is left";
    } else if (past_deadline) {
      why = "robot " + name + " is drained and its deadline " + due_text + " has passed" +
            (task.type.empty() ? "" : ": placed elsewhere as its group's reschedulePolicy allows");
    } else {
      ++waiting;
      continue;
    }
    plan.stops.emplace_back(*task.task, *why);
    ++stopping;
  }
  if (waiting > 0) plan.requeue_after = elapsed(view.now, due) + std::chrono::milliseconds(100);

  json status{{"startedAt", started_text},
              {"deadline", due_text},
              {"remaining", static_cast<int>(left.size())},
              {"observedGeneration", observed}};
  if (left.empty()) {
    status["state"] = "Drained";
    status["message"] = "no task left on it" + std::string(ignore_system ? " (system jobs' tasks go on)" : "");
  } else {
    std::vector<std::string> parts;
    if (stopping) parts.push_back(count_of(stopping, "task") + " stopping");
    if (waiting) parts.push_back(count_of(waiting, "task") + " may run until the deadline");
    if (system_last) parts.push_back(count_of(system_last, "system job's task") + " to stop last");
    std::string message = count_of(static_cast<int>(left.size()), "task") + " left: ";
    for (std::size_t i = 0; i < parts.size(); ++i) message += (i ? ", " : "") + parts[i];
    status["state"] = "Draining";
    status["message"] = message;
  }
  settle(plan, robot, std::move(status));
  return plan;
}

}  // namespace k8s4r::manager
