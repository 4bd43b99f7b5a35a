#include "k8s4r/agent/process.h"

#include "durable_file.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>
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
  posix_spawn_file_actions_addclosefrom_np(&actions, STDERR_FILENO + 1);
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
