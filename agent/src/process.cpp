#include "k8s4r/agent/process.h"

#include "durable_file.h"
#include "k8s4r/shim/cgroup.h"
#include "k8s4r/shim/protocol.h"

#include <poll.h>

#include <fcntl.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <array>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <map>
#include <optional>
#include <sstream>
#include <vector>

namespace k8s4r::agent {

namespace {

Error spawn_error(const ProcessSpec& spec, const std::string& what, int error) {
  return Error{"command", "cannot start '" + spec.command + "': " + what + ": " + std::strerror(error)};
}

}  // namespace

Result<SpawnedProcess> spawn_process(const ProcessSpec& spec) {
  if (spec.command.empty()) return Error{"command", "is empty"};
  if (spec.user) return Error{"command", "running as another user needs the task shim"};
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attributes;
  posix_spawn_file_actions_init(&actions);
  posix_spawnattr_init(&attributes);
  // A process group of its own (pgid = pid), and default signal handling.
  posix_spawnattr_setpgroup(&attributes, 0);
  sigset_t defaults;
  sigfillset(&defaults);
  posix_spawnattr_setsigdefault(&attributes, &defaults);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attributes, &none);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  const int output_flags = O_WRONLY | O_CREAT | O_APPEND | (spec.append_output ? 0 : O_TRUNC);
  if (!spec.stdout_path.empty()) {
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, spec.stdout_path.c_str(), output_flags, 0640);
  }
  if (!spec.stderr_path.empty()) {
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, spec.stderr_path.c_str(), output_flags, 0640);
  }
  // Descriptors other threads open without O_CLOEXEC (libraries' sockets,
  // files) must not leak into a task, which could keep the MQTT connection
  // of a dead agent open.
  int first_closed = STDERR_FILENO + 1;
  for (int fd : spec.pass_fds) posix_spawn_file_actions_adddup2(&actions, fd, first_closed++);
  posix_spawn_file_actions_addclosefrom_np(&actions, first_closed);
  if (!spec.working_dir.empty()) posix_spawn_file_actions_addchdir_np(&actions, spec.working_dir.c_str());

  std::vector<std::string> argv_storage{spec.command};
  argv_storage.insert(argv_storage.end(), spec.args.begin(), spec.args.end());
  std::vector<char*> argv;
  for (auto& arg : argv_storage) argv.push_back(arg.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_storage;
  for (const auto& [key, value] : spec.env) env_storage.push_back(key + "=" + value);
  std::vector<char*> envp;
  for (auto& entry : env_storage) envp.push_back(entry.data());
  envp.push_back(nullptr);

  pid_t pid = -1;
  // posix_spawnp looks the command up in PATH when it has no '/'.
  const int error = posix_spawnp(&pid, spec.command.c_str(), &actions, &attributes, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  if (error != 0) return spawn_error(spec, "posix_spawn", error);
  auto pidfd = open_pidfd(pid);
  if (!pidfd) {
    kill(-pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    return Error{"command", "cannot start '" + spec.command + "': " + pidfd.error().message};
  }
  return SpawnedProcess{pid, pidfd.value()};
}

namespace {

// Reads the shim's start report: everything up to EOF (the shim closes its
// end once the task runs, or exits) or the deadline.
Result<std::string> read_start_report(int fd) {
  std::string text;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) return Error{"command", "the task shim did not report within 10s"};
    pollfd ready{fd, POLLIN, 0};
    const int polled = poll(&ready, 1, static_cast<int>(left));
    if (polled < 0 && errno == EINTR) continue;
    if (polled < 0) return Error{"command", std::string("poll: ") + std::strerror(errno)};
    if (polled == 0) continue;
    char buffer[256];
    const ssize_t got = read(fd, buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return Error{"command", std::string("reading the task shim's report: ") + std::strerror(errno)};
    if (got == 0) return text;
    text.append(buffer, static_cast<std::size_t>(got));
    if (text.size() > 4096) return Error{"command", "the task shim's report is too long"};
  }
}

// A pipe whose ends are both above the descriptors a child gets passed, so
// passing one never overwrites the other; close-on-exec.
Result<std::array<int, 2>> high_pipe() {
  int ends[2];
  if (pipe2(ends, O_CLOEXEC) != 0) return Error{"command", std::string("pipe: ") + std::strerror(errno)};
  for (int& end : ends) {
    if (end > 9) continue;
    const int moved = fcntl(end, F_DUPFD_CLOEXEC, 10);
    const int error = errno;
    close(end);
    end = moved;
    if (moved < 0) {
      for (int other : ends) {
        if (other >= 0) close(other);
      }
      return Error{"command", std::string("fcntl: ") + std::strerror(error)};
    }
  }
  return std::array<int, 2>{ends[0], ends[1]};
}

// The task's environment, NUL-separated, written whole into a pipe before
// the shim starts (the pipe is made large enough, so this never waits on the
// shim): the shim's own environment is not the task's.
Result<int> environment_pipe(const std::map<std::string, std::string>& env) {
  std::string block;
  for (const auto& [key, value] : env) {
    block += key;
    block += '=';
    block += value;
    block += '\0';
  }
  auto ends = high_pipe();
  if (!ends) return ends.error();
  const int read_end = ends.value()[0], write_end = ends.value()[1];
  auto fail = [&](const std::string& what) -> Result<int> {
    close(read_end);
    close(write_end);
    return Error{"command", what};
  };
  if (block.size() > 65536 && fcntl(write_end, F_SETPIPE_SZ, static_cast<int>(block.size())) < 0) {
    return fail("the task's environment (" + std::to_string(block.size()) +
                " bytes) does not fit a pipe: " + std::strerror(errno));
  }
  for (std::size_t done = 0; done < block.size();) {
    const ssize_t wrote = write(write_end, block.data() + done, block.size() - done);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) return fail(std::string("writing the task's environment: ") + std::strerror(errno));
    done += static_cast<std::size_t>(wrote);
  }
  close(write_end);
  return read_end;
}

}  // namespace

