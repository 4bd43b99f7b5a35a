// A task status report: found by uid in the Task informer's index (no API
// request), judged against the Task (judge_report: assigned robot, seq,
// finished), merged into the Task's /status with an Event for each
// lifecycle step, and confirmed to its robot once Kubernetes has it (or
// refused for good), so the robot can let it go. A Task being deleted is
// released once its report says it stopped.
#include "k8s4r/bridge/bridge.h"

#include "k8s4r/crd/resources.h"

#include <spdlog/spdlog.h>

namespace k8s4r::bridge {

void Bridge::confirm_report(const TaskStatus& report, ReportResult result, const Refusal& why) {
  if (!report.seq) return;  // a Go K8s4r agent: it confirms nothing and awaits nothing
  ReportAck ack{report.task_uid, *report.seq, result};
  if (result == ReportResult::refused) {
    ack.reason = why.reason;
    ack.message = why.message;
  }
  acks_->report(report.robot_id, std::move(ack));
}

void Bridge::on_task_status(const TaskStatus& report) {
  const kube::ObjectPtr task = tasks_->get_by_uid(report.task_uid);
  if (!task) {
    // Relabelled out of this cache, not deleted: left unanswered, so its
    // agent sends it again once the Task is back (left_cache.cpp).
    if (task_left_lately(report.task_uid)) return;
    const Refusal why{"UnknownTask", "no Task with uid " + report.task_uid + " in namespace " + namespace_};
    refuse("a task status", why, report.robot_id, report.task_uid);
    return confirm_report(report, ReportResult::refused, why);
  }
  TaskMemory& memory = task_memory_[report.task_uid];
  ReportVerdict verdict = judge_report(report, *task, memory.applied);
  const crd::TaskView view = crd::read_task(*task);
  // Confirmed to the robot once the write carrying a seq as high is in.
  const auto confirm_when_written = [this, report](bool ok, const std::string& error) {
    loop_.post([this, report, ok, error] {
      if (ok) return confirm_report(report, ReportResult::recorded);
      // Refused for good by the API server (or the Task is gone): the robot
      // must not send it for ever. Failures that may pass are retried by the
      // writer, and reach here only once they succeed.
      confirm_report(report, ReportResult::refused, Refusal{"NotWritten", error});
    });
  };
  switch (verdict.kind) {
    case ReportVerdict::Kind::refused:
      refuse("a task status", verdict.refusal, report.robot_id, report.task_uid);
      return confirm_report(report, ReportResult::refused, verdict.refusal);
    case ReportVerdict::Kind::recorded:
      spdlog::debug("task {} ({}): seq {} is recorded already ({})", view.name, report.task_uid, report.seq.value_or(0),
                    verdict.refusal.message);
      metrics_.add("k8s4r_bridge_reports_duplicate_total");
      return confirm_report(report, ReportResult::recorded);
    case ReportVerdict::Kind::after_writes: {
      metrics_.add("k8s4r_bridge_reports_duplicate_total");
      WriteRequest wait;  // nothing of its own: done once the writes before it are in
      wait.done = confirm_when_written;
      writer_->write(task_ref(view.name), std::move(wait));
      return;
    }
    case ReportVerdict::Kind::write:
      break;
  }
  StatusWrite& write = verdict.write;
  memory.applied.state = write.state;
  if (write.seq) memory.applied.seq = write.seq;
  if (memory.resend_timer) {
    loop_.cancel(memory.resend_timer);  // the robot has it
    memory.resend_timer = 0;
  }
  WriteRequest request;
  request.status_patch = std::move(write.status_patch);
  request.done = confirm_when_written;
  // Released once it stopped on the robot: a finished task, being deleted.
  if (view.deleting && view.has_bridge_finalizer && crd::is_terminal(write.state)) request.finalizer = false;
  writer_->write(task_ref(view.name), std::move(request));
  for (const TaskEvent& event : write.events) writer_->create_event(task_event(*task, event, report, now()));
  spdlog::info("task {} ({}) on robot {}: {}{}{}{}", view.name, report.task_uid, report.robot_id,
               to_string(report.state), report.seq ? " seq " + std::to_string(*report.seq) : "",
               report.exit_code ? " exit code " + std::to_string(*report.exit_code) : "",
               !write.events.empty() && write.events.back().reason == "EndedOnRobot"
                   ? " (its end on the robot; the Task stays Lost)"
                   : "");
}

}  // namespace k8s4r::bridge
