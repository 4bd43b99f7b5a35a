#include "k8s4r/crd/resources.h"

#include "k8s4r/common/hashing.h"

#include <openssl/evp.h>

#include <array>

namespace k8s4r::crd {

using nlohmann::json;

const json& value_at(const json& object, std::initializer_list<const char*> path) {
  static const json kNull;
  const json* node = &object;
  for (const char* key : path) {
    if (!node->is_object()) return kNull;
    auto found = node->find(key);
    if (found == node->end()) return kNull;
    node = &*found;
  }
  return *node;
}

std::string string_at(const json& object, std::initializer_list<const char*> path) {
  const json& value = value_at(object, path);
  return value.is_string() ? value.get<std::string>() : std::string();
}

std::optional<Timestamp> timestamp_at(const json& object, std::initializer_list<const char*> path) {
  auto parsed = parse_rfc3339(string_at(object, path));
  if (!parsed) return std::nullopt;
  return parsed.value();
}

namespace {

const json* at(const json& object, std::initializer_list<const char*> path) {
  const json& value = value_at(object, path);
  return value.is_null() ? nullptr : &value;
}

}  // namespace

std::string_view to_string(TaskState state) {
  switch (state) {
    case TaskState::pending:
      return "pending";
    case TaskState::dispatching:
      return "dispatching";
    case TaskState::scheduled:
      return "scheduled";
    case TaskState::running:
      return "running";
    case TaskState::exited:
      return "exited";
    case TaskState::completed:
      return "completed";
    case TaskState::failed:
      return "failed";
  }
  return "pending";
}

std::optional<TaskState> parse_task_state(std::string_view text) {
  for (TaskState state : {TaskState::pending, TaskState::dispatching, TaskState::scheduled, TaskState::running,
                          TaskState::exited, TaskState::completed, TaskState::failed}) {
    if (to_string(state) == text) return state;
  }
  return std::nullopt;
}

TaskView read_task(const json& task) {
  TaskView view;
  view.namespace_ = string_at(task, {"metadata", "namespace"});
  view.name = string_at(task, {"metadata", "name"});
  view.uid = string_at(task, {"metadata", "uid"});
  view.target_robot = string_at(task, {"spec", "targetRobot"});
  view.state = parse_task_state(string_at(task, {"status", "state"}));
  if (const json* seq = at(task, {"status", "statusSeq"}); seq && seq->is_number_integer())
    view.status_seq = seq->get<std::int64_t>();
  view.dispatched_at = timestamp_at(task, {"status", "dispatchedAt"});
  view.deleting = !string_at(task, {"metadata", "deletionTimestamp"}).empty();
  if (const json* finalizers = at(task, {"metadata", "finalizers"}); finalizers && finalizers->is_array()) {
    for (const json& finalizer : *finalizers) {
      if (finalizer.is_string() && finalizer.get<std::string>() == kBridgeFinalizer) view.has_bridge_finalizer = true;
    }
  }
  return view;
}

std::string_view to_string(RobotPhase phase) {
  switch (phase) {
    case RobotPhase::pending:
      return "Pending";
    case RobotPhase::online:
      return "Online";
    case RobotPhase::offline:
      return "Offline";
    case RobotPhase::unknown:
      return "Unknown";
    case RobotPhase::rejected:
      return "Rejected";
  }
  return "Unknown";
}

std::optional<RobotPhase> parse_robot_phase(std::string_view text) {
  for (RobotPhase phase :
       {RobotPhase::pending, RobotPhase::online, RobotPhase::offline, RobotPhase::unknown, RobotPhase::rejected}) {
    if (to_string(phase) == text) return phase;
  }
  return std::nullopt;
}

RobotView read_robot(const json& robot) {
  RobotView view;
  view.namespace_ = string_at(robot, {"metadata", "namespace"});
  view.name = string_at(robot, {"metadata", "name"});
  view.phase = parse_robot_phase(string_at(robot, {"status", "phase"}));
  const json* labels = at(robot, {"spec", "labels"});
  view.has_spec_labels = labels && labels->is_object() && !labels->empty();
  if (const json* connected = at(robot, {"status", "connected"}); connected && connected->is_boolean())
    view.connected = connected->get<bool>();
  return view;
}

std::optional<Condition> find_condition(const json& object, std::string_view type) {
  const json* existing = at(object, {"status", "conditions"});
  if (!existing || !existing->is_array()) return std::nullopt;
  for (const json& entry : *existing) {
    if (entry.is_object() && string_at(entry, {"type"}) == type) {
      return Condition{std::string(type), string_at(entry, {"status"}), string_at(entry, {"reason"}),
                       string_at(entry, {"message"})};
    }
  }
  return std::nullopt;
}

std::optional<Condition> stop_request(const json& task) {
  auto condition = find_condition(task, kDisruptionTarget);
  if (!condition || condition->status != "True") return std::nullopt;
  return condition;
}

bool stopped_by_operator(const json& task) {
  const auto stop = stop_request(task);
  return stop && (stop->reason == kStopDrained || stop->reason == kStopRolloutAborted);
}

json set_condition(const json& object, const Condition& condition, Timestamp now) {
  json conditions = json::array();
  bool found = false;
  if (const json* existing = at(object, {"status", "conditions"}); existing && existing->is_array()) {
    for (const json& entry : *existing) {
      if (!entry.is_object()) continue;
      if (string_at(entry, {"type"}) != condition.type) {
        conditions.push_back(entry);
        continue;
      }
      found = true;
      json updated = entry;
      if (string_at(entry, {"status"}) != condition.status || !entry.contains("lastTransitionTime"))
        updated["lastTransitionTime"] = format_rfc3339(now);
      updated["status"] = condition.status;
      updated["reason"] = condition.reason;
      updated["message"] = condition.message;
      conditions.push_back(std::move(updated));
    }
  }
  if (!found) {
    conditions.push_back({{"type", condition.type},
                          {"status", condition.status},
                          {"reason", condition.reason},
                          {"message", condition.message},
                          {"lastTransitionTime", format_rfc3339(now)}});
  }
  return conditions;
}

json merge_patch_between(const json& current, const json& wanted) {
  if (current == wanted) return nullptr;
  if (!current.is_object() || !wanted.is_object()) return wanted.is_null() ? json::object() : wanted;
  json patch = json::object();
  for (const auto& [field, value] : current.items()) {
    if (!wanted.contains(field)) patch[field] = nullptr;
  }
  for (const auto& [field, value] : wanted.items()) {
    auto found = current.find(field);
    if (found == current.end()) {
      patch[field] = value;
    } else if (*found != value) {
      patch[field] = value.is_object() && found->is_object() ? merge_patch_between(*found, value) : value;
    }
  }
  return patch;
}

json compose_merge_patches(json older, const json& newer) {
  if (!newer.is_object() || !older.is_object()) return newer;
  for (const auto& [key, value] : newer.items()) {
    auto found = older.find(key);
    if (value.is_object() && found != older.end() && found->is_object()) {
      *found = compose_merge_patches(std::move(*found), value);
    } else {
      older[key] = value;  // including null: a deletion stays a deletion
    }
  }
  return older;
}

json add_finalizer_patch(const json& object, std::string_view finalizer) {
  const json* finalizers = at(object, {"metadata", "finalizers"});
  if (!finalizers || !finalizers->is_array() || finalizers->empty()) {
    // Absent or empty: "test" that it is as the cache saw it, then set it.
    json operations = json::array();
    if (finalizers) operations.push_back({{"op", "test"}, {"path", "/metadata/finalizers"}, {"value", *finalizers}});
    operations.push_back({{"op", "add"}, {"path", "/metadata/finalizers"}, {"value", json::array({finalizer})}});
    return operations;
  }
  return json::array({{{"op", "test"}, {"path", "/metadata/finalizers"}, {"value", *finalizers}},
                      {{"op", "add"}, {"path", "/metadata/finalizers/-"}, {"value", finalizer}}});
}

json remove_finalizer_patch(const json& object, std::string_view finalizer) {
  const json* finalizers = at(object, {"metadata", "finalizers"});
  if (!finalizers || !finalizers->is_array()) return nullptr;
  for (std::size_t i = 0; i < finalizers->size(); ++i) {
    const json& entry = (*finalizers)[i];
    if (entry.is_string() && entry.get<std::string>() == finalizer) {
      const std::string path = "/metadata/finalizers/" + std::to_string(i);
      return json::array({{{"op", "test"}, {"path", path}, {"value", finalizer}}, {{"op", "remove"}, {"path", path}}});
    }
  }
  return nullptr;
}

std::string sha256_digest(std::string_view bytes) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int length = 0;
  EVP_Digest(bytes.data(), bytes.size(), digest.data(), &length, EVP_sha256(), nullptr);
  return "sha256:" + hex_encode(std::string_view(reinterpret_cast<const char*>(digest.data()), length));
}

std::string token_digest(std::string_view token) { return sha256_digest(token); }

}  // namespace k8s4r::crd
