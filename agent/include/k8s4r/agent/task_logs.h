// A task's stdout and stderr files: the tail that travels in its final
// status, and the cap that keeps a chatty task from filling the robot's disk.
//
// Threading: plain functions over files; the agent's loop calls them.
#pragma once

#include <cstddef>
#include <string>

namespace k8s4r::agent {

// The last `max_bytes` of each file, stdout then stderr, cut to at most
// `max_bytes` in all at a UTF-8 character boundary. Missing files read as empty.
std::string logs_tail(const std::string& stdout_path, const std::string& stderr_path, std::size_t max_bytes);

// When `path` holds more than `max_bytes`, its content moves to `path`.1
// (replacing an older one) and `path` starts again empty; the task keeps
// writing to it, since it was opened with O_APPEND. So a stream never takes
// much more than twice `max_bytes` on disk. True when it rotated.
bool cap_log(const std::string& path, std::size_t max_bytes);

}  // namespace k8s4r::agent
