// A task's declared outputs: the small JSON object it may write to
// K8S4R_OUTPUTS_FILE (its directory's outputs.json), which becomes the
// Task's status.outputs when it completes, is cached with its result, and
// can be given to later tasks of its Job (docs/caching.md#declared-outputs).
//
// Threading: a plain function over a file; the agent's loop calls it.
#pragma once

#include "k8s4r/common/result.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace k8s4r::agent {

// The file's name in the task's directory.
inline constexpr const char* kTaskOutputsFile = "outputs.json";

// What the task wrote to `path`: none when there is no such file; an Error
// (for the task's final status) when it is not a plain file of its own,
// holds more than kMaxTaskOutputsBytes, or is not a JSON object.
Result<std::optional<nlohmann::json>> read_task_outputs(const std::string& path);

}  // namespace k8s4r::agent
