// cgroup v2 primitives the task shim and the agent share. A task's cgroup
// holds every process the task ever starts, whatever it does with sessions,
// process groups, double forks or its environment, so it is how a task is
// signalled, killed and found. Paths are directories of the cgroup2
// filesystem. Every function returns errors as values; none throws.
#pragma once

#include "k8s4r/common/result.h"

#include <chrono>
#include <string>
#include <vector>

#include <sys/types.h>

namespace k8s4r::shim {

// Where the cgroup2 filesystem is mounted: /sys/fs/cgroup on a unified
// system, /sys/fs/cgroup/unified on a hybrid one (from /proc/self/mountinfo).
Result<std::string> cgroup2_mount();

// The cgroup v2 directory process `pid` is in (the mount point joined with
// the "0::" line of /proc/PID/cgroup); 0 is the calling process.
Result<std::string> cgroup_of(pid_t pid);
// cgroup_of(0).
Result<std::string> own_cgroup();

// The processes in `path` and every cgroup below it.
Result<std::vector<pid_t>> cgroup_processes(const std::string& path);

// Sends `signal` to every process in `path` and below. SIGKILL goes through
// cgroup.kill (kernel 5.14), which the kernel applies to the whole subtree at
// once, so a process forking in a loop cannot outrun it; on older kernels,
// and for other signals, each process listed is signalled.
Result<void> signal_cgroup(const std::string& path, int signal);

// Sends `signal` once to each process of a task: its process group `pgid`,
// and each process of its cgroup `path` (none when empty; a cgroup already
// gone is fine) outside that group, such as one that called setsid. A
// process in both gets it once: many programs take a second SIGTERM or
// SIGINT as "quit now", which would cut their graceful stop short. SIGKILL
// goes to the whole cgroup through cgroup.kill.
Result<void> signal_task_processes(const std::string& path, pid_t pgid, int signal);

// Kills every process in `path` and below and removes those cgroups,
// waiting at most `wait` for the processes to be gone. A path that does not
// exist is removed already.
Result<void> remove_cgroup(const std::string& path, std::chrono::milliseconds wait);

// Whether any process is still in `path` or below (cgroup.events).
Result<bool> cgroup_populated(const std::string& path);

}  // namespace k8s4r::shim
