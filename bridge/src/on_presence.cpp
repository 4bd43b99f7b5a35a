// Presence, the agent's online message and its last will: the Connected
// condition and status.connected, written at once, so an operator sees a
// dropped robot before any heartbeat threshold. Presences are applied in the
// order they arrive: the broker delivers one topic's messages in order (a
// will is published when its connection dies, before the next online
// message), while robots' clocks, often without a battery-backed clock, cannot
// be compared. Only a repeat of the last one (a retained message seen again
// on resubscribing) is skipped.
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
  if (memory.presence_time && message.timestamp == *memory.presence_time && message.online == memory.presence_online) {
    return;  // the same retained message again (a resubscription)
  }
  // A heartbeat waiting for its slot was sent before this goodbye: written
  // first, or it would mark the robot connected again after it.
  if (!message.online && memory.unwritten) write_heartbeat(robot_id, "offline");
  memory.presence_time = message.timestamp;
  memory.presence_online = message.online;
  memory.written.connected = message.online;
  WriteRequest request;
  request.status_patch = presence_status_patch(message, *robot, now());
  writer_->write(robot_ref(robot_id), std::move(request));
  spdlog::info("robot {} is {}", robot_id, message.online ? "online" : "offline");
}

}  // namespace k8s4r::bridge
