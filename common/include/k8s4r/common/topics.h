// The MQTT topics of the k8s4r wire contract (docs/protocol.md).
//
// The shared register and heartbeat topics and the per-robot response,
// dispatch and status topics are fixed by existing K8s4r deployments;
// presence, acks and the per-robot register and heartbeat topics are ours: every message a
// robot sends then names the robot in its topic, so the broker can confine a
// robot to its own topics (docs/security.md). Builders validate the identifiers they put into a topic, so no caller
// can publish to a topic a '+', '#' or '/' would change. parse_topic is the
// inverse: it tells which message a received topic carries and for whom.
//
// Thread-safety: pure functions.
#pragma once

#include "k8s4r/common/result.h"

#include <string>
#include <string_view>

namespace k8s4r::topics {

// The legacy shared topics of Go K8s4r agents: the robot is named only in the
// payload.
inline constexpr std::string_view kRegister = "k8s4r/register";
inline constexpr std::string_view kHeartbeat = "k8s4r/heartbeat";

// Subscription filters for the bridge, which listens for every robot.
inline constexpr std::string_view kAllRegisterFilter = "k8s4r/robots/+/register";
inline constexpr std::string_view kAllHeartbeatFilter = "k8s4r/robots/+/heartbeat";
inline constexpr std::string_view kAllTaskStatusFilter = "k8s4r/robots/+/tasks/+/status";
inline constexpr std::string_view kAllPresenceFilter = "k8s4r/robots/+/presence";

// k8s4r/robots/{robotId}/register
Result<std::string> robot_register(std::string_view robot_id);
// k8s4r/robots/{robotId}/heartbeat
Result<std::string> robot_heartbeat(std::string_view robot_id);
// k8s4r/robots/{robotId}/response
Result<std::string> response(std::string_view robot_id);
// k8s4r/robots/{robotId}/tasks/dispatch
Result<std::string> dispatch(std::string_view robot_id);
// k8s4r/robots/{robotId}/tasks/{taskUid}/status
Result<std::string> task_status(std::string_view robot_id, std::string_view task_uid);
// k8s4r/robots/{robotId}/tasks/+/status: an agent's own status reports.
Result<std::string> task_status_filter(std::string_view robot_id);
// k8s4r/robots/{robotId}/presence
Result<std::string> presence(std::string_view robot_id);
// k8s4r/robots/{robotId}/acks
Result<std::string> acks(std::string_view robot_id);
// k8s4r/robots/{robotId}/artifacts: what the robot keeps ahead of need (Prefetch).
Result<std::string> artifacts(std::string_view robot_id);

// k8s4r/robots/{robotId}/logs/request: a bridge asks for a piece of a task's
// log (docs/logs.md).
Result<std::string> log_request(std::string_view robot_id);
// k8s4r/robots/{robotId}/logs/chunks/{replyTo}: the robot's answer, to the
// bridge that asked (its MQTT client id), so only that bridge receives it.
Result<std::string> log_chunk(std::string_view robot_id, std::string_view reply_to);
// k8s4r/robots/+/logs/chunks/{replyTo}: every answer to this bridge.
Result<std::string> log_chunks_filter(std::string_view reply_to);
// k8s4r/robots/{robotId}/logs/chunks/+: a robot's own answers (its ACL).
Result<std::string> robot_log_chunks_filter(std::string_view robot_id);

enum class TopicKind {
  register_robot,
  heartbeat,
  response,
  dispatch,
  task_status,
  presence,
  acks,
  artifacts,
  log_request,
  log_chunk
};

struct ParsedTopic {
  TopicKind kind;
  std::string robot_id;  // empty for the legacy register and heartbeat topics: it is in the payload
  std::string task_uid;  // set for task_status only
  bool legacy = false;   // k8s4r/register or k8s4r/heartbeat
  std::string reply_to;  // set for log_chunk only: the bridge it answers
  bool operator==(const ParsedTopic&) const = default;
};

// Which message a topic carries. Fails, naming the topic, for anything that is
// not one of the topics above or whose robot id or task uid is not valid.
Result<ParsedTopic> parse_topic(std::string_view topic);

// parse_topic without a copy: the ids are views into `topic`, valid while it
// is. Allocates nothing unless it fails (the broker plugin asks for every
// message it delivers).
struct TopicView {
  TopicKind kind;
  std::string_view robot_id, task_uid;
  bool legacy = false;
  std::string_view reply_to;
};
Result<TopicView> parse_topic_view(std::string_view topic);

}  // namespace k8s4r::topics
