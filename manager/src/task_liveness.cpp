#include "k8s4r/manager/task_liveness.h"

#include "k8s4r/common/duration.h"
#include "k8s4r/crd/resources.h"

namespace k8s4r::manager {

using nlohmann::json;
using std::chrono::nanoseconds;

// Running, or ended with an end not yet recorded (docs/protocol.md#ack); a
// robot with more such ends than a heartbeat lists is taken to hold all.
bool robot_holds(const json& robot, const std::string& task_uid) {
  if (crd::value_at(robot, {"status", "endedTasksTruncated"}) == true) return true;
  for (const char* list : {"runningTasks", "endedTasks"}) {
    for (const json& held : crd::value_at(robot, {"status", list})) {
      if (held.is_string() && held.get<std::string>() == task_uid) return true;
    }
  }
  return false;
}

namespace {

// The robot's report counter when it made the list of tasks its status
// holds (status.reportSeq); absent from Go K8s4r agents.
std::optional<std::int64_t> report_seq_of(const json& robot) {
  const json& seq = crd::value_at(robot, {"status", "reportSeq"});
  if (!seq.is_number_integer()) return std::nullopt;
  return seq.get<std::int64_t>();
}

}  // namespace

std::optional<nanoseconds> lost_after(const json& task, const LivenessInputs& in) {
  const json& disconnect = crd::value_at(task, {"spec", "disconnect"});
  const auto duration = [&](const json& value) -> std::optional<nanoseconds> {
    if (!value.is_string()) return std::nullopt;
    auto parsed = parse_non_negative_go_duration(value.get<std::string>());
    return parsed ? std::optional(parsed.value()) : std::nullopt;
  };
  if (crd::value_at(disconnect, {"replace"}) == false) return std::nullopt;  // it waits for its robot
  if (auto set = duration(crd::value_at(disconnect, {"lostAfter"}))) return set;
  const nanoseconds stop = duration(crd::value_at(disconnect, {"stopOnRobotAfter"})).value_or(in.disconnect_stop_after);
  if (stop.count() == 0) return std::nullopt;  // it keeps running while cut off, and waits for its robot
  const nanoseconds kill = duration(crd::value_at(task, {"spec", "killTimeout"})).value_or(std::chrono::seconds(5));
  return stop + kill + in.disconnect_margin;
}

Liveness judge_liveness(const json& task, const LivenessInputs& in) {
  Liveness verdict;
  const crd::TaskView t = crd::read_task(task);
  if (t.target_robot.empty()) return verdict;
  if (!in.robot) {
    verdict.lost = "its robot " + t.target_robot + " does not exist";
    return verdict;
  }
  const json& robot = *in.robot;
  const auto phase = crd::read_robot(robot).phase;
  const auto last_heartbeat = crd::timestamp_at(robot, {"status", "lastHeartbeatTime"});
  if (last_heartbeat) {
    // Out of contact: lost once its robot has surely stopped it (its stop
    // window, then its kill timeout, and a margin), so two never run at once.
    const nanoseconds silent = elapsed(*last_heartbeat, in.now);
    const auto after = lost_after(task, in);
    if (after && silent >= *after) {
      verdict.lost =
          "its robot " + t.target_robot + " has been out of contact since " + format_rfc3339(*last_heartbeat) +
          (phase == crd::RobotPhase::offline ? " (" + crd::string_at(robot, {"status", "message"}) + ")"
                                             : std::string()) +
          ", longer than its lostAfter of " + format_go_duration(*after) + ": its robot has stopped it by now";
      return verdict;
    }
    if (phase == crd::RobotPhase::offline) {
      if (after) verdict.recheck = *after - silent + std::chrono::milliseconds(100);
      return verdict;  // waits for its robot, or for its lostAfter
    }
  }
  if (phase == crd::RobotPhase::rejected) {
    verdict.lost = "its robot " + t.target_robot + " was rejected";
    return verdict;
  }
  if (t.state == crd::TaskState::running) {
    // Running, as the robot last reported; lost once the robot's own list
    // has left it out for the grace.
    const json& listed = crd::value_at(robot, {"status", "runningTasks"});
    const auto heartbeat = crd::timestamp_at(robot, {"status", "lastHeartbeatTime"});
    // A list the robot made before the report that says it runs the task
    // says nothing of it, however late it was written: the bridge or the
    // broker may hold a heartbeat a while (docs/manager.md#lost-tasks).
    const auto made_after = report_seq_of(robot);
    const bool says_nothing = made_after && t.status_seq && *made_after < *t.status_seq;
    if (!listed.is_array() || !heartbeat || says_nothing || robot_holds(robot, t.uid)) {
      if (in.missing_since) verdict.missing_since = std::optional<Timestamp>();
      return verdict;
    }
    const Timestamp first = in.missing_since.value_or(*heartbeat);
    if (!in.missing_since) verdict.missing_since = std::optional<Timestamp>(first);
    if (elapsed(first, *heartbeat) >= in.disconnect_grace) {
      verdict.lost = "its robot " + t.target_robot + " no longer runs it: its heartbeats since " +
                     format_rfc3339(first) + " do not list it";
      return verdict;
    }
    verdict.recheck = in.disconnect_grace;
    return verdict;
  }
  if (t.state && *t.state != crd::TaskState::dispatching && *t.state != crd::TaskState::pending) return verdict;
  // Dispatched (or about to be) and never reported: lost only once the
  // robot has shown it does not have it, by a list of tasks made after it
  // had the dispatch. A robot that has it is never given a twin. The timeout
  // counts from the first send (the placement's scheduled-at; the bridge's
  // dispatchedAt moves on with every resend), except for an agent that does
  // not say what it had seen (an older k8s4r-agent): from its latest send,
  // as its list may be written after a resend it has not read yet.
  const bool says_what_it_saw = report_seq_of(robot).has_value();
  std::optional<Timestamp> scheduled_at;
  if (auto parsed = parse_rfc3339(crd::string_at(task, {"metadata", "annotations", kScheduledAtAnnotation})))
    scheduled_at = parsed.value();
  std::optional<Timestamp> since = says_what_it_saw ? scheduled_at : std::nullopt;
  if (t.dispatched_at && (!since || *t.dispatched_at < *since)) since = t.dispatched_at;
  if (!since) since = scheduled_at;
  if (!since && t.state == crd::TaskState::dispatching) {
    // Set dispatching by someone else, and not sent yet: from when this
    // manager first saw it so.
    since = in.seen_dispatching.value_or(in.now);
    if (!in.seen_dispatching) verdict.seen_dispatching = in.now;
  }
  if (!since) return verdict;  // pending, not placed: nothing was sent
  const nanoseconds waited = elapsed(*since, in.now);
  if (waited < in.dispatch_timeout) {
    verdict.recheck = in.dispatch_timeout - waited + std::chrono::milliseconds(100);
    return verdict;
  }
  const auto heartbeat = crd::timestamp_at(robot, {"status", "lastHeartbeatTime"});
  const bool lists_tasks = crd::value_at(robot, {"status", "runningTasks"}).is_array();
  // Its latest send: the robot has it once it has taken that dispatch.
  const Timestamp sent = t.dispatched_at.value_or(*since);
  // Shown not to have it by a list made once the robot had taken its latest
  // send: with our agent, a list beside which it echoes that dispatch (or a
  // later one) as newestDispatch, however late the list was written; with an
  // agent that does not say (an older k8s4r-agent), a list written after it.
  bool shown_without = false;
  if (lists_tasks && heartbeat && !robot_holds(robot, t.uid)) {
    if (says_what_it_saw) {
      const auto newest = crd::timestamp_at(robot, {"status", "newestDispatch"});
      shown_without = newest && *newest >= sent;
    } else {
      shown_without = *heartbeat > sent;
    }
  }
  if (shown_without) {
    verdict.lost = "its robot " + t.target_robot + " did not start it within " +
                   format_go_duration(in.dispatch_timeout) + " of its dispatch at " + format_rfc3339(*since) +
                   " (its heartbeat at " + format_rfc3339(*heartbeat) + " does not list it)";
    return verdict;
  }
  verdict.recheck = std::chrono::seconds(10);
  return verdict;
}

}  // namespace k8s4r::manager
