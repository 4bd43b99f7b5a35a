// Dispatch, driven by the Task informer (no polling): a Task that becomes
// `dispatching` with a targetRobot is published to its robot at QoS 1; once
// the broker has it, the bridge writes status.dispatchedAt and puts its
// finalizer on the Task. A Task still dispatching --dispatch-resend-after
// later is published again (agents dedupe by uid). What to send after a
// restart comes from the resources: a dispatching Task with no dispatchedAt
// has not been sent; one with an old dispatchedAt is due a resend.
//
// Stopping a Task on its robot (asked to stop, deleted, lost, ended but
// still listed) is stop_on_robot.cpp's.
//
// A robot that registers again (its agent restarted, or it reconnected after
// a broker restart) may have reports the bridge never got: a broker restarted
// without persistence drops what robots published while the bridge was not
// yet subscribed again. Each of its running Tasks is sent again (one message
// per Task); the agent dedupes by uid and answers with its latest report.
#include "k8s4r/bridge/bridge.h"

#include "k8s4r/bridge/dispatch_message.h"
#include "k8s4r/common/identifiers.h"
#include "k8s4r/crd/resources.h"

#include <spdlog/spdlog.h>

namespace k8s4r::bridge {

void Bridge::reconcile_task(const kube::ObjectPtr& task) {
  if (stopping_ || !mqtt_connected_) return;  // on_connected reconciles every Task
  const crd::TaskView view = crd::read_task(*task);
  if (view.uid.empty()) return;
  // Another replica's robot. (A Task with no robot yet is nobody's to send.)
  if (!view.target_robot.empty() && !serves(view.target_robot)) return;
  task_back_in_cache(view.uid);
  TaskMemory& memory = task_memory_[view.uid];
  const std::optional<crd::TaskState> state = memory.applied.state_or(view);

  if (view.deleting) {
    if (!view.has_bridge_finalizer) return;  // not ours to hold
    if (state && crd::is_terminal(*state)) return release(task, "it finished on its robot");
    if (!view.dispatched_at && !memory.dispatched) return release(task, "it was never sent to a robot");
    if (state == crd::TaskState::pending) return release(task, "it never started");
    if (robot_gone(view.target_robot)) {
      stop_on_robot(task);  // delivered when the robot's session returns
      return release(task, "its robot " + view.target_robot + " is gone");
    }
    return stop_on_robot(task);
  }

  // Asked to stop, not deleted (its robot drained: crd::stop_request): never
  // sent (again); stopped on its robot until the robot reports its end,
  // which the Task then records.
  if (state && !crd::is_terminal(*state) && !view.target_robot.empty()) {
    if (crd::stop_request(*task)) return stop_requested(task, state);
  }

  // The manager gave up on it (its robot went Offline, or never started
  // it) and placed a replacement elsewhere: should the robot come back
  // still holding it, its session delivers this stop first.
  if (state == crd::TaskState::failed && !memory.lost_stop_sent && (view.dispatched_at || memory.dispatched) &&
      crd::string_at(*task, {"status", "reason"}) == "Lost" && !view.target_robot.empty()) {
    // Only a recent loss: a restarted bridge does not queue a stop for every
    // Task ever lost in the sessions of robots long gone. One that comes
    // back still running an old one lists it in its heartbeat, and is told
    // then (on_heartbeat).
    const auto finished = crd::timestamp_at(*task, {"status", "finishedAt"});
    const bool recent = finished && now() - *finished < std::chrono::minutes(10);
    if (auto topic = topics::dispatch(view.target_robot); topic && recent) {
      const auto fence = fence_for(view.target_robot);
      memory.lost_stop_sent = true;
      metrics_.add("k8s4r_bridge_dispatches_total", {{"action", "delete"}});
      spdlog::info("task {} ({}) lost on robot {}: stopping it there should it still run it", view.name, view.uid,
                   view.target_robot);
      const std::string uid = view.uid;
      publish(topic.value(), dispatch_delete_payload(*task, fence ? fence->epoch : std::nullopt), [this, uid](bool ok) {
        if (auto found = task_memory_.find(uid); !ok && found != task_memory_.end())
          found->second.lost_stop_sent = false;  // sent again on the Task's next event
      });
    }
  }

  if (state != crd::TaskState::dispatching || view.target_robot.empty()) {
    memory.dispatched.reset();
    if (memory.resend_timer) {
      loop_.cancel(memory.resend_timer);
      memory.resend_timer = 0;
    }
    return;
  }
  if (memory.dispatched) return;  // sent in this run; its resend timer is set
  if (!view.dispatched_at) return dispatch(task, false);
  // Sent before (by this bridge before a restart, or another): due again
  // only once the resend interval has passed since.
  const auto elapsed = now() - *view.dispatched_at;
  const auto resend_after = std::chrono::duration_cast<std::chrono::nanoseconds>(config_.dispatch_resend_after);
  if (elapsed >= resend_after) return dispatch(task, true);
  if (memory.resend_timer == 0) schedule_resend(view.uid, view.name, resend_after - elapsed);
}

void Bridge::schedule_resend(const std::string& uid, const std::string& name, std::chrono::nanoseconds delay) {
  TaskMemory& memory = task_memory_[uid];
  if (memory.resend_timer) loop_.cancel(memory.resend_timer);
  memory.resend_timer = loop_.after(delay, [this, uid, name] {
    TaskMemory& due = task_memory_[uid];
    due.resend_timer = 0;
    const kube::ObjectPtr fresh = tasks_->get(namespace_, name);
    if (!fresh) return;
    const crd::TaskView view = crd::read_task(*fresh);
    // Still dispatching, by the cache and by what this bridge applied since:
    // the robot has not reported.
    const auto state = due.applied.state_or(view);
    if (view.uid == uid && !view.deleting && state == crd::TaskState::dispatching && !crd::stop_request(*fresh))
      dispatch(fresh, true);
  });
}

void Bridge::dispatch(const kube::ObjectPtr& task, bool resend) {
  const crd::TaskView view = crd::read_task(*task);
  const auto fence = fence_for(view.target_robot);
  if (!fence) return;  // its slot went to another replica (a resend timer's)
  // Its status.dispatchedAt and the message's timestamp, to the microsecond
  // both: the robot's heartbeats echo it once it has the Task.
  const Timestamp sent_at = dispatch_stamp(view.target_robot);
  auto payload = dispatch_create_payload(*task, sent_at, std::nullopt, fence->epoch);
  if (!payload) {
    refuse("task " + view.name, payload.error(), view.target_robot, view.uid);
    // The operator learns why in the Task itself.
    WriteRequest request;
    request.status_patch = {
        {"status", {{"state", "failed"}, {"reason", "InvalidTask"}, {"message", payload.error().message}}}};
    task_memory_[view.uid].applied.state = crd::TaskState::failed;
    writer_->write(task_ref(view.name), std::move(request));
    return;
  }
  auto topic = topics::dispatch(view.target_robot);
  if (!topic) {
    refuse("task " + view.name, {"InvalidTask", "spec.targetRobot: " + topic.error().message}, "", view.uid);
    return;
  }
  TaskMemory& memory = task_memory_[view.uid];
  const auto started = loop_.clock().steady();
  memory.dispatched = started;
  metrics_.add("k8s4r_bridge_dispatches_total", {{"action", resend ? "resend" : "create"}});
  spdlog::info("{} task {} ({}) to robot {}", resend ? "resending" : "dispatching", view.name, view.uid,
               view.target_robot);
  const std::string uid = view.uid, name = view.name;
  publish(topic.value(), payload.value(), [this, uid, name, started, sent_at](bool ok) {
    auto found = task_memory_.find(uid);
    if (found == task_memory_.end()) return;  // deleted meanwhile; on_task_deleted stopped it
    TaskMemory& sent = found->second;
    if (!ok) {
      // Not acknowledged: try again soon, from the cache's state then.
      sent.dispatched.reset();
      loop_.after(std::chrono::seconds(1), [this, name] {
        if (auto fresh = tasks_->get(namespace_, name)) reconcile_task(fresh);
      });
      return;
    }
    metrics_.observe("k8s4r_bridge_dispatch_latency_seconds", {},
                     std::chrono::duration<double>(loop_.clock().steady() - started).count());
    WriteRequest request;
    request.finalizer = true;
    request.status_patch = {{"status", {{"dispatchedAt", format_rfc3339(sent_at, TimePrecision::microseconds)}}}};
    writer_->write(task_ref(name), std::move(request));
    schedule_resend(uid, name, config_.dispatch_resend_after);
  });
}

Timestamp Bridge::dispatch_stamp(const std::string& robot_id) {
  // To the microsecond, as status.dispatchedAt is written; and above every
  // dispatch the robot says it has taken, so a list it made before this one
  // arrived never reads as made after it, even if this bridge's clock is
  // behind the one that stamped those (a step back, another replica).
  Timestamp stamp = std::chrono::floor<std::chrono::microseconds>(now());
  std::optional<Timestamp> newest;
  if (const kube::ObjectPtr robot = robots_->get(namespace_, robot_id)) {
    newest = crd::timestamp_at(*robot, {"status", "newestDispatch"});
  }
  if (auto memory = robot_memory_.find(robot_id); memory != robot_memory_.end() && memory->second.unwritten) {
    const auto& heard = memory->second.unwritten->first.knows.newest_dispatch;
    if (heard && (!newest || *heard > *newest)) newest = heard;
  }
  // A robot's claim more than a day ahead is a wrong clock or a lie: not
  // followed (it would push this robot's dispatches, and their resends, into
  // the future, and near the end of the representable range overflow).
  if (newest && *newest >= stamp && *newest - stamp < std::chrono::hours(24))
    stamp = std::chrono::floor<std::chrono::microseconds>(*newest) + std::chrono::microseconds(1);
  return stamp;
}

void Bridge::resync_robot(const std::string& robot_id) {
  // At most once per resend interval: a robot (or a client posing as one)
  // registering in a loop must not turn each register into a message per
  // Task. One that registers again sooner (an agent restarted at once, its
  // state perhaps wiped) is resynced when the interval is up, not skipped.
  const auto fence = fence_for(robot_id);
  if (!fence) return;  // its owner resyncs it
  RobotMemory& robot = robot_memory_[robot_id];
  const auto now = loop_.clock().steady();
  const auto interval = std::chrono::duration_cast<std::chrono::steady_clock::duration>(config_.dispatch_resend_after);
  const auto defer = [&](std::chrono::steady_clock::time_point due) {
    if (robot.resync_timer != 0) return;
    robot.resync_timer = loop_.at(due, [this, robot_id] {
      auto found = robot_memory_.find(robot_id);
      if (found == robot_memory_.end()) return;
      found->second.resync_timer = 0;
      resync_robot(robot_id);
    });
  };
  if (robot.resynced && now - *robot.resynced < interval) return defer(*robot.resynced + interval);
  if (!mqtt_connected_) return defer(now + interval);  // sent once the link is back, not dropped
  robot.resynced = now;
  const Timestamp stamp = dispatch_stamp(robot_id);  // one for all: the robot reads them in order
  for (const kube::ObjectPtr& task : tasks_->by_index("robot", robot_id)) {
    const crd::TaskView view = crd::read_task(*task);
    const auto memory = task_memory_.find(view.uid);
    const auto state = memory != task_memory_.end() ? memory->second.applied.state_or(view) : view.state;
    // Dispatching has its own resend; a Task asked to stop, its delete's.
    if (view.deleting || state != crd::TaskState::running || crd::stop_request(*task)) continue;
    // The newest report of the robot's the bridge knows of: what it applied,
    // when the cache has not caught up with it yet.
    std::optional<std::int64_t> reported = view.status_seq;
    if (memory != task_memory_.end() && memory->second.applied.seq &&
        (!reported || *memory->second.applied.seq > *reported))
      reported = memory->second.applied.seq;
    auto payload = dispatch_create_payload(*task, stamp, reported, fence->epoch);
    auto topic = topics::dispatch(view.target_robot);
    if (!payload || !topic) continue;  // refused when it was first dispatched
    metrics_.add("k8s4r_bridge_dispatches_total", {{"action", "resync"}});
    spdlog::info("robot {} registered again: sending running task {} ({}) again for its latest report", robot_id,
                 view.name, view.uid);
    publish(topic.value(), payload.value());
  }
}

void Bridge::resend_dispatching(const std::string& robot_id) {
  for (const kube::ObjectPtr& task : tasks_->by_index("robot", robot_id)) {
    const crd::TaskView view = crd::read_task(*task);
    const auto memory = task_memory_.find(view.uid);
    const auto state = memory != task_memory_.end() ? memory->second.applied.state_or(view) : view.state;
    if (view.deleting || state != crd::TaskState::dispatching || !view.dispatched_at || crd::stop_request(*task))
      continue;
    spdlog::info("robot {} heartbeats after registering: sending task {} ({}) again", robot_id, view.name, view.uid);
    dispatch(task, true);
  }
}

bool Bridge::lists_unstarted(const std::string& robot_id, const std::vector<std::string>& running) const {
  for (const std::string& uid : running) {
    const kube::ObjectPtr task = tasks_->get_by_uid(uid);
    if (!task) continue;
    const crd::TaskView view = crd::read_task(*task);
    if (view.target_robot != robot_id) continue;
    auto memory = task_memory_.find(uid);
    const auto state = memory == task_memory_.end() ? view.state : memory->second.applied.state_or(view);
    if (!state || *state == crd::TaskState::dispatching) return true;
  }
  return false;
}

}  // namespace k8s4r::bridge
