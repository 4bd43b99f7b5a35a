// Heartbeats, coalesced: at most one Robot write per robot per
// --heartbeat-write-interval, and one at once when what the manager or an
// operator acts on changed (running tasks, capacity, connection). A heartbeat
// between writes is remembered (the newest only) and written in the robot's
// next slot, so a robot that stops heartbeating still has its last one
// written, at most one interval late.
#include "k8s4r/bridge/bridge.h"

#include <spdlog/spdlog.h>

namespace k8s4r::bridge {

void Bridge::on_heartbeat(const Heartbeat& message) {
  const std::string& robot_id = message.robot_id;
  const kube::ObjectPtr robot = robots_->get(namespace_, robot_id);
  if (!robot) {
    refuse("a heartbeat",
           {"UnknownRobot", "no Robot " + robot_id + " in namespace " + namespace_ + "; the robot must register first"},
           robot_id);
    return;
  }
  RobotMemory& memory = robot_memory_[robot_id];
  if (!memory.wrote) memory.written = facts_of_robot(*robot);
  const HeartbeatFacts facts = facts_of(message);
  memory.unwritten = message;
  const auto interval =
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(config_.heartbeat_write_interval);
  const auto since = std::chrono::steady_clock::now() - memory.last_write;
  const bool changed = facts.running_tasks != memory.written.running_tasks ||
                       (!facts.capacity.is_null() && facts.capacity != memory.written.capacity) ||
                       facts.connected != memory.written.connected;
  if (!memory.wrote || changed || since >= interval) {
    metrics_.add("k8s4r_bridge_heartbeat_writes_total", {{"reason", !memory.wrote ? "first"
                                                                    : changed     ? "changed"
                                                                                  : "interval"}});
    write_heartbeat(robot_id);
    return;
  }
  metrics_.add("k8s4r_bridge_heartbeats_coalesced_total");
  if (memory.flush_timer == 0) {
    memory.flush_timer = loop_.after(interval - since, [this, robot_id] {
      auto found = robot_memory_.find(robot_id);
      if (found == robot_memory_.end()) return;
      found->second.flush_timer = 0;
      if (found->second.unwritten) {
        metrics_.add("k8s4r_bridge_heartbeat_writes_total", {{"reason", "interval"}});
        write_heartbeat(robot_id);
      }
    });
  }
}

void Bridge::write_heartbeat(const std::string& robot_id) {
  RobotMemory& memory = robot_memory_[robot_id];
  if (!memory.unwritten) return;
  const kube::ObjectPtr robot = robots_->get(namespace_, robot_id);
  if (!robot) return;
  const Heartbeat message = *memory.unwritten;
  memory.unwritten.reset();
  HeartbeatFacts facts = facts_of(message);
  if (facts.capacity.is_null()) facts.capacity = memory.written.capacity;
  memory.written = facts;
  memory.wrote = true;
  memory.last_write = std::chrono::steady_clock::now();
  if (memory.flush_timer) {
    loop_.cancel(memory.flush_timer);
    memory.flush_timer = 0;
  }
  WriteRequest request;
  request.status_patch = heartbeat_status_patch(message, *robot, now());
  writer_->write(robot_ref(robot_id), std::move(request));
  spdlog::debug("robot {}: heartbeat written ({} running)", robot_id, message.running_tasks.size());
}

}  // namespace k8s4r::bridge
