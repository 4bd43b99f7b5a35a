// Replacing a file so that a crash leaves either the old or the new content:
// write a temporary file beside it, fsync, rename. Private to agent_core.
#pragma once

#include "k8s4r/common/result.h"

#include <optional>
#include <string>

namespace k8s4r::agent {

// Errors name `what` ("journal", "report-queue") and the path.
Result<void> write_file_durably(const std::string& path, const std::string& text, const std::string& what);

// The whole content of a file with read(2), or nullopt when it cannot be
// read. Never throws: /proc files of a process that just exited fail with
// ESRCH mid-read, which iostreams turn into an exception.
std::optional<std::string> read_whole_file(const std::string& path);

}  // namespace k8s4r::agent
