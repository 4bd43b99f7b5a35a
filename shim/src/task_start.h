// Starting a task's process, for the shim (shim.cpp): where its command may
// be, and the child that becomes the task, in the task's cgroup and process
// group, as the task's user. Internal to k8s4r_shim.
#pragma once

#include "k8s4r/shim/shim.h"

#include <signal.h>
#include <sys/types.h>

#include <string>
#include <vector>

namespace k8s4r::shim {

// The signals the shim ignores for itself; the task gets their defaults.
inline constexpr int kOwnSignals[] = {SIGHUP, SIGINT, SIGTERM, SIGQUIT, SIGPIPE};

// What the forked child tells the shim, through its failure pipe, when it
// cannot become the task.
struct ChildFailure {
  int step = 0;  // index into kSteps
  int error = 0;
};
inline constexpr const char* kSteps[] = {"cgroup", "setpgid", "setgroups", "setgid", "setuid", "execvp"};

// Where COMMAND may be, in order: itself when it names a path, else each
// directory of the task's PATH (glibc's default when it has none), as
// execvp would look, but in the task's PATH rather than the shim's own.
std::vector<std::string> command_candidates(const std::string& command, const std::vector<std::string>* env);

// The task's process, in its cgroup when it has one (cgroup_dir, an O_PATH
// descriptor, and cgroup_procs, its cgroup.procs): born there where the
// kernel can, else moved there by the child before it executes the task.
// The child reports a failure on failure_pipe as a ChildFailure. -1 and
// errno when neither can start it.
pid_t start_task_process(const ShimOptions& options, char* const* argv, char* const* candidates, char** script_argv,
                         char** envp, const std::vector<gid_t>& groups, int cgroup_dir, int cgroup_procs,
                         int failure_pipe);

}  // namespace k8s4r::shim
