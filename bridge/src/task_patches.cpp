#include "k8s4r/bridge/task_patches.h"

#include "k8s4r/common/hashing.h"

#include <cstdio>

namespace k8s4r::bridge {

using nlohmann::json;

namespace {

crd::TaskState state_of(TaskRunState state) {
  switch (state) {
    case TaskRunState::running:
      return crd::TaskState::running;
    case TaskRunState::completed:
      return crd::TaskState::completed;
    case TaskRunState::failed:
      return crd::TaskState::failed;
  }
  return crd::TaskState::running;
}

std::optional<TaskEvent> event_for(const TaskStatus& report, std::optional<crd::TaskState> before) {
  switch (report.state) {
    case TaskRunState::running:
      if (report.event == "Restarting" || report.event == "Restarted")
        return TaskEvent{"Normal", "Restarted", report.message.empty() ? "restarted" : report.message};
      if (before != crd::TaskState::running)
        return TaskEvent{"Normal", "Started",
                         report.message.empty() ? "started on robot " + report.robot_id
                                                : report.message + " on robot " + report.robot_id};
      return std::nullopt;
    case TaskRunState::completed:
      return TaskEvent{"Normal", "Completed", report.message.empty() ? "exited with code 0" : report.message};
    case TaskRunState::failed: {
      std::string message = report.message;
      if (message.empty())
        message = report.exit_code ? "exited with code " + std::to_string(*report.exit_code) : "failed";
      if (report.reason == "Timeout") return TaskEvent{"Warning", "Timeout", message};
      if (report.reason == "Cancelled") return TaskEvent{"Normal", "Cancelled", message};
      return TaskEvent{"Warning", "Failed", report.reason.empty() ? message : report.reason + ": " + message};
    }
  }
  return std::nullopt;
}

// At most `limit` bytes, cut at a UTF-8 character boundary.
std::string truncated(const std::string& text, std::size_t limit) {
  if (text.size() <= limit) return text;
  std::size_t end = limit;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  return text.substr(0, end);
}

// An Event is for people and lives in etcd: a robot's message, up to the
// payload limit, is cut to what events.k8s.io allows a note.
constexpr std::size_t kMaxEventMessageBytes = 1024;

}  // namespace

ReportVerdict judge_report(const TaskStatus& report, const json& task, const AppliedStatus& applied) {
  ReportVerdict verdict;
  const auto refuse = [&](std::string reason, std::string message) {
    verdict.kind = ReportVerdict::Kind::refused;
    verdict.refusal = Refusal{std::move(reason), std::move(message)};
    return verdict;
  };
  const crd::TaskView view = crd::read_task(task);
  if (view.target_robot != report.robot_id) {
    return refuse("WrongRobot",
                  "task " + report.task_uid + " is assigned to " +
                      (view.target_robot.empty() ? std::string("no robot") : "robot " + view.target_robot) + ", not " +
                      report.robot_id);
  }
  std::optional<std::int64_t> floor = view.status_seq;
  if (applied.seq && (!floor || *applied.seq > *floor)) floor = applied.seq;
  if (report.seq && floor && *report.seq <= *floor) {
    // In the Task already, or on its way there from this bridge.
    verdict.kind = view.status_seq && *view.status_seq >= *report.seq ? ReportVerdict::Kind::recorded
                                                                      : ReportVerdict::Kind::after_writes;
    verdict.refusal =
        Refusal{"StaleSeq", "seq " + std::to_string(*report.seq) + " is not above " + std::to_string(*floor) +
                                ", the last applied for task " + report.task_uid};
    return verdict;
  }
  const std::optional<crd::TaskState> before = applied.state_or(view);
  if (before && crd::is_terminal(*before)) {
    const bool final_report = report.state != TaskRunState::running;
    const bool lost = crd::string_at(task, {"status", "reason"}) == "Lost" &&
                      !crd::value_at(task, {"status", "endOnRobot"}).is_object();
    if (final_report && lost && report.seq) {
      // The manager gave up on it while its robot was out of contact; this
      // is how it really ended. Recorded beside the Task's state, which
      // stays Lost: its replacement stands.
      json end = {{"state", to_string(report.state)}, {"seq", *report.seq}};
      if (report.exit_code) end["exitCode"] = *report.exit_code;
      if (report.signal) end["signal"] = *report.signal;
      if (!report.reason.empty()) end["reason"] = report.reason;
      if (!report.message.empty()) end["message"] = report.message;
      if (report.started_at) end["startedAt"] = format_rfc3339(*report.started_at, TimePrecision::as_needed);
      if (report.finished_at) end["finishedAt"] = format_rfc3339(*report.finished_at, TimePrecision::as_needed);
      verdict.write.state = *before;
      verdict.write.seq = report.seq;
      verdict.write.status_patch = {{"status", {{"statusSeq", *report.seq}, {"endOnRobot", end}}}};
      std::string message = "ran on robot " + report.robot_id + " while it was out of contact, and " +
                            (report.state == TaskRunState::completed ? "completed" : "failed");
      if (report.exit_code) message += " with exit code " + std::to_string(*report.exit_code);
      if (report.finished_at) message += " at " + format_rfc3339(*report.finished_at);
      if (!report.message.empty()) message += " (" + report.message + ")";
      message += "; the Task stays Lost and its replacement stands";
      verdict.write.events.push_back(
          TaskEvent{report.state == TaskRunState::completed ? "Normal" : "Warning", "EndedOnRobot", message});
      return verdict;
    }
    if (final_report && report.seq) {
      // The end it already holds, reported again (a dispatch sent again is
      // answered so): nothing to write.
      verdict.kind = ReportVerdict::Kind::recorded;
      verdict.refusal = Refusal{"TaskFinished", "task " + report.task_uid + " is already " +
                                                    std::string(crd::to_string(*before)) + "; nothing to write"};
      return verdict;
    }
    return refuse("TaskFinished", "task " + report.task_uid + " is already " + std::string(crd::to_string(*before)) +
                                      "; a finished Task never changes state");
  }

  StatusWrite& write = verdict.write;
  write.state = state_of(report.state);
  write.seq = report.seq;
  json status = {{"state", crd::to_string(write.state)}, {"restartCount", report.restart_count}};
  if (report.seq) status["statusSeq"] = *report.seq;
  if (report.started_at) status["startedAt"] = format_rfc3339(*report.started_at, TimePrecision::as_needed);
  if (report.event == "Restarting" || report.event == "Restarted") {
    if (report.updated_at) status["lastRestartTime"] = format_rfc3339(*report.updated_at, TimePrecision::as_needed);
  }
  if (report.state == TaskRunState::running) {
    // A (re)started process has no exit yet: clear what an earlier run left.
    status["finishedAt"] = nullptr;
    status["exitCode"] = nullptr;
    status["signal"] = nullptr;
  } else {
    if (report.finished_at) status["finishedAt"] = format_rfc3339(*report.finished_at, TimePrecision::as_needed);
    if (report.exit_code) status["exitCode"] = *report.exit_code;
    if (report.signal) status["signal"] = *report.signal;
  }
  status["reason"] = report.reason.empty() ? json(nullptr) : json(report.reason);
  if (!report.message.empty()) status["message"] = report.message;
  if (!report.logs_tail.empty()) status["logs"] = report.logs_tail;
  // What a task declared is its result's, only when it completed.
  if (report.outputs && report.state == TaskRunState::completed) status["outputs"] = *report.outputs;
  write.status_patch = {{"status", status}};
  // A report for a Task never seen running, other than its `running`: the
  // agent does not send a task's first `running` once a later report of it
  // is queued (docs/agent.md#reports-are-not-lost), so a short task can go
  // from dispatching to its end in one report. It did start.
  auto event = event_for(report, before);
  if (before != crd::TaskState::running && report.started_at && (!event || event->reason != "Started"))
    write.events.push_back(TaskEvent{"Normal", "Started", "started on robot " + report.robot_id});
  if (event) write.events.push_back(std::move(*event));
  return verdict;
}

json task_event(const json& task, const TaskEvent& event, const TaskStatus& report, Timestamp now) {
  const crd::TaskView view = crd::read_task(task);
  // What makes this event this one, hashed: a retry names the same Event.
  const std::string identity =
      view.uid + "/" + event.reason + "/" +
      (report.seq ? std::to_string(*report.seq)
                  : format_rfc3339(report.updated_at.value_or(now), TimePrecision::nanoseconds));
  char suffix[17];
  std::snprintf(suffix, sizeof suffix, "%016llx", static_cast<unsigned long long>(Fnv1a64().update(identity).value()));
  const std::string time = format_rfc3339(now);
  return {{"apiVersion", "v1"},
          {"kind", "Event"},
          {"metadata", {{"name", view.name + "." + suffix}, {"namespace", view.namespace_}}},
          {"involvedObject",
           {{"apiVersion", crd::kApiVersion},
            {"kind", "Task"},
            {"name", view.name},
            {"namespace", view.namespace_},
            {"uid", view.uid}}},
          {"reason", event.reason},
          {"message", truncated(event.message, kMaxEventMessageBytes)},
          {"type", event.type},
          {"source", {{"component", "k8s4r-bridge"}, {"host", report.robot_id}}},
          {"reportingComponent", "k8s4r-bridge"},
          {"reportingInstance", report.robot_id},
          {"firstTimestamp", time},
          {"lastTimestamp", time},
          {"count", 1}};
}

}  // namespace k8s4r::bridge