Result<TaskProcess> spawn_task(const ProcessSpec& spec, const ShimSpec& shim, int& pidfd) {
  if (spec.command.empty()) return Error{"command", "is empty"};
  auto env_fd = environment_pipe(spec.env);
  if (!env_fd) return env_fd.error();
  auto report_pipe = high_pipe();
  if (!report_pipe) {
    close(env_fd.value());
    return report_pipe.error();
  }
  int ends[2] = {report_pipe.value()[0], report_pipe.value()[1]};
  ProcessSpec wrapped = spec;
  wrapped.command = shim.path;
  wrapped.user.reset();
  wrapped.pass_fds = {ends[1], env_fd.value()};  // descriptors 3 and 4
  // The shim's own environment: nothing of the task's (its LD_PRELOAD, say,
  // must not reach a process running as root), only what finds the shim and
  // marks it as this agent's.
  wrapped.env.clear();
  for (const char* name : {"PATH", "K8S4R_AGENT_WORK_DIR", "K8S4R_TASK_UID"}) {
    if (auto found = spec.env.find(name); found != spec.env.end()) wrapped.env.insert(*found);
  }
  if (const char* path = std::getenv("PATH")) wrapped.env["PATH"] = path;
  wrapped.args = {"--exit-file", shim.exit_file};
  if (!shim.cgroup.empty()) wrapped.args.insert(wrapped.args.end(), {"--cgroup", shim.cgroup});
  wrapped.args.insert(wrapped.args.end(), {"--report-fd", "3", "--env-fd", "4"});
  if (spec.user) {
    std::string user = std::to_string(spec.user->uid) + ":" + std::to_string(spec.user->gid);
    for (std::size_t i = 0; i < spec.user->groups.size(); ++i) {
      user += (i == 0 ? ":" : ",") + std::to_string(spec.user->groups[i]);
    }
    wrapped.args.insert(wrapped.args.end(), {"--user", user});
  }
  wrapped.args.insert(wrapped.args.end(), {"--", spec.command});
  wrapped.args.insert(wrapped.args.end(), spec.args.begin(), spec.args.end());
  auto spawned = spawn_process(wrapped);
  close(ends[1]);
  close(env_fd.value());
  if (!spawned) {
    close(ends[0]);
    return Error{"command", "cannot start the task shim " + shim.path + ": " + spawned.error().message};
  }
  const SpawnedProcess shim_process = spawned.value();
  auto text = read_start_report(ends[0]);
  close(ends[0]);
  auto give_up = [&](const Error& error) -> Result<TaskProcess> {
    kill(shim_process.pid, SIGKILL);
    ::unlink(shim.exit_file.c_str());
    siginfo_t info{};
    waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(shim_process.pidfd), &info, WEXITED);
    close(shim_process.pidfd);
    return error;
  };
  if (!text) return give_up(text.error());
  if (text.value().empty()) return give_up(Error{"command", "the task shim ended without starting the task"});
  auto report = shim::parse_start_report(text.value());
  if (!report) return give_up(Error{"command", "the task shim's report: " + report.error().to_string()});
  if (report.value().pid <= 0) {
    Error error = spawn_error(spec, report.value().step, report.value().error);
    // The record of its end cannot be kept: a storage failure, as the agent's own.
    if (report.value().step == "exitfile") {
      const int code = report.value().error;
      error.field = code == ENOSPC || code == EDQUOT ? "StorageFull" : "StorageError";
    }
    return give_up(error);
  }
  pidfd = shim_process.pidfd;
  TaskProcess task;
  task.pid = shim_process.pid;
  task.start = process_start_time(shim_process.pid).value_or(0);
  task.pgid = report.value().pid;
  task.task_start = process_start_time(task.pgid).value_or(0);
  task.cgroup = shim.cgroup;
  task.exit_file = shim.exit_file;
  return task;
}

