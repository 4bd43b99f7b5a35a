// Heartbeats, coalesced: at most one Robot write per robot per
// --heartbeat-write-interval, and one at once when what the manager or an
// operator acts on changed (running tasks, capacity, connection). A heartbeat
// between writes is remembered (the newest only) and written in the robot's
// next slot, so a robot that stops heartbeating still has its last one
// written, at most one interval late. What was written last is first read
// from the cached Robot, so a restarted bridge does not write every Robot at
// once.
#include "k8s4r/bridge/bridge.h"

#include "k8s4r/crd/resources.h"

#include <spdlog/spdlog.h>

#include <utility>

namespace k8s4r::bridge {

void Bridge::on_heartbeat(const Heartbeat& message, bool acknowledge) {
  const std::string& robot_id = message.robot_id;
  const kube::ObjectPtr robot = robots_->get(namespace_, robot_id);
  if (!robot) {
    if (acknowledge) return refuse_unknown_heartbeat(robot_id);
    refuse("a heartbeat",
           {"UnknownRobot", "no Robot " + robot_id + " in namespace " + namespace_ + "; the robot must register first"},
           robot_id);
    return;
  }
  if (auto allowed = may_heartbeat(*robot, message, acknowledge); !allowed)
    return refuse("a heartbeat", allowed.error(), robot_id);
  const auto interval =
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(config_.heartbeat_write_interval);
  const auto steady_now = loop_.clock().steady();
  RobotMemory& memory = robot_memory_[robot_id];
  if (!memory.wrote) {
    // First sight since this bridge started (or since the robot
    // registered): what the Robot holds, and how old its heartbeat is.
    memory.written = facts_of_robot(*robot);
    if (auto last = last_heartbeat_of(*robot)) {
      const auto age = std::chrono::duration_cast<std::chrono::steady_clock::duration>(now() - *last);
      if (age >= std::chrono::steady_clock::duration::zero() && age < interval) {
        memory.wrote = true;
        memory.last_write = steady_now - age;
      }
    }
  }
  // Heard: the robot's contact with the bridge (docs/protocol.md#ack), about
  // once per --heartbeat-ack-interval at most: a flood of heartbeats must not
  // become a flood of acknowledgements through the broker. Three quarters of
  // it apart, so a robot heartbeating at that very interval (a short
  // disconnect window makes it) has each one answered whatever the jitter.
  // A robot holding a Task not started yet may be waiting for this answer
  // to start it (it was out of contact when the dispatch came:
  // docs/agent.md#partitions): answered sooner, at most every 200 ms. The
  // deletes of what it holds and should not go out before the answer.
  std::chrono::nanoseconds ack_gap = config_.heartbeat_ack_interval * 3 / 4;
  if (lists_unstarted(robot_id, message.running_tasks))
    ack_gap = std::min<std::chrono::nanoseconds>(ack_gap, std::chrono::milliseconds(200));
  const bool answer = acknowledge && (!memory.heartbeat_acked || steady_now - *memory.heartbeat_acked >= ack_gap);
  if (stop_ended_tasks_listed(robot_id, message.running_tasks, answer) && answer) {
    memory.heartbeat_acked = steady_now;
    acks_->heartbeat(robot_id, message.timestamp);
  }
  if (std::exchange(memory.resend_dispatches_at_heartbeat, false)) resend_dispatching(robot_id);
  confirm_recorded_ends(message);
  HeartbeatFacts facts = facts_of(message);
  if (facts.capacity.empty()) facts.capacity = memory.written.capacity;  // not sent: unchanged
  // The artifacts' list comes once, until the robot hears that a heartbeat
  // carrying it arrived; later beats carry only its fingerprint. A list not
  // yet written rides on; one this bridge no longer has (it restarted, or
  // its write was lost) is asked for again, and nothing of it written meanwhile.
  std::optional<ArtifactsHeld> carried;
  if (message.artifacts && !message.artifacts->held &&
      message.artifacts->fingerprint != memory.written.artifacts_fingerprint) {
    const auto& before = memory.unwritten ? memory.unwritten->first.artifacts : std::nullopt;
    if (before && before->held && before->fingerprint == message.artifacts->fingerprint) {
      carried = before;
      facts.artifacts_fingerprint = before->fingerprint;
    } else {
      acks_->resend_artifacts(robot_id);
    }
  }
  if (facts.artifacts_fingerprint.empty()) facts.artifacts_fingerprint = memory.written.artifacts_fingerprint;
  // (facts_of says kNoArtifacts for a heartbeat without `artifacts`: the
  // Robot's list, if any, is removed.)
  const auto since = steady_now - memory.last_write;
  const bool changed = facts != memory.written;
  memory.unwritten = std::pair{message, std::move(facts)};
  if (carried) memory.unwritten->first.artifacts = std::move(carried);
  memory.unwritten_at = now();
  memory.unwritten->first.token.clear();  // never written, and 10,000 of them add up
  if (!memory.wrote || changed || since >= interval) {
    write_heartbeat(robot_id, !memory.wrote ? "first" : changed ? "changed" : "interval");
    return;
  }
  metrics_.add("k8s4r_bridge_heartbeats_coalesced_total");
  if (memory.flush_timer == 0) {
    memory.flush_timer = loop_.after(interval - since, [this, robot_id] {
      auto found = robot_memory_.find(robot_id);
      if (found == robot_memory_.end()) return;
      found->second.flush_timer = 0;
      write_heartbeat(robot_id, "interval");
    });
  }
}

void Bridge::refuse_unknown_heartbeat(const std::string& robot_id) {
  refuse("a heartbeat",
         {"UnknownRobot", "no Robot " + robot_id + " in namespace " + namespace_ + "; the robot must register first"},
         robot_id);
  tell_to_register(robot_id);
}

void Bridge::tell_to_register(const std::string& robot_id) {
  constexpr std::size_t kMaxRemembered = 10'000;
  const auto steady_now = loop_.clock().steady();
  auto told = told_to_register_.find(robot_id);
  if (told != told_to_register_.end() && steady_now - told->second < config_.dispatch_resend_after) return;
  if (told_to_register_.size() >= kMaxRemembered) told_to_register_.clear();
  told_to_register_[robot_id] = steady_now;
  // Debug: the refusal (UnknownRobot) is already in the log, summarised
  // under a flood of made-up robots.
  spdlog::debug("robot {} heartbeats but has no Robot (deleted?): telling it to register again", robot_id);
  answer_refusal(
      topics::response(robot_id).value(),
      encode(register_response(robot_id, false,
                               "no Robot " + robot_id + " in namespace " + namespace_ + ": register again", nullptr)));
}

void Bridge::confirm_recorded_ends(const Heartbeat& message) {
  for (const RunningTask& ended : message.ended_tasks) {
    if (!ended.seq) continue;
    const kube::ObjectPtr task = tasks_->get_by_uid(ended.task_uid);
    if (!task) {
      if (task_left_lately(ended.task_uid)) continue;  // relabelled, not deleted: as on_task_status
      const Refusal why{"UnknownTask", "no Task with uid " + ended.task_uid + " in namespace " + namespace_};
      acks_->report(message.robot_id,
                    ReportAck{ended.task_uid, *ended.seq, ReportResult::refused, why.reason, why.message});
      continue;
    }
    const crd::TaskView view = crd::read_task(*task);
    if (view.target_robot != message.robot_id) continue;
    if (view.status_seq && *view.status_seq >= *ended.seq) {
      acks_->report(message.robot_id, ReportAck{ended.task_uid, *ended.seq, ReportResult::recorded});
    }
  }
}

void Bridge::write_heartbeat(const std::string& robot_id, const char* reason) {
  RobotMemory& memory = robot_memory_[robot_id];
  if (!memory.unwritten) return;
  const kube::ObjectPtr robot = robots_->get(namespace_, robot_id);
  if (!robot) return;
  auto [message, facts] = std::move(*memory.unwritten);
  memory.unwritten.reset();
  memory.written = std::move(facts);
  memory.wrote = true;
  memory.last_write = loop_.clock().steady();
  if (memory.flush_timer) {
    loop_.cancel(memory.flush_timer);
    memory.flush_timer = 0;
  }
  metrics_.add("k8s4r_bridge_heartbeat_writes_total", {{"reason", reason}});
  WriteRequest request;
  // Stamped with when it arrived, not when its slot came: a heartbeat the
  // robot sent before a task started, written a while later (coalesced, or
  // the bridge stalled), must not read as a newer one that leaves the task
  // out (the manager would take the task for lost and run it again).
  request.status_patch = heartbeat_status_patch(message, *robot, memory.unwritten_at);
  if (request.status_patch["status"].contains("artifacts")) {
    // A list refused for good is not on the Robot: the robot's next
    // fingerprint then differs from what is remembered, and it is asked for
    // the list again.
    request.done = [this, robot_id](bool ok, const std::string&) {
      if (ok) return;
      loop_.post([this, robot_id] {
        if (auto found = robot_memory_.find(robot_id); found != robot_memory_.end())
          found->second.written.artifacts_fingerprint = "?";
      });
    };
  }
  writer_->write(robot_ref(robot_id), std::move(request));
  spdlog::debug("robot {}: heartbeat written ({} running)", robot_id, message.running_tasks.size());
}

}  // namespace k8s4r::bridge
