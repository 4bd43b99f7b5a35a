#include "k8s4r/bridge/dispatch_message.h"

#include "k8s4r/common/messages.h"
#include "k8s4r/crd/resources.h"

namespace k8s4r::bridge {

using nlohmann::json;

namespace {

// A top-level string of the Task, or `fallback` when it is absent or not a string.
std::string text_or(const json& task, const char* key, std::string_view fallback) {
  auto found = task.find(key);
  return found != task.end() && found->is_string() ? found->get<std::string>() : std::string(fallback);
}

json identity(const json& task) {
  json metadata = json::object();
  if (!task.is_object() || !task.contains("metadata") || !task["metadata"].is_object()) return metadata;
  for (const char* key : {"name", "namespace", "uid", "generation"}) {
    if (task["metadata"].contains(key)) metadata[key] = task["metadata"][key];
  }
  return metadata;
}

}  // namespace

Decision<std::string> dispatch_create_payload(const json& task, std::optional<Timestamp> sent_at,
                                              std::optional<std::int64_t> reported_seq,
                                              std::optional<std::int64_t> epoch) {
  const crd::TaskView view = crd::read_task(task);
  if (view.target_robot.empty()) return Refusal{"InvalidTask", "spec.targetRobot is not set"};
  json message = {{"action", "create"},
                  {"task",
                   {{"apiVersion", text_or(task, "apiVersion", crd::kApiVersion)},
                    {"kind", text_or(task, "kind", "Task")},
                    {"metadata", identity(task)},
                    {"spec", task.contains("spec") ? task["spec"] : json::object()}}}};
  if (sent_at) message["timestamp"] = format_rfc3339(*sent_at, TimePrecision::as_needed);
  // A Task its robot already reported on: an agent with no record of it
  // lost its state, and must say so rather than run it again.
  if (view.status_seq && (!reported_seq || *view.status_seq > *reported_seq)) reported_seq = view.status_seq;
  if (reported_seq) message["reportedSeq"] = *reported_seq;
  if (epoch) message["epoch"] = *epoch;
  std::string payload = message.dump();
  // The agent's own codec: what it would refuse is refused here, in its words.
  if (auto checked = parse_dispatch(payload); !checked) {
    return Refusal{"InvalidTask", "the robot would refuse this Task: " + checked.error().to_string()};
  }
  return payload;
}

std::string dispatch_delete_payload(const json& task, std::optional<std::int64_t> epoch) {
  json message = {{"action", "delete"}, {"task", {{"metadata", identity(task)}}}};
  if (epoch) message["epoch"] = *epoch;
  return message.dump();
}

}  // namespace k8s4r::bridge