Result<void> signal_task(const TaskProcess& task, int signal) {
  std::optional<Error> failed;
  if (!task.cgroup.empty()) {
    // A cgroup already removed (the shim does once the task is gone) is fine.
    if (auto sent = shim::signal_cgroup(task.cgroup, signal); !sent && access(task.cgroup.c_str(), F_OK) == 0) {
      failed = sent.error();
    }
  }
  if (auto sent = signal_process_group(task.pgid, signal); !sent) failed = sent.error();
  if (failed) return *failed;
  return ok();
}

void kill_remains(const TaskProcess& task) {
  if (!task.cgroup.empty()) static_cast<void>(shim::remove_cgroup(task.cgroup, std::chrono::seconds(2)));
  if (task.pgid > 0 && task.task_start != 0 && same_process_running(task.pgid, task.task_start)) {
    static_cast<void>(signal_process_group(task.pgid, SIGKILL));
  }
}

Result<int> open_pidfd(pid_t pid) {
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) return Error{"pid", "pidfd_open(" + std::to_string(pid) + "): " + std::strerror(errno)};
  return pidfd;
}

Result<void> signal_process_group(pid_t pgid, int signal) {
  if (pgid <= 0) return Error{"pgid", "must be positive"};
  if (kill(-pgid, signal) != 0 && errno != ESRCH) {
    return Error{"pgid",
                 "kill(" + std::to_string(-pgid) + ", " + std::to_string(signal) + "): " + std::strerror(errno)};
  }
  return ok();
}

std::optional<ExitStatus> reap(int pidfd) {
  siginfo_t info{};
  if (waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(pidfd), &info, WEXITED | WNOHANG) != 0) {
    return std::nullopt;
  }
  if (info.si_pid == 0) return std::nullopt;  // still running
  if (info.si_code == CLD_EXITED) return ExitStatus{info.si_status, 0};
  return ExitStatus{128 + info.si_status, info.si_status};
}

namespace {

// The fields of /proc/<pid>/stat after the command name, which may itself
// hold spaces and parentheses.
std::optional<std::vector<std::string>> stat_fields(pid_t pid) {
  const auto read = read_whole_file("/proc/" + std::to_string(pid) + "/stat");
  if (!read) return std::nullopt;
  const std::string& text = *read;
  const auto close = text.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(text.substr(close + 1));
  std::vector<std::string> fields;
  for (std::string field; rest >> field;) fields.push_back(field);
  return fields;  // fields[0] is field 3 (state)
}

}  // namespace

std::optional<std::uint64_t> process_start_time(pid_t pid) {
  auto fields = stat_fields(pid);
  if (!fields || fields->size() < 20) return std::nullopt;
  try {
    return std::stoull((*fields)[19]);  // field 22
  } catch (...) {
    return std::nullopt;
  }
}

bool same_process_running(pid_t pid, std::uint64_t start) {
  if (pid <= 0) return false;
  auto fields = stat_fields(pid);
  if (!fields || fields->size() < 20 || (*fields)[0] == "Z") return false;
  return process_start_time(pid) == start;
}

}  // namespace k8s4r::agent
