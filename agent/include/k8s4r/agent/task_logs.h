// A task's stdout and stderr files: the tail that travels in its final
// status, and the cap that keeps a chatty task from filling the robot's disk.
//
// Threading: plain functions over files; the agent's loop calls them.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>

namespace k8s4r::agent {

// The task's user owns the directory its files are in, so it may have put
// anything in their place: the agent (root) opens only a regular file of one
// name, never through a symbolic or a hard link (either could lead to
// /etc/shadow) and never blocking (a FIFO would hold the agent's loop). The
// descriptor and the file's size; -1 when it is not one, errno saying why
// (ENOENT: there is none; ELOOP: a symbolic link; EINVAL: not a regular
// file, or a hard link).
int open_task_file(const std::string& path, int flags, off_t& size);

// The last `max_bytes` of each file, stdout then stderr, cut to at most
// `max_bytes` in all at a UTF-8 character boundary. Missing files read as empty.
std::string logs_tail(const std::string& stdout_path, const std::string& stderr_path, std::size_t max_bytes);

// When `path` holds more than `max_bytes`, its content moves to `path`.1
// (replacing an older one) and `path` starts again empty; the task keeps
// writing to it, since it was opened with O_APPEND. So a stream never takes
// much more than twice `max_bytes` on disk. True when it rotated.
bool cap_log(const std::string& path, std::size_t max_bytes);

}  // namespace k8s4r::agent
