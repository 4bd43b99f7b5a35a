// k8s4r-task-shim: the small parent each task's process runs under, so the
// task's true end (exit code or signal) is known even when the agent that
// started it was killed or upgraded meanwhile: the agent is not the task's
// parent and need not be alive when it ends. Nomad's executor and
// containerd's shim do the same.
//
//   k8s4r-task-shim --exit-file FILE [--cgroup DIR] [--report-fd N]
//                   [--stdout FILE] [--stderr FILE] [--output truncate|append]
//                   [--chdir DIR] [--user UID:GID[:GROUP,...]]
//                   [--contact-file FILE --stop-after MS [--kill-after MS]] -- COMMAND [ARG...]
//   k8s4r-task-shim --spare-fd N
//
// The agent starts the shim as a spare (--spare-fd), ahead of the task, so a
// task's start does not wait for the shim's own exec (on a small robot an
// exec costs milliseconds of CPU): the spare waits on descriptor N for its
// task, the arguments above and the task's environment (protocol.h), and
// exits quietly when N is closed first (its agent is gone). Its own
// environment is the agent's PATH alone: nothing a task puts in its
// environment (LD_PRELOAD, PATH) reaches a process running as root. With its
// task, or from the command line, the shim
//  1. opens the task's output files (--stdout, --stderr: created 0640,
//     emptied unless --output append, never through a symbolic link) as its
//     own standard output and error, and moves to --chdir;
//  2. moves the task into the cgroup DIR (when given) and into a process group
//     of its own (pgid = the task's pid), switches to the task's user, groups
//     first (--user), then executes COMMAND (found in the task's PATH, as the
//     task's user) with the task's environment and every signal at its
//     default;
//  3. reports on descriptor N (the spare's, or --report-fd): {"pid":P} once
//     COMMAND runs, or the step that failed and errno (protocol.h);
//  4. waits for COMMAND to end, then kills whatever the task left behind:
//     its process group, its cgroup, and, as a subreaper, every orphan of the
//     task that was reparented to the shim (which also covers a task that left
//     its process group and the machine has no cgroup v2);
//  5. writes the exit record into FILE, which it made and allocated before
//     the task started (so a disk that fills up meanwhile cannot lose it),
//     and exits 0.
// With --contact-file, while the task runs the shim reads FILE once a second:
// the CLOCK_MONOTONIC time (nanoseconds, 20 digits) as of which the robot was
// last in contact with the bridge (it sent the newest heartbeat the bridge
// answered). When that is --stop-after ago or more (the task's
// disconnect.stopOnRobotAfter), counted from the contact even for a task
// started after it, its robot is cut off, and the manager will
// take the task for lost and run it elsewhere: the shim stops it (SIGTERM,
// then SIGKILL --kill-after later) and records "stopped":"disconnected". It
// does so whether the agent itself is cut off, hung or stopped: a task never
// runs on where its replacement may run.
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
  std::string cgroup;                           // "" when tasks are not contained in cgroups
  int report_fd = -1;                           // -1: report nowhere
  std::optional<std::vector<std::string>> env;  // NAME=VALUE, from a handoff; unset: the shim's own
  std::string stdout_path, stderr_path;         // "": the shim's own
  bool append_output = false;                   // keep what the output files hold
  std::string working_dir;                      // "": the shim's own
  // --user: who the task runs as; unset: the shim's own user.
  bool switch_user = false;
  unsigned uid = 0, gid = 0;
  std::vector<unsigned> groups;
  std::vector<std::string> command;
  // --contact-file, --stop-after, --kill-after: see above; "" and 0: none.
  std::string contact_file;
  std::chrono::milliseconds stop_after{0}, kill_after{5'000};
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

// A spare: waits for its task on `fd`, then runs it as run_shim does,
// reporting on `fd`. Returns 0 at once when `fd` closes before a task came,
// and 1 when the handoff is malformed (reported as the step "handoff").
int run_spare(int fd);

}  // namespace k8s4r::shim
