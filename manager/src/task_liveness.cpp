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
  if (phase == crd::RobotPhase::offline) {
    verdict.lost =
        "its robot " + t.target_robot + " went Offline (" + crd::string_at(robot, {"status", "message"}) + ")";
    return verdict;
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
    if (!listed.is_array() || !heartbeat || robot_holds(robot, t.uid)) {
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
  // robot has shown it does not have it, by a heartbeat after the dispatch
  // that does not list it. A robot that has it is never given a twin.
  std::optional<Timestamp> since = t.dispatched_at;
  if (!since) {
    const std::string at = crd::string_at(task, {"metadata", "annotations", kScheduledAtAnnotation});
    if (auto parsed = parse_rfc3339(at)) since = parsed.value();
  }
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
  if (lists_tasks && heartbeat && *heartbeat > *since && !robot_holds(robot, t.uid)) {
    verdict.lost = "its robot " + t.target_robot + " did not start it within " +
                   format_go_duration(in.dispatch_timeout) + " of its dispatch at " + format_rfc3339(*since) +
                   " (its heartbeat at " + format_rfc3339(*heartbeat) + " does not list it)";
    return verdict;
  }
  verdict.recheck = std::chrono::seconds(10);
  return verdict;
}

}  // namespace k8s4r::manager
