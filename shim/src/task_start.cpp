#include "task_start.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

namespace k8s4r::shim {

namespace {

// In the vforked child: everything async-signal-safe, nothing that writes
// the shim's memory (the child shares it; the one exception is marked), then
// exec. Never inlined: the child must run in a frame of its own.
[[noreturn]] __attribute__((noinline)) void become_task(const ShimOptions& options, char* const* argv,
                                                        char* const* candidates, char** script_argv, char** envp,
                                                        const std::vector<gid_t>& groups, int cgroup_procs,
                                                        int failure_pipe) {
  auto fail = [failure_pipe](int step) {
    const ChildFailure failure{step, errno};
    [[maybe_unused]] const auto written = write(failure_pipe, &failure, sizeof failure);
    _exit(127);
  };
  // Ignored signals stay ignored across exec: the task gets the defaults.
  for (int signal : kOwnSignals) ::signal(signal, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  if (cgroup_procs >= 0 && write(cgroup_procs, "0", 1) != 1) fail(0);
  if (setpgid(0, 0) != 0) fail(1);
  if (options.switch_user) {
    if (setgroups(groups.size(), groups.data()) != 0) fail(2);
    if (setresgid(options.gid, options.gid, options.gid) != 0) fail(3);
    if (setresuid(options.uid, options.uid, options.uid) != 0) fail(4);
  }
  // As execvp does, as the task's user: the first candidate that executes;
  // a file without a binary format is a script for /bin/sh; EACCES wins
  // over ENOENT; any other error ends the search.
  int error = ENOENT;
  bool denied = false;
  for (char* const* candidate = candidates; *candidate; ++candidate) {
    execve(*candidate, argv, envp);
    if (errno == ENOEXEC) {
      script_argv[1] = *candidate;  // the one write to the shim's memory: a slot kept for it, read by no one else
      execve("/bin/sh", script_argv, envp);
    }
    if (errno == EACCES) {
      denied = true;
    } else if (errno != ENOENT && errno != ENOTDIR && errno != ESTALE && errno != ENODEV && errno != ETIMEDOUT) {
      error = errno;
      break;
    }
  }
  errno = denied && error == ENOENT ? EACCES : error;
  fail(5);
  _exit(127);  // not reached: fail() exits
}

// The task's process, born in its cgroup (clone3 with CLONE_INTO_CGROUP,
// Linux 5.7): moving a process into a cgroup afterwards (a write to
// cgroup.procs) takes the kernel's cgroup threadgroup lock for writing, which
// waits for an RCU grace period: on a busy machine most of a task's start
// (docs/performance.md). CLONE_VFORK: the shim waits until the task executes
// or fails, as with vfork. -1 and errno where the kernel or a seccomp filter
// refuses it; the caller then forks and moves the child.
pid_t clone_into_cgroup(int cgroup_dir) {
  clone_args args{};
  args.flags = CLONE_INTO_CGROUP | CLONE_VFORK;
  args.exit_signal = SIGCHLD;
  args.cgroup = static_cast<__u64>(cgroup_dir);
  return static_cast<pid_t>(syscall(SYS_clone3, &args, sizeof args));
}

}  // namespace

std::vector<std::string> command_candidates(const std::string& command, const std::vector<std::string>* env) {
  if (command.find('/') != std::string::npos) return {command};
  std::string search = "/bin:/usr/bin";
  if (env) {
    for (const std::string& variable : *env) {
      if (variable.rfind("PATH=", 0) == 0) search = variable.substr(5);
    }
  } else if (const char* own = std::getenv("PATH")) {
    search = own;
  }
  std::vector<std::string> candidates;
  for (std::size_t start = 0;;) {
    const std::size_t end = std::min(search.find(':', start), search.size());
    const std::string directory = search.substr(start, end - start);
    candidates.push_back((directory.empty() ? "." : directory) + "/" + command);
    if (end == search.size()) break;
    start = end + 1;
  }
  return candidates;
}

// The task's process, in its cgroup when it has one: born there where the
// kernel can, else moved there by the child before it executes the task.
// vfork: the child borrows the shim's memory until it executes the task, so
// starting it copies no page tables (the shim waits meanwhile, as it would
// for the failure pipe anyway). -1 and errno when neither can start it.
__attribute__((noinline)) pid_t start_task_process(const ShimOptions& options, char* const* argv,
                                                   char* const* candidates, char** script_argv, char** envp,
                                                   const std::vector<gid_t>& groups, int cgroup_dir, int cgroup_procs,
                                                   int failure_pipe) {
  if (cgroup_dir >= 0) {
    const pid_t task = clone_into_cgroup(cgroup_dir);
    if (task == 0) become_task(options, argv, candidates, script_argv, envp, groups, -1, failure_pipe);
    if (task > 0) return task;
  }
  const pid_t task = vfork();
  if (task == 0) become_task(options, argv, candidates, script_argv, envp, groups, cgroup_procs, failure_pipe);
  return task;
}

}  // namespace k8s4r::shim
