// How a task of a Job uses what a task of another of its groups declared
// (docs/caching.md#declared-outputs): a value in a task template's `env`
// may hold `$(groups.GROUP.tasks.TASK.outputs.KEY)`, which the manager
// replaces with that output when it makes the Task (a string as it is,
// any other JSON value written compactly). As with Tekton's results, a
// reference orders the work: the group's Tasks are made only once GROUP has
// completed, so every Task is whole when it is made, its cache key covers
// the values it was given, and the agent knows nothing of references.
//
// Rules (an Error names the field): the Job is a batch Job; GROUP is
// another group of the same Job with count 1 and a task TASK; the groups'
// references form no cycle; a group uses at most kMaxOutputReferences
// outputs, and a Task's env with the values filled in is at most
// kMaxFilledEnvBytes. Text in `$(...)` that does not start with `groups.` is
// left alone.
//
// Thread-safety: pure functions.
#pragma once

#include "k8s4r/common/result.h"

#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

namespace k8s4r::manager {

inline constexpr std::size_t kMaxOutputReferences = 64;
inline constexpr std::size_t kMaxFilledEnvBytes = 64 * 1024;

struct OutputReference {
  std::string group, task, key;
  bool operator==(const OutputReference&) const = default;
  auto operator<=>(const OutputReference&) const = default;
};

// The references in a TaskGroup's (or a Job's group's) task templates, each
// once, in order; an Error for a malformed one.
Result<std::vector<OutputReference>> output_references(const nlohmann::json& group_spec);

// The references in `group_spec` (the TaskGroup's own spec, whose templates
// its Tasks are made from), checked against its Job as the rules above say;
// `group_name` is its name in the Job.
Result<std::vector<OutputReference>> checked_output_references(const nlohmann::json& job,
                                                               const nlohmann::json& group_spec,
                                                               const std::string& group_name);

// What a producing group says of the outputs its Tasks declared.
struct ProducerOutputs {
  enum class State { waiting, completed, failed } state = State::waiting;
  std::map<std::string, nlohmann::json> outputs;  // by task name (spec.name), once completed (absent: declared none)
  std::string why;                                // failed: what its status said
};

// `task` (a Task to make) with every reference in its env replaced, or an
// Error naming what is missing (a task that declared no such output).
Result<nlohmann::json> with_outputs(nlohmann::json task, const std::map<std::string, ProducerOutputs>& producers);

}  // namespace k8s4r::manager
