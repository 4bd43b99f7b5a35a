// Dispatch, driven by the Task informer (no polling): a Task that becomes
// `dispatching` with a targetRobot is published to its robot at QoS 1; once
// the broker has it, the bridge writes status.dispatchedAt and puts its
// finalizer on the Task. A Task still dispatching --dispatch-resend-after
// later is published again (agents dedupe by uid). What to send after a
// restart comes from the resources: a dispatching Task with no dispatchedAt
// has not been sent; one with an old dispatchedAt is due a resend.
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

namespace {
constexpr int kDeleteSendsBeforeGivingUp = 3;
}

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
