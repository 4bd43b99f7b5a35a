#include "k8s4r/agent/process.h"

#include "k8s4r/agent/spare_shims.h"
#include "k8s4r/common/files.h"
#include "k8s4r/shim/cgroup.h"
#include "k8s4r/shim/protocol.h"

#include <poll.h>

#include <fcntl.h>
#include <spawn.h>
#include <sys/socket.h>
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
// end once the task runs, or exits) or the deadline. `reset` is set when the
// shim went away leaving some of its task unread: it never started it.
Result<std::string> read_start_report(int fd, bool& reset) {
  reset = false;
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
    reset = got < 0 && errno == ECONNRESET;
    if (got < 0) return Error{"command", std::string("reading the task shim's report: ") + std::strerror(errno)};
    if (got == 0) return text;
    text.append(buffer, static_cast<std::size_t>(got));
    if (text.size() > 4096) return Error{"command", "the task shim's report is too long"};
  }
}

// Sends all of `bytes`; the socket's send timeout bounds the wait. `reset`
// as read_start_report's.
Result<void> send_all(int fd, const std::string& bytes, bool& reset) {
  reset = false;
  for (std::size_t done = 0; done < bytes.size();) {
    const ssize_t sent = send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (sent < 0 && errno == EINTR) continue;
    reset = sent < 0 && (errno == EPIPE || errno == ECONNRESET);
    if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return Error{"command", "the task shim did not take its task within 10s"};
    }
    if (sent <= 0) return Error{"command", std::string("handing the task to its shim: ") + std::strerror(errno)};
    done += static_cast<std::size_t>(sent);
  }
  return ok();
}

// The shim's arguments and the task's environment, as a spare takes them.
std::string handoff_for(const ProcessSpec& spec, const ShimSpec& shim) {
  shim::TaskHandoff handoff;
  auto& args = handoff.args;
  args = {"--exit-file", shim.exit_file};
  if (!shim.cgroup.empty()) args.insert(args.end(), {"--cgroup", shim.cgroup});
  if (!spec.stdout_path.empty()) args.insert(args.end(), {"--stdout", spec.stdout_path});
  if (!spec.stderr_path.empty()) args.insert(args.end(), {"--stderr", spec.stderr_path});
  args.insert(args.end(), {"--output", spec.append_output ? "append" : "truncate"});
  if (!spec.working_dir.empty()) args.insert(args.end(), {"--chdir", spec.working_dir});
  if (spec.user) {
    std::string user = std::to_string(spec.user->uid) + ":" + std::to_string(spec.user->gid);
    for (std::size_t i = 0; i < spec.user->groups.size(); ++i) {
      user += (i == 0 ? ":" : ",") + std::to_string(spec.user->groups[i]);
    }
    args.insert(args.end(), {"--user", user});
  }
  if (!shim.contact_file.empty() && shim.stop_after.count() > 0) {
    const auto ms = [](std::chrono::nanoseconds d) {
      return std::to_string(std::max<long long>(1, std::chrono::ceil<std::chrono::milliseconds>(d).count()));
    };
    args.insert(args.end(), {"--contact-file", shim.contact_file, "--stop-after", ms(shim.stop_after), "--kill-after",
                             ms(shim.kill_after)});
  }
  args.insert(args.end(), {"--", spec.command});
  args.insert(args.end(), spec.args.begin(), spec.args.end());
  for (const auto& [key, value] : spec.env) handoff.env.push_back(key + "=" + value);
  return shim::format_task_handoff(handoff);
}

}  // namespace

Result<TaskProcess> spawn_task(const ProcessSpec& spec, const ShimSpec& shim, int& pidfd) {
  if (spec.command.empty()) return Error{"command", "is empty"};
  const std::string handoff = handoff_for(spec, shim);
  // A spare kept ready, else one started now. A ready one that went away
  // before it took the whole task (killed while it waited) never started it,
  // and is replaced once.
  SpareShim spare;
  Result<std::string> text = std::string();
  for (int attempt = 0;; ++attempt) {
    bool was_ready = false;
    auto taken = shim.spares ? shim.spares->take(was_ready) : start_spare_shim(shim.path);
    if (!taken) return taken.error();
    spare = taken.value();
    bool reset = false;
    auto sent = send_all(spare.channel, handoff, reset);
    text = sent ? read_start_report(spare.channel, reset) : Result<std::string>(sent.error());
    if (!reset || !was_ready || attempt > 0) break;
    discard(spare);
  }
  close(spare.channel);
  const SpawnedProcess shim_process{spare.pid, spare.pidfd};
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
  // Once per process: the group, and what of the cgroup left the group. A
  // cgroup already removed (the shim does once the task is gone) is fine.
  return shim::signal_task_processes(task.cgroup, task.pgid, signal);
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

std::string describe_exit(const ExitStatus& status) {
  if (status.signal != 0) {
    const char* name = sigabbrev_np(status.signal);
    return std::string("killed by SIG") + (name ? name : std::to_string(status.signal));
  }
  return "exited with code " + std::to_string(status.exit_code);
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
  const auto read = read_file("/proc/" + std::to_string(pid) + "/stat");
  if (!read) return std::nullopt;
  const std::string& text = read.value();
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
