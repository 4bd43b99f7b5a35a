#include "k8s4r/common/topics.h"

#include "k8s4r/common/identifiers.h"

#include <array>
#include <optional>
#include <utility>

namespace k8s4r::topics {
namespace {

constexpr std::string_view kRobotsPrefix = "k8s4r/robots/";

Result<std::string> robot_topic(std::string_view robot_id, std::string_view suffix) {
  if (auto checked = validate_identifier(robot_id, "robotId"); !checked) return checked.error();
  std::string topic(kRobotsPrefix);
  topic.append(robot_id).append(suffix);
  return topic;
}

// At most six levels (the longest topic above); nullopt for more.
struct Levels {
  std::array<std::string_view, 6> at;
  std::size_t count = 0;
};
std::optional<Levels> split_levels(std::string_view topic) {
  Levels levels;
  std::size_t start = 0;
  while (true) {
    if (levels.count == levels.at.size()) return std::nullopt;
    const std::size_t slash = topic.find('/', start);
    levels.at[levels.count++] = topic.substr(start, slash - start);
    if (slash == std::string_view::npos) return levels;
    start = slash + 1;
  }
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

Result<std::string> log_request(std::string_view robot_id) { return robot_topic(robot_id, "/logs/request"); }

Result<std::string> log_chunk(std::string_view robot_id, std::string_view reply_to) {
  if (auto checked = validate_identifier(reply_to, "replyTo"); !checked) return checked.error();
  return robot_topic(robot_id, "/logs/chunks/" + std::string(reply_to));
}

Result<std::string> log_chunks_filter(std::string_view reply_to) {
  if (auto checked = validate_identifier(reply_to, "replyTo"); !checked) return checked.error();
  return std::string(kRobotsPrefix) + "+/logs/chunks/" + std::string(reply_to);
}

Result<std::string> robot_log_chunks_filter(std::string_view robot_id) {
  return robot_topic(robot_id, "/logs/chunks/+");
}

Result<TopicView> parse_topic_view(std::string_view topic) {
  if (topic == kRegister) return TopicView{TopicKind::register_robot, {}, {}, true};
  if (topic == kHeartbeat) return TopicView{TopicKind::heartbeat, {}, {}, true};

  const auto split = split_levels(topic);
  if (!split || split->count < 4 || split->at[0] != "k8s4r" || split->at[1] != "robots") return unknown_topic(topic);
  const auto& level = split->at;
  const std::size_t count = split->count;
  const std::string_view robot_id = level[2];
  if (auto checked = validate_identifier(robot_id, "robotId"); !checked) {
    return Error{"topic", "robot id in '" + std::string(topic) + "' " + checked.error().message};
  }
  if (count == 4) {
    for (const auto& [name, kind] :
         {std::pair{"response", TopicKind::response}, std::pair{"presence", TopicKind::presence},
          std::pair{"acks", TopicKind::acks}, std::pair{"artifacts", TopicKind::artifacts},
          std::pair{"register", TopicKind::register_robot}, std::pair{"heartbeat", TopicKind::heartbeat}}) {
      if (level[3] == name) return TopicView{kind, robot_id, {}};
    }
  }
  if (count == 5 && level[3] == "tasks" && level[4] == "dispatch") return TopicView{TopicKind::dispatch, robot_id, {}};
  if (count == 5 && level[3] == "logs" && level[4] == "request") return TopicView{TopicKind::log_request, robot_id, {}};
  if (count == 6 && level[3] == "logs" && level[4] == "chunks") {
    if (auto checked = validate_identifier(level[5], "replyTo"); !checked) {
      return Error{"topic", "bridge id in '" + std::string(topic) + "' " + checked.error().message};
    }
    return TopicView{TopicKind::log_chunk, robot_id, {}, false, level[5]};
  }
  if (count == 6 && level[3] == "tasks" && level[5] == "status") {
    if (auto checked = validate_identifier(level[4], "taskUid"); !checked) {
      return Error{"topic", "task uid in '" + std::string(topic) + "' " + checked.error().message};
    }
    return TopicView{TopicKind::task_status, robot_id, level[4]};
  }
  return unknown_topic(topic);
}

Result<ParsedTopic> parse_topic(std::string_view topic) {
  auto view = parse_topic_view(topic);
  if (!view) return view.error();
  const TopicView& parsed = view.value();
  return ParsedTopic{parsed.kind, std::string(parsed.robot_id), std::string(parsed.task_uid), parsed.legacy,
                     std::string(parsed.reply_to)};
}

}  // namespace k8s4r::topics
