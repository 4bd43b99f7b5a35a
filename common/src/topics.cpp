#include "k8s4r/common/topics.h"

#include "k8s4r/common/identifiers.h"

#include <vector>

namespace k8s4r::topics {
namespace {

constexpr std::string_view kRobotsPrefix = "k8s4r/robots/";

Result<std::string> robot_topic(std::string_view robot_id, std::string_view suffix) {
  if (auto checked = validate_identifier(robot_id, "robotId"); !checked) return checked.error();
  std::string topic(kRobotsPrefix);
  topic.append(robot_id).append(suffix);
  return topic;
}

std::vector<std::string_view> split_levels(std::string_view topic) {
  std::vector<std::string_view> levels;
  std::size_t start = 0;
  while (true) {
    std::size_t slash = topic.find('/', start);
    levels.push_back(topic.substr(start, slash - start));
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  return levels;
}

Error unknown_topic(std::string_view topic) {
  return Error{"topic", "'" + std::string(topic) + "' is not a k8s4r topic"};
}

}  // namespace

Result<std::string> robot_register(std::string_view robot_id) { return robot_topic(robot_id, "/register"); }

Result<std::string> robot_heartbeat(std::string_view robot_id) { return robot_topic(robot_id, "/heartbeat"); }

Result<std::string> response(std::string_view robot_id) { return robot_topic(robot_id, "/response"); }

Result<std::string> dispatch(std::string_view robot_id) { return robot_topic(robot_id, "/tasks/dispatch"); }

Result<std::string> task_status(std::string_view robot_id, std::string_view task_uid) {
  if (auto checked = validate_identifier(task_uid, "taskUid"); !checked) return checked.error();
  return robot_topic(robot_id, "/tasks/" + std::string(task_uid) + "/status");
}

Result<std::string> task_status_filter(std::string_view robot_id) { return robot_topic(robot_id, "/tasks/+/status"); }

Result<std::string> presence(std::string_view robot_id) { return robot_topic(robot_id, "/presence"); }

Result<std::string> acks(std::string_view robot_id) { return robot_topic(robot_id, "/acks"); }
Result<std::string> artifacts(std::string_view robot_id) { return robot_topic(robot_id, "/artifacts"); }

Result<ParsedTopic> parse_topic(std::string_view topic) {
  if (topic == kRegister) return ParsedTopic{TopicKind::register_robot, "", "", true};
  if (topic == kHeartbeat) return ParsedTopic{TopicKind::heartbeat, "", "", true};

  const auto levels = split_levels(topic);
  if (levels.size() < 4 || levels[0] != "k8s4r" || levels[1] != "robots") return unknown_topic(topic);
  const std::string robot_id(levels[2]);
  if (auto checked = validate_identifier(robot_id, "robotId"); !checked) {
    return Error{"topic", "robot id in '" + std::string(topic) + "' " + checked.error().message};
  }
  if (levels.size() == 4 && levels[3] == "response") return ParsedTopic{TopicKind::response, robot_id, ""};
  if (levels.size() == 4 && levels[3] == "presence") return ParsedTopic{TopicKind::presence, robot_id, ""};
  if (levels.size() == 4 && levels[3] == "acks") return ParsedTopic{TopicKind::acks, robot_id, ""};
  if (levels.size() == 4 && levels[3] == "artifacts") return ParsedTopic{TopicKind::artifacts, robot_id, ""};
  if (levels.size() == 4 && levels[3] == "register") return ParsedTopic{TopicKind::register_robot, robot_id, ""};
  if (levels.size() == 4 && levels[3] == "heartbeat") return ParsedTopic{TopicKind::heartbeat, robot_id, ""};
  if (levels.size() == 5 && levels[3] == "tasks" && levels[4] == "dispatch") {
    return ParsedTopic{TopicKind::dispatch, robot_id, ""};
  }
  if (levels.size() == 6 && levels[3] == "tasks" && levels[5] == "status") {
    const std::string task_uid(levels[4]);
    if (auto checked = validate_identifier(task_uid, "taskUid"); !checked) {
      return Error{"topic", "task uid in '" + std::string(topic) + "' " + checked.error().message};
    }
    return ParsedTopic{TopicKind::task_status, robot_id, task_uid};
  }
  return unknown_topic(topic);
}

}  // namespace k8s4r::topics
