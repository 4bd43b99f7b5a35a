// Stopping a Task on its robot, the other half of dispatch.cpp.
//
// A Task the manager marked lost (failed, reason Lost) is stopped on its
// robot once, in case the robot still runs it when it returns; and a robot
// whose heartbeat lists a Task that has ended in the API is told to stop it
// (at most once per resend interval), as is one listing a Task no longer in
// the API at all.
//
// A Task asked to stop without being deleted (the DisruptionTarget
// condition: its robot is drained) is never sent again; once dispatching or
// running it is stopped on its robot (a delete, resent every interval until
// the robot reports its end, or taken as stopped after a few to a Go K8s4r
// robot, which never reports one). A pending one the manager ends.
//
// Deletion: a Task being deleted that carries the finalizer is stopped on
// its robot (action delete, resent like a create) and released once its
// robot reports it finished, when it never started, or when its robot is
// gone (no Robot, or not connected: the broker's persistent session still
// delivers the delete when it returns). Go K8s4r agents send no final state
// for a deleted task, so a delete unanswered after three sends is released
// too, and says so.
//
// A robot gone (no Robot, or not connected) releases its Tasks being deleted.
#include "k8s4r/bridge/bridge.h"

#include "k8s4r/bridge/dispatch_message.h"
#include "k8s4r/common/identifiers.h"
#include "k8s4r/crd/resources.h"

#include <spdlog/spdlog.h>

