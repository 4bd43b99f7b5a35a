// Presence, the agent's online message and its last will: the Connected
// condition and status.connected, written at once, so an operator sees a
// dropped robot before any heartbeat threshold. A presence older than the
// last one applied (a will from an earlier connection, delivered late) is
// dropped.
#include "k8s4r/bridge/bridge.h"

#include <spdlog/spdlog.h>

namespace k8s4r::bridge {

void Bridge::on_presence(const Presence& message) {
  const std::string& robot_id = message.robot_id;
  const kube::ObjectPtr robot = robots_->get(namespace_, robot_id);
  if (!robot) {
    // An agent says it is online before it registers, and a retained
    // presence outlives a deleted Robot: nothing to write yet. Registering
    // marks the robot connected.
    spdlog::debug("presence of robot {} before its Robot exists: nothing to write", robot_id);
    return;
  }
  RobotMemory& memory = robot_memory_[robot_id];
  if (memory.presence_time && message.timestamp < *memory.presence_time) {
    refuse("a presence", {"StalePresence", "older than the presence already applied"}, robot_id);
    return;
  }
  if (memory.presence_time && message.timestamp == *memory.presence_time && message.online == memory.presence_online) {
    return;  // the same retained message again (a resubscription)
  }
  memory.presence_time = message.timestamp;
  memory.presence_online = message.online;
  memory.written.connected = message.online;
  WriteRequest request;
  request.status_patch = presence_status_patch(message, *robot, now());
  writer_->write(robot_ref(robot_id), std::move(request));
  spdlog::info("robot {} is {}", robot_id, message.online ? "online" : "offline");
}

}  // namespace k8s4r::bridge
