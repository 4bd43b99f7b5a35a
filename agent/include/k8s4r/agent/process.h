// Starting a task's process and signalling it, the way the monitor needs:
// posix_spawn (vfork-like in glibc, so its cost does not grow with the
// agent's heap), a process group of its own so a stop reaches every
// descendant, stdout and stderr into files, and a pidfd to wait on.
#pragma once

#include "k8s4r/common/result.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <sys/types.h>

namespace k8s4r::agent {

struct ProcessSpec {
  std::string command;  // a path, or a name looked up in PATH
  std::vector<std::string> args;
  std::map<std::string, std::string> env;  // the whole environment of the child
  std::string working_dir;
  std::string stdout_path, stderr_path;  // created, opened O_APPEND so the agent may cap them
  bool append_output = false;            // keep what the files hold (a restart); else truncate
};

struct SpawnedProcess {
  pid_t pid = -1;  // also the process group id
  int pidfd = -1;  // owned by the caller; readable when the process exits
};

// execve of `command` with `args`, no shell. An Error names the command and
// why (not found, not executable, working directory missing, ...).
Result<SpawnedProcess> spawn_process(const ProcessSpec& spec);

// A pidfd for `pid` (owned by the caller): readable once the process exits,
// whether or not it is our child.
Result<int> open_pidfd(pid_t pid);

// Sends `signal` to the process group `pgid`; ESRCH (already gone) is success.
Result<void> signal_process_group(pid_t pgid, int signal);

struct ExitStatus {
  int exit_code = 0;  // 128+N when killed by signal N, as shells report it
  int signal = 0;     // the signal that ended it, or 0
};

// Reaps the exited process behind `pidfd` (without blocking); nullopt while it runs.
std::optional<ExitStatus> reap(int pidfd);

// The start time of process `pid` (field 22 of /proc/<pid>/stat, clock ticks
// since boot), or nullopt when it does not exist. With the pid it names one
// process for good: a pid reused later has another start time.
std::optional<std::uint64_t> process_start_time(pid_t pid);

// True when `pid` is the very process that started at `start`: it exists and
// is not a zombie.
bool same_process_running(pid_t pid, std::uint64_t start);

}  // namespace k8s4r::agent
