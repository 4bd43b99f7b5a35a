// Starting a task's process and signalling it, the way the monitor needs:
// posix_spawn (vfork-like in glibc, so its cost does not grow with the
// agent's heap), a process group of its own so a stop reaches every
// descendant, stdout and stderr into files, and a pidfd to wait on.
#pragma once

#include "k8s4r/common/result.h"

#include <chrono>
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
  // Given to the child as descriptors 3, 4, ... in this order (each must be
  // above 4, so no dup2 overwrites another before it is passed).
  std::vector<int> pass_fds;
  // Who the task runs as, groups included (under the shim only: posix_spawn
  // cannot switch users); unset: the agent's own user.
  struct User {
    uid_t uid = 0;
    gid_t gid = 0;
    std::vector<gid_t> groups;
  };
  std::optional<User> user;
};

struct SpawnedProcess {
  pid_t pid = -1;  // also the process group id
  int pidfd = -1;  // owned by the caller; readable when the process exits
};

// execve of `command` with `args`, no shell. An Error names the command and
// why (not found, not executable, working directory missing, ...).
Result<SpawnedProcess> spawn_process(const ProcessSpec& spec);

class SpareShims;

// The shim a task runs under (k8s4r-task-shim: shim/include/k8s4r/shim/shim.h).
struct ShimSpec {
  std::string path;              // the k8s4r-task-shim binary
  std::string exit_file;         // where it records how the task ended
  std::string cgroup;            // the task's cgroup, created empty; "" where tasks get none
  SpareShims* spares = nullptr;  // spares of `path` kept ready (spare_shims.h); none: one is started
  // The agent's contact file and the task's disconnect.stopOnRobotAfter: the
  // shim stops the task once the file says the robot was last in contact
  // with the bridge that long ago (shim.h). "" or 0: never.
  std::string contact_file;
  std::chrono::nanoseconds stop_after{0};
  std::chrono::nanoseconds kill_after{0};
};

// One task's processes, as the monitor watches and signals them and the
// state store remembers them across restarts of the agent.
struct TaskProcess {
  pid_t pid = 0;  // 0: none. The shim, whose end is the task's end (from an agent before shims: the task itself)
  std::uint64_t start = 0;       // the kernel's start time of `pid`, so a reused pid is never taken for it
  pid_t pgid = 0;                // the task's process group: its main process's pid
  std::uint64_t task_start = 0;  // the kernel's start time of that pid
  std::string cgroup;            // "" when the task has none
  std::string exit_file;         // "" when the exit status is `pid`'s own (no shim)
};

// Starts `spec` under the shim: hands a spare shim (`shim.spares`' or one
// started now) spec's environment, working directory, output files and
// command, and waits (at most 10 s) for its start report. An Error names the command and the step
// that failed (not found, not executable, cgroup refused, ...); its field is
// StorageFull or StorageError when the exit record could not be allocated.
// `pidfd` is set to a pidfd of the shim, owned by the caller.
Result<TaskProcess> spawn_task(const ProcessSpec& spec, const ShimSpec& shim, int& pidfd);

// Sends `signal` to every process of the task: its cgroup's (SIGKILL through
// cgroup.kill) when it has one, and its process group.
Result<void> signal_task(const TaskProcess& task, int signal);

// Once its shim is gone without a record (killed, or the machine went down):
// kills and removes the task's cgroup, and SIGKILLs its process group only
// while its main process is still the very one that started (after a reboot
// the number may be another's).
void kill_remains(const TaskProcess& task);

// A pidfd for `pid` (owned by the caller): readable once the process exits,
// whether or not it is our child.
Result<int> open_pidfd(pid_t pid);

// Sends `signal` to the process group `pgid`; ESRCH (already gone) is success.
Result<void> signal_process_group(pid_t pgid, int signal);

struct ExitStatus {
  int exit_code = 0;  // 128+N when killed by signal N, as shells report it
  int signal = 0;     // the signal that ended it, or 0
};

// "exited with code 3", "killed by SIGKILL".
std::string describe_exit(const ExitStatus& status);

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