namespace k8s4r::bridge {

namespace {
constexpr int kDeleteSendsBeforeGivingUp = 3;
}

bool Bridge::robot_gone(const std::string& robot_id) const {
  const kube::ObjectPtr robot = robots_->get(namespace_, robot_id);
  if (!robot) return !robot_left_lately(robot_id);  // maybe relabelled: judged after a grace (left_cache.cpp)
  const crd::RobotView view = crd::read_robot(*robot);
  return view.connected == false || view.phase == crd::RobotPhase::offline || view.phase == crd::RobotPhase::rejected;
}

void Bridge::stop_on_robot(const kube::ObjectPtr& task) {
  const crd::TaskView view = crd::read_task(*task);
  TaskMemory& memory = task_memory_[view.uid];
  if (memory.delete_timer) return;  // sent; waiting for the report or the resend
  auto topic = topics::dispatch(view.target_robot);
  const auto fence = fence_for(view.target_robot);
  if (!topic || !fence) return;
  ++memory.delete_sends;
  metrics_.add("k8s4r_bridge_dispatches_total", {{"action", "delete"}});
  spdlog::info("stopping task {} ({}) on robot {}", view.name, view.uid, view.target_robot);
  publish(topic.value(), dispatch_delete_payload(*task, fence->epoch));
  const std::string uid = view.uid, name = view.name;
  memory.delete_timer = loop_.after(config_.dispatch_resend_after, [this, uid, name] {
    TaskMemory& waiting = task_memory_[uid];
    waiting.delete_timer = 0;
    auto fresh = tasks_->get(namespace_, name);
    if (!fresh || crd::read_task(*fresh).uid != uid) return;
    // A deleted Task is let go after a few sends. One only asked to stop
    // (drained) keeps being stopped until its robot reports its end, unless
    // its robot never reports one (Go K8s4r): then it is taken as stopped.
    if (waiting.delete_sends >= kDeleteSendsBeforeGivingUp) {
      const crd::TaskView current = crd::read_task(*fresh);
      if (current.deleting) {
        return release(fresh, "its robot did not confirm the stop after " + std::to_string(waiting.delete_sends) +
                                  " delete messages (Go K8s4r agents never do)");
      }
      if (auto stop = crd::stop_request(*fresh); stop && !confirms_stops(current.target_robot))
        return end_unconfirmed_stop(fresh, *stop, waiting.delete_sends);
    }
    reconcile_task(fresh);
  });
}

void Bridge::stop_requested(const kube::ObjectPtr& task, std::optional<crd::TaskState> state) {
  const crd::TaskView view = crd::read_task(*task);
  TaskMemory& memory = task_memory_[view.uid];
  if (memory.resend_timer) {
    loop_.cancel(memory.resend_timer);
    memory.resend_timer = 0;
  }
  // Pending: never set dispatching, so never sent; the manager ends it.
  if (!state || *state == crd::TaskState::pending) return;
  // Dispatching or running: whether the robot has it, only the robot can
  // say (a send this bridge forgot, a publish whose PUBACK was lost). The
  // delete is answered either way: with the task's end, or `Cancelled,
  // deleted before its dispatch arrived` for one it never got.
  stop_on_robot(task);
}

bool Bridge::confirms_stops(const std::string& robot_id) const {
  // Our agent always lists its running tasks ([] when idle); a Go K8s4r
  // agent never does, and sends no final state for a stopped task either.
  const kube::ObjectPtr robot = robots_->get(namespace_, robot_id);
  return !robot || !crd::value_at(*robot, {"status", "runningTasks"}).is_null();
}

void Bridge::end_unconfirmed_stop(const kube::ObjectPtr& task, const crd::Condition& stop, int sends) {
  const crd::TaskView view = crd::read_task(*task);
  TaskMemory& memory = task_memory_[view.uid];
  if (memory.applied.state && crd::is_terminal(*memory.applied.state)) return;
  memory.applied.state = crd::TaskState::failed;
  const std::string why = "asked to stop (" + stop.message + "); robot " + view.target_robot +
                          " did not confirm the stop after " + std::to_string(sends) +
                          " delete messages (Go K8s4r agents never do): taken as stopped";
  spdlog::warn("task {} ({}): {}", view.name, view.uid, why);
  WriteRequest request;
  request.status_patch = {
      {"status",
       {{"state", "failed"}, {"reason", stop.reason}, {"message", why}, {"finishedAt", format_rfc3339(now())}}}};
  writer_->write(task_ref(view.name), std::move(request));
}

void Bridge::release(const kube::ObjectPtr& task, const std::string& why) {
  const crd::TaskView view = crd::read_task(*task);
  TaskMemory& memory = task_memory_[view.uid];
  if (memory.released) return;
  memory.released = true;
  spdlog::info("releasing task {} ({}) for deletion: {}", view.name, view.uid, why);
  WriteRequest request;
  request.finalizer = false;
  writer_->write(task_ref(view.name), std::move(request));
}

bool Bridge::stop_ended_tasks_listed(const std::string& robot_id, const std::vector<std::string>& running,
                                     bool answering) {
  const auto fence = fence_for(robot_id);
  if (!fence) return true;
  auto topic = topics::dispatch(robot_id);
  if (!topic) return true;
  const auto steady_now = loop_.clock().steady();
  int gone = 0;
  for (const std::string& uid : running) {
    const kube::ObjectPtr task = tasks_->get_by_uid(uid);
    if (!task) {
      // Deleted and released since it was sent (a robot learns a uid only
      // from a dispatch, made from this cache): a dispatch that waited out
      // a cut must not start. A few per heartbeat, remembering nothing: a
      // robot listing made-up uids gets no more than that (and no answer
      // while it lists more). Not by a replica, whose cache holds only its
      // slots' labelled Tasks: one made before slot labels runs on until it
      // is labelled (docs/bridge.md#replicas).
      if (!config_.replica_id.empty() || !validate_identifier(uid)) continue;
      if (++gone > 8) return false;
      metrics_.add("k8s4r_bridge_dispatches_total", {{"action", "delete"}});
      spdlog::warn("robot {} holds task {}, which is no longer in the API: stopping it there", robot_id, uid);
      publish(topic.value(), dispatch_delete_payload(nlohmann::json{{"metadata", {{"uid", uid}}}}, fence->epoch));
      continue;
    }
    const crd::TaskView view = crd::read_task(*task);
    if (view.target_robot != robot_id) continue;  // another robot's Task: not this one's to stop, nor to remember
    TaskMemory& memory = task_memory_[uid];
    const auto state = memory.applied.state_or(view);
    if (!state || !crd::is_terminal(*state)) continue;
    // Once per resend interval, unless this heartbeat is to be answered:
    // the answer may release a run the robot holds, so the delete goes
    // before it every time (an earlier one may have been lost).
    if (!answering && memory.orphan_stop_at && steady_now - *memory.orphan_stop_at < config_.dispatch_resend_after)
      continue;
    memory.orphan_stop_at = steady_now;
    metrics_.add("k8s4r_bridge_dispatches_total", {{"action", "delete"}});
    spdlog::warn("robot {} still runs task {} ({}), which is {} in the API: stopping it there", robot_id, view.name,
                 uid, crd::to_string(*state));
    publish(topic.value(), dispatch_delete_payload(*task, fence->epoch));
  }
  return true;
}

void Bridge::on_robot_changed(const std::string& robot_id, bool deleted) {
  if (!serves(robot_id)) return;  // its owner's
  // Left the cache, and back already: its slot was let go and taken again
  // (a replica's caches hold only its slots), not a Robot deleted.
  if (deleted && robots_->get(namespace_, robot_id)) return;
  if (deleted) {
    robot_memory_.erase(robot_id);
    forget_prefetch(robot_id);
  } else {
    send_prefetch(robot_id, false);
  }
  for (const auto& task : tasks_->by_index("robot", robot_id)) {
    if (crd::read_task(*task).deleting) reconcile_task(task);
  }
}

void Bridge::on_task_deleted(const kube::ObjectPtr& task, bool final_state_unknown) {
  const crd::TaskView view = crd::read_task(*task);
  if (tasks_->get_by_uid(view.uid)) return;  // back in the cache: its slot was let go and taken again
  const bool not_deleted = task_left_not_deleted(view, final_state_unknown);
  auto found = task_memory_.find(view.uid);
  if (found != task_memory_.end()) {
    TaskMemory& memory = found->second;
    const auto state = memory.applied.state_or(view);
    // Gone without our finalizer (removed by force, or never added): a task
    // still running on its robot is stopped there all the same. One that
    // still carries it left a replica's cache relabelled, not deleted
    // (left_cache.cpp), and its robot keeps running it.
    const auto fence = fence_for(view.target_robot);
    if (memory.dispatched && !memory.delete_sends && !(state && crd::is_terminal(*state)) && mqtt_connected_ && fence &&
        !not_deleted) {
      if (auto topic = topics::dispatch(view.target_robot))
        publish(topic.value(), dispatch_delete_payload(*task, fence->epoch));
    }
    for (auto timer : {memory.resend_timer, memory.delete_timer}) {
      if (timer) loop_.cancel(timer);
    }
    task_memory_.erase(found);
  }
}

}  // namespace k8s4r::bridge
