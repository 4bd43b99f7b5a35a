// Replacing a file so that a crash leaves either the old or the new content:
// write a temporary file beside it, fsync, rename. Private to agent_core.
#pragma once

#include "k8s4r/common/result.h"

#include <optional>
#include <string>

namespace k8s4r::agent {

// Errors name `what` ("journal", "report-queue") and the path.
Result<void> write_file_durably(const std::string& path, const std::string& text, const std::string& what);

}  // namespace k8s4r::agent
