#include "k8s4r/manager/output_references.h"

#include "k8s4r/crd/resources.h"

#include <algorithm>
#include <functional>
#include <set>

namespace k8s4r::manager {

using nlohmann::json;

namespace {

constexpr std::string_view kOpen = "$(groups.";
constexpr std::string_view kTasks = ".tasks.";
constexpr std::string_view kOutputs = ".outputs.";

// Calls `found` with each reference in `text` and where it starts and ends;
// an Error for one that does not read GROUP.tasks.TASK.outputs.KEY.
Result<void> scan(const std::string& text, const std::string& field,
                  const std::function<void(const OutputReference&, std::size_t, std::size_t)>& found) {
  for (std::size_t at = text.find(kOpen); at != std::string::npos; at = text.find(kOpen, at)) {
    const std::size_t close = text.find(')', at);
    const auto malformed = [&](const std::string& why) {
      return Error{field, "'" + text.substr(at, close == std::string::npos ? std::string::npos : close - at + 1) +
                              "' " + why + "; write $(groups.GROUP.tasks.TASK.outputs.KEY)"};
    };
    if (close == std::string::npos) return malformed("has no closing parenthesis");
    const std::string inside = text.substr(at + kOpen.size(), close - at - kOpen.size());
    const std::size_t tasks = inside.find(kTasks);
    const std::size_t outputs = tasks == std::string::npos ? std::string::npos : inside.find(kOutputs, tasks);
    if (outputs == std::string::npos) return malformed("is not a reference to an output");
    OutputReference reference{inside.substr(0, tasks),
                              inside.substr(tasks + kTasks.size(), outputs - tasks - kTasks.size()),
                              inside.substr(outputs + kOutputs.size())};
    if (reference.group.empty() || reference.task.empty() || reference.key.empty())
      return malformed("names no group, task or key");
    found(reference, at, close + 1);
    at = close + 1;
  }
  return ok();
}

// Each env value of each task template, with its field's path.
Result<void> each_env_value(const json& group_spec,
                            const std::function<Result<void>(const std::string&, const std::string&)>& visit) {
  const json& templates = crd::value_at(group_spec, {"tasks"});
  if (!templates.is_array()) return ok();
  for (std::size_t t = 0; t < templates.size(); ++t) {
    const json& env = crd::value_at(templates[t], {"env"});
    if (!env.is_object()) continue;
    for (const auto& [name, value] : env.items()) {
      if (!value.is_string()) continue;
      const std::string field = "tasks[" + std::to_string(t) + "].env." + name;
      if (auto visited = visit(value.get<std::string>(), field); !visited) return visited;
    }
  }
  return ok();
}

const json* group_named(const json& job, const std::string& name) {
  const json& groups = crd::value_at(job, {"spec", "taskGroups"});
  if (!groups.is_array()) return nullptr;
  for (const json& group : groups)
    if (crd::string_at(group, {"name"}) == name) return &group;
  return nullptr;
}

}  // namespace

Result<std::vector<OutputReference>> output_references(const json& group_spec) {
  std::vector<OutputReference> out;
  std::set<OutputReference> seen;
  auto scanned = each_env_value(group_spec, [&](const std::string& value, const std::string& field) -> Result<void> {
    auto found = scan(value, field, [&](const OutputReference& reference, std::size_t, std::size_t) {
      if (seen.insert(reference).second) out.push_back(reference);
    });
    if (found && out.size() > kMaxOutputReferences) {
      return Error{field, "the group's tasks use more than " + std::to_string(kMaxOutputReferences) + " outputs"};
    }
    return found;
  });
  if (!scanned) return scanned.error();
  return out;
}

Result<std::vector<OutputReference>> checked_output_references(const json& job, const json& group_spec,
                                                               const std::string& group_name) {
  auto references = output_references(group_spec);
  if (!references) return references.error();
  if (references.value().empty()) return references;
  std::string type = crd::string_at(job, {"spec", "type"});
  if (type.empty()) type = "batch";
  const auto refuse = [](const OutputReference& reference, const std::string& why) {
    return Error{"spec.tasks", "$(groups." + reference.group + ".tasks." + reference.task + ".outputs." +
                                   reference.key + "): " + why};
  };
  for (const OutputReference& reference : references.value()) {
    if (type != "batch") return refuse(reference, "only a batch Job's tasks can use outputs, this Job is " + type);
    if (reference.group == group_name) return refuse(reference, "a group cannot use its own outputs");
    const json* producer = group_named(job, reference.group);
    if (!producer) return refuse(reference, "the Job has no group " + reference.group);
    const json& count = crd::value_at(*producer, {"count"});
    if (!count.is_null() && !(count.is_number_integer() && count.get<long long>() == 1))
      return refuse(reference, "group " + reference.group + " has count " + count.dump() +
                                   "; outputs can be used only from a group of count 1");
    bool has_task = false;
    for (const json& task : crd::value_at(*producer, {"tasks"}))
      has_task |= crd::string_at(task, {"name"}) == reference.task;
    if (!has_task) return refuse(reference, "group " + reference.group + " has no task " + reference.task);
  }
  // No cycle: follow the groups this one waits for, and what they wait for.
  std::set<std::string> seen;
  std::vector<std::string> next;
  for (const OutputReference& reference : references.value()) next.push_back(reference.group);
  while (!next.empty()) {
    const std::string at = next.back();
    next.pop_back();
    if (at == group_name) return Error{"spec.tasks", "its outputs references form a cycle back to group " + group_name};
    if (!seen.insert(at).second) continue;
    const json* producer = group_named(job, at);
    if (!producer) continue;
    auto further = output_references(*producer);
    if (!further) continue;  // that group is refused on its own
    for (const OutputReference& reference : further.value()) next.push_back(reference.group);
  }
  return references;
}

Result<json> with_outputs(json task, const std::map<std::string, ProducerOutputs>& producers) {
  if (!task.is_object() || !crd::value_at(task, {"spec", "env"}).is_object()) return task;
  for (auto& [name, value] : task["spec"]["env"].items()) {
    if (!value.is_string()) continue;
    const std::string text = value.get<std::string>();
    const std::string field = "spec.env." + name;
    std::string replaced;
    std::size_t copied = 0;
    std::optional<Error> missing;
    auto scanned = scan(text, field, [&](const OutputReference& reference, std::size_t from, std::size_t to) {
      replaced += text.substr(copied, from - copied);
      copied = to;
      const auto producer = producers.find(reference.group);
      const ProducerOutputs* outputs = producer == producers.end() ? nullptr : &producer->second;
      const json* declared = nullptr;
      if (missing) return;
      if (outputs && outputs->state == ProducerOutputs::State::completed) {
        if (auto of_task = outputs->outputs.find(reference.task); of_task != outputs->outputs.end()) {
          if (auto item = of_task->second.find(reference.key); item != of_task->second.end()) declared = &*item;
        }
      }
      if (!declared) {
        if (!missing)
          missing = Error{field, "task " + reference.task + " of group " + reference.group + " declared no output " +
                                     reference.key};
        return;
      }
      const std::string filled = declared->is_string() ? declared->get<std::string>() : declared->dump();
      if (filled.find('\0') != std::string::npos) {
        missing = Error{field, "output " + reference.key + " of task " + reference.task + " of group " +
                                   reference.group + " holds a NUL character, which no environment can"};
        return;
      }
      replaced += filled;
    });
    if (!scanned) return scanned.error();
    if (missing) return *missing;
    if (copied == 0) continue;
    value = replaced + text.substr(copied);
  }
  if (const std::size_t size = task["spec"]["env"].dump().size(); size > kMaxFilledEnvBytes) {
    return Error{"spec.env", "with the outputs it uses filled in it would be " + std::to_string(size) +
                                 " bytes, over the limit of " + std::to_string(kMaxFilledEnvBytes)};
  }
  return task;
}

}  // namespace k8s4r::manager
