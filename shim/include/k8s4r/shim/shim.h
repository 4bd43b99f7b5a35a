// k8s4r-task-shim: the small parent each task's process runs under, so the
// task's true end (exit code or signal) is known even when the agent that
// started it was killed or upgraded meanwhile: the agent is not the task's
// parent and need not be alive when it ends. Nomad's executor and
// containerd's shim do the same.
//
//   k8s4r-task-shim --exit-file FILE [--cgroup DIR] [--report-fd N] [--env-fd N]
//                   [--user UID:GID[:GROUP,...]] -- COMMAND [ARG...]
//
// The agent starts the shim with the task's working directory and output
// files, and an environment of its own (PATH and the agent's marks): the
// task's environment comes on descriptor --env-fd (NUL-separated NAME=VALUE)
// and is the task's alone, so nothing a task puts there (LD_PRELOAD, PATH)
// reaches a process running as root. The shim
//  1. moves the task into the cgroup DIR (when given) and into a process group
//     of its own (pgid = the task's pid), switches to the task's user, groups
//     first (--user), then executes COMMAND (found in the task's PATH, as the
//     task's user) with the task's environment and every signal at its
//     default;
//  2. reports on descriptor N: {"pid":P} once COMMAND runs, or the step that
//     failed and errno (protocol.h);
//  3. waits for COMMAND to end, then kills whatever the task left behind:
//     its process group, its cgroup, and, as a subreaper, every orphan of the
//     task that was reparented to the shim (which also covers a task that left
//     its process group and the machine has no cgroup v2);
//  4. writes the exit record into FILE, which it made and allocated before
//     the task started (so a disk that fills up meanwhile cannot lose it),
//     and exits 0.
// It ignores SIGHUP, SIGINT, SIGTERM and SIGQUIT: the agent signals the task,
// never the shim, and the shim must live to record the end. It is not the
// agent's child for long: an agent that restarts finds it by pid and start
// time, watches it through a pidfd and reads FILE when it ends.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace k8s4r::shim {

struct ShimOptions {
  std::string exit_file;
  std::string cgroup;  // "" when tasks are not contained in cgroups
  int report_fd = -1;  // -1: report nowhere
  int env_fd = -1;     // -1: the task gets the shim's own environment
  // --user: who the task runs as; unset: the shim's own user.
  bool switch_user = false;
  unsigned uid = 0, gid = 0;
  std::vector<unsigned> groups;
  std::vector<std::string> command;
  // How long the shim waits, after the task's main process ended, for what
  // it killed to be gone before it records the end anyway.
  std::chrono::milliseconds drain_timeout{10'000};
};

// argv without the program name. nullopt, with `error` set, when they are wrong.
std::optional<ShimOptions> parse_shim_args(const std::vector<std::string>& args, std::string& error);

// Runs the task as described above; returns the shim's own exit code: 0 once
// the exit record is written, 1 when the task could not start (reported on the
// report fd), 2 when the record could not be written.
int run_shim(const ShimOptions& options);

}  // namespace k8s4r::shim
