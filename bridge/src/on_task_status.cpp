// A task status report: found by uid in the Task informer's index (no API
// request), accepted only from the robot the Task is assigned to, only with
// a seq above the last applied, never moving a finished Task; merged into
// the Task's /status, with an Event for each lifecycle step. A Task being
// deleted is released once its report says it stopped.
#include "k8s4r/bridge/bridge.h"

#include "k8s4r/crd/resources.h"

#include <spdlog/spdlog.h>

namespace k8s4r::bridge {

void Bridge::on_task_status(const TaskStatus& report) {
  const kube::ObjectPtr task = tasks_->get_by_uid(report.task_uid);
  if (!task) {
    refuse("a task status", {"UnknownTask", "no Task with uid " + report.task_uid + " in namespace " + namespace_},
           report.robot_id, report.task_uid);
    return;
  }
  TaskMemory& memory = task_memory_[report.task_uid];
  auto decision = status_write(report, *task, memory.applied);
  if (!decision) {
    refuse("a task status", decision.error(), report.robot_id, report.task_uid);
    return;
  }
  StatusWrite& write = decision.value();
  memory.applied.state = write.state;
  if (write.seq) memory.applied.seq = write.seq;
  const crd::TaskView view = crd::read_task(*task);
  if (memory.resend_timer) {
    loop_.cancel(memory.resend_timer);  // the robot has it
    memory.resend_timer = 0;
  }
  WriteRequest request;
  request.status_patch = std::move(write.status_patch);
  // Released once it stopped on the robot: a finished task, being deleted.
  if (view.deleting && view.has_bridge_finalizer && crd::is_terminal(write.state)) request.finalizer = false;
  writer_->write(task_ref(view.name), std::move(request));
  if (write.event) writer_->create_event(task_event(*task, *write.event, report, now()));
  spdlog::info("task {} ({}) on robot {}: {}{}{}", view.name, report.task_uid, report.robot_id,
               crd::to_string(write.state), report.seq ? " seq " + std::to_string(*report.seq) : "",
               report.exit_code ? " exit code " + std::to_string(*report.exit_code) : "");
}

}  // namespace k8s4r::bridge
