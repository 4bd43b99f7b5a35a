#include "k8s4r/bridge/robot_patches.h"

#include "k8s4r/common/slots.h"

#include "k8s4r/crd/resources.h"

#include <algorithm>

namespace k8s4r::bridge {

using nlohmann::json;

namespace {

const json& field(const json& object, const char* a, const char* b) { return crd::value_at(object, {a, b}); }

bool says_connected(const json* robot) {
  return robot && field(*robot, "status", "connected").is_boolean() && field(*robot, "status", "connected").get<bool>();
}

crd::Condition connected_condition(bool online) {
  if (online) return {"Connected", "True", "Online", "the agent holds an MQTT session"};
  return {"Connected", "False", "Disconnected",
          "the agent went offline: it said goodbye, the broker published its last will, or the bridge removed its "
          "broker login"};
}

constexpr std::string_view kStorageReady = "StorageReady";

crd::Condition storage_condition(const std::optional<StorageError>& error) {
  if (error) return {std::string(kStorageReady), "False", error->reason, error->message};
  return {std::string(kStorageReady), "True", "Writable", "the agent stores its state"};
}

std::string storage_fact(const std::optional<crd::Condition>& condition) {
  if (!condition || condition->status != "False") return "";
  return condition->reason + ": " + condition->message;
}

json running_uids(std::vector<std::string> uids) {
  std::sort(uids.begin(), uids.end());
  return uids;
}

}  // namespace

std::string capacity_text(const json& device) {
  if (!device.is_object()) return {};
  json capacity = json::object();
  for (const char* key : {"hostname", "platform"}) {
    if (device.contains(key)) capacity[key] = device[key];
  }
  if (auto cpu = device.find("cpu"); cpu != device.end() && cpu->is_object()) {
    for (const char* key : {"physicalCores", "logicalCores", "modelName", "vendor"}) {
      if (cpu->contains(key)) capacity["cpu"][key] = (*cpu)[key];
    }
  }
  if (auto memory = device.find("memory"); memory != device.end() && memory->is_object() && memory->contains("total"))
    capacity["memory"]["total"] = (*memory)["total"];
  // Objects print their keys sorted: one text per capacity.
  return capacity.dump(-1, ' ', false, json::error_handler_t::replace);
}

Decision<void> may_register(const json* robot, const Register& message) {
  if (!robot) return boost::outcome_v2::success();
  const crd::RobotView view = crd::read_robot(*robot);
  const json& judged = field(*robot, "status", "tokenDigest");
  const std::string presented = message.token.empty() ? "" : crd::token_digest(message.token);
  const bool same_token = judged.is_string() ? judged.get<std::string>() == presented : presented.empty();
  if (view.phase == crd::RobotPhase::rejected && same_token) {
    const json& why = field(*robot, "status", "message");
    return Refusal{"RobotRejected",
                   "the Robot is Rejected" + (why.is_string() ? ": " + why.get<std::string>() : std::string())};
  }
  const bool approved = view.phase == crd::RobotPhase::online || view.phase == crd::RobotPhase::offline;
  if (approved && judged.is_string() && !same_token) {
    return Refusal{"TokenMismatch",
                   "the Robot is approved with another token; a new one is taken once its Secret holds it (the "
                   "manager then rejects the old one)"};
  }
  return boost::outcome_v2::success();
}

Decision<void> may_heartbeat(const json& robot, const Heartbeat& message, bool own_topic) {
  const json& judged = field(robot, "status", "tokenDigest");
  if (!judged.is_string()) return boost::outcome_v2::success();  // registered without a token: nothing to match
  if (message.token.empty()) {
    if (own_topic) return boost::outcome_v2::success();  // k8s4r-agent's: its login is its proof
    return Refusal{"TokenMismatch", "a heartbeat on the shared topic must carry the token the Robot registered with"};
  }
  if (crd::token_digest(message.token) != judged.get<std::string>())
    return Refusal{"TokenMismatch", "its token is not the one the Robot registered with"};
  return boost::outcome_v2::success();
}

json new_robot(const Register& message, const std::string& namespace_) {
  json robot = {{"apiVersion", crd::kApiVersion},
                {"kind", "Robot"},
                {"metadata",
                 {{"name", message.robot_id},
                  {"namespace", namespace_},
                  {"labels", {{kSlotLabel, std::to_string(slot_of(message.robot_id))}}}}},
                {"spec", {{"robotId", message.robot_id}, {"description", "registered by its agent"}}}};
  if (!message.labels.empty()) robot["spec"]["labels"] = message.labels;
  return robot;
}

json register_robot_patch(const Register& message, const json& robot) {
  json patch = nullptr;
  if (!message.labels.empty() && !crd::read_robot(robot).has_spec_labels) patch["spec"]["labels"] = message.labels;
  // A Robot made before slots, or by hand: labelled with its slot.
  const std::string slot = std::to_string(slot_of(message.robot_id));
  const json* labels = robot.contains("metadata") ? &robot["metadata"] : nullptr;
  labels = labels && labels->contains("labels") ? &(*labels)["labels"] : nullptr;
  if (!labels || !labels->is_object() || labels->value(std::string(kSlotLabel), std::string()) != slot)
    patch["metadata"]["labels"][std::string(kSlotLabel)] = slot;
  return patch;
}

namespace {

// What the robot had seen when it made the list of tasks written beside it
// (docs/protocol.md#heartbeat); null (removed) when it does not say, so a Go
// K8s4r agent that replaces ours is not judged by our agent's figures.
void put_knowledge(json& status, const RobotKnowledge& knows) {
  status["reportSeq"] = knows.report_seq ? json(*knows.report_seq) : json(nullptr);
  status["newestDispatch"] =
      knows.newest_dispatch ? json(format_rfc3339(*knows.newest_dispatch, TimePrecision::as_needed)) : json(nullptr);
}

}  // namespace

json register_status_patch(const Register& message, const json* robot, Timestamp now) {
  json status = {{"lastHeartbeatTime", format_rfc3339(now)}, {"connected", true}};
  if (!robot || !crd::read_robot(*robot).phase) status["phase"] = crd::to_string(crd::RobotPhase::pending);
  if (!message.agent_version.empty()) status["agentVersion"] = message.agent_version;
  if (message.device_info) status["deviceInfo"] = to_json_value(*message.device_info);
  if (!message.token.empty()) status["tokenDigest"] = crd::token_digest(message.token);
  std::vector<std::string> running, ended;
  for (const RunningTask& task : message.running_tasks) {
    (task.state == TaskRunState::running ? running : ended).push_back(task.task_uid);
  }
  // Absent when the agent does not list them (Go K8s4r): unknown, not none.
  status["runningTasks"] = message.lists_running_tasks ? running_uids(std::move(running)) : json(nullptr);
  if (message.knows.report_seq) {
    // What it holds ended is ended on the robot, as a heartbeat would say:
    // judged by its reportSeq, a task it holds is never missing from it.
    const bool truncated = ended.size() > kMaxEndedTasksListed;
    if (truncated) ended.resize(kMaxEndedTasksListed);
    status["endedTasks"] = ended.empty() ? json(nullptr) : running_uids(std::move(ended));
    status["endedTasksTruncated"] = truncated ? json(true) : json(nullptr);
  }
  put_knowledge(status, message.knows);
  status["conditions"] = crd::set_condition(robot ? *robot : json::object(), connected_condition(true), now);
  return {{"status", status}};
}

HeartbeatFacts facts_of(const Heartbeat& message) {
  HeartbeatFacts facts;
  facts.running_tasks = message.running_tasks;
  std::sort(facts.running_tasks.begin(), facts.running_tasks.end());
  for (const RunningTask& ended : message.ended_tasks) facts.ended_tasks.push_back(ended.task_uid);
  std::sort(facts.ended_tasks.begin(), facts.ended_tasks.end());
  facts.ended_tasks_truncated = message.ended_tasks_truncated;
  if (message.device_info) facts.capacity = capacity_text(to_json_value(*message.device_info));
  facts.connected = true;
  if (message.storage_error) facts.storage_error = storage_fact(storage_condition(message.storage_error));
  if (!message.artifacts) {
    facts.artifacts_fingerprint = kNoArtifacts;
  } else if (message.artifacts->held) {
    facts.artifacts_fingerprint = message.artifacts->fingerprint;
  }
  return facts;
}

Prefetch prefetch_of_robot(const json& robot, Timestamp now) {
  Prefetch wanted;
  wanted.robot_id = crd::string_at(robot, {"metadata", "name"});
  wanted.timestamp = now;
  for (const json& item : crd::value_at(robot, {"status", "prefetch"})) {
    if (!item.is_object() || wanted.artifacts.size() >= kMaxPrefetched) continue;
    PrefetchArtifact artifact{crd::string_at(item, {"source"}), crd::string_at(item, {"checksum"}), std::nullopt};
    if (const json& size = crd::value_at(item, {"size"}); size.is_number_integer() && size.get<std::int64_t>() >= 0)
      artifact.size = size.get<std::int64_t>();
    // What the robot would refuse is not sent (the manager wrote it; a
    // hand may have).
    json one = to_json_value(Prefetch{wanted.robot_id, {artifact}, std::nullopt});
    if (!parse_prefetch(one.dump())) continue;
    wanted.artifacts.push_back(std::move(artifact));
  }
  return wanted;
}

std::optional<Timestamp> last_heartbeat_of(const json& robot) {
  const json& last = field(robot, "status", "lastHeartbeatTime");
  if (!last.is_string()) return std::nullopt;
  auto parsed = parse_rfc3339(last.get<std::string>());
  if (!parsed) return std::nullopt;
  return parsed.value();
}

HeartbeatFacts facts_of_robot(const json& robot) {
  HeartbeatFacts facts;
  if (const json& running = field(robot, "status", "runningTasks"); running.is_array()) {
    for (const json& uid : running) {
      if (uid.is_string()) facts.running_tasks.push_back(uid.get<std::string>());
    }
    std::sort(facts.running_tasks.begin(), facts.running_tasks.end());
  }
  if (const json& ended = field(robot, "status", "endedTasks"); ended.is_array()) {
    for (const json& uid : ended) {
      if (uid.is_string()) facts.ended_tasks.push_back(uid.get<std::string>());
    }
    std::sort(facts.ended_tasks.begin(), facts.ended_tasks.end());
  }
  facts.ended_tasks_truncated = field(robot, "status", "endedTasksTruncated") == true;
  const json& device = field(robot, "status", "deviceInfo");
  facts.capacity = device.is_string() ? device.get<std::string>() : capacity_text(device);
  facts.connected = says_connected(&robot);
  facts.storage_error = storage_fact(crd::find_condition(robot, kStorageReady));
  const json& artifacts = field(robot, "status", "artifacts");
  facts.artifacts_fingerprint =
      artifacts.is_object() ? crd::string_at(artifacts, {"fingerprint"}) : std::string(kNoArtifacts);
  return facts;
}

json heartbeat_status_patch(const Heartbeat& message, const json& robot, Timestamp now) {
  json status = {{"lastHeartbeatTime", format_rfc3339(now)},
                 {"runningTasks", message.lists_running_tasks ? running_uids(message.running_tasks) : json(nullptr)}};
  // What ended on the robot and waits for its end to be recorded: the
  // manager does not take it for lost. null (removed) when none.
  std::vector<std::string> ended;
  for (const RunningTask& task : message.ended_tasks) ended.push_back(task.task_uid);
  status["endedTasks"] = ended.empty() ? json(nullptr) : running_uids(std::move(ended));
  status["endedTasksTruncated"] = message.ended_tasks_truncated ? json(true) : json(nullptr);
  put_knowledge(status, message.knows);
  if (message.device_info) status["deviceInfo"] = to_json_value(*message.device_info);
  // What the robot's artifact store holds, when the heartbeat lists it (a
  // fingerprint alone says it is unchanged); removed when it says nothing
  // of a store (turned off, or another agent now).
  if (!message.artifacts && field(robot, "status", "artifacts").is_object()) status["artifacts"] = nullptr;
  if (message.artifacts && message.artifacts->held) {
    const ArtifactsHeld& held = *message.artifacts;
    status["artifacts"] = {{"fingerprint", held.fingerprint},
                           {"count", held.count},
                           {"bytes", held.bytes},
                           {"maxBytes", held.max_bytes},
                           {"held", *held.held},
                           {"truncated", held.truncated ? json(true) : json(nullptr)}};
    json states = json::array();
    for (const PrefetchState& state : held.prefetch) {
      json entry = {{"checksum", state.checksum}, {"state", state.state}};
      if (!state.reason.empty()) entry["reason"] = state.reason;
      if (!state.message.empty()) entry["message"] = state.message;
      states.push_back(std::move(entry));
    }
    status["artifacts"]["prefetch"] = states.empty() ? json(nullptr) : std::move(states);
  }
  // Conditions are one list in a merge patch: each change goes onto the
  // list the one before made.
  json conditions_of = {{"status", {{"conditions", field(robot, "status", "conditions")}}}};
  bool conditions_changed = false;
  auto set = [&](const crd::Condition& condition) {
    conditions_of["status"]["conditions"] = crd::set_condition(conditions_of, condition, now);
    conditions_changed = true;
  };
  if (!says_connected(&robot)) {
    status["connected"] = true;
    set(connected_condition(true));
  }
  const auto storage = crd::find_condition(robot, kStorageReady);
  if (message.storage_error || (storage && storage->status != "True")) set(storage_condition(message.storage_error));
  if (conditions_changed) status["conditions"] = conditions_of["status"]["conditions"];
  return {{"status", status}};
}

json presence_status_patch(const Presence& message, const json& robot, Timestamp now) {
  json status = {{"connected", message.online}};
  status["conditions"] = crd::set_condition(robot, connected_condition(message.online), now);
  return {{"status", status}};
}

RegisterResponse register_response(const std::string& robot_id, bool success, const std::string& message,
                                   const json* robot) {
  RegisterResponse response;
  response.success = success;
  response.robot_id = robot_id;
  response.message = message;
  if (robot) {
    switch (crd::read_robot(*robot).phase.value_or(crd::RobotPhase::pending)) {
      case crd::RobotPhase::online:
        response.phase = RobotPhase::online;
        break;
      case crd::RobotPhase::offline:
        response.phase = RobotPhase::offline;
        break;
      case crd::RobotPhase::unknown:
      case crd::RobotPhase::rejected:
        response.phase = RobotPhase::unknown;
        break;
      case crd::RobotPhase::pending:
        response.phase = RobotPhase::pending;
        break;
    }
  } else if (success) {
    response.phase = RobotPhase::pending;
  }
  return response;
}

}  // namespace k8s4r::bridge
