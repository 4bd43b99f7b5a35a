#include "k8s4r/shim/shim.h"

#include "k8s4r/shim/cgroup.h"
#include "k8s4r/shim/protocol.h"
#include "task_start.h"

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

namespace k8s4r::shim {

namespace {

void say(const std::string& text) {
  const std::string line = "k8s4r-task-shim: " + text + "\n";
  [[maybe_unused]] const auto written = write(STDERR_FILENO, line.data(), line.size());
}

void write_all(int fd, const std::string& text) {
  if (fd < 0) return;
  for (std::size_t done = 0; done < text.size();) {
    const ssize_t wrote = write(fd, text.data() + done, text.size() - done);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) return;  // the agent went away; the task runs on regardless
    done += static_cast<std::size_t>(wrote);
  }
}

// The shim's children but the task's main process, which stays a zombie
// until the end is recorded, so its pid and process group cannot be reused
// while the agent may still signal them.
std::vector<pid_t> orphans(pid_t task) {
  std::vector<pid_t> pids;
  const std::string path = "/proc/self/task/" + std::to_string(getpid()) + "/children";
  FILE* file = std::fopen(path.c_str(), "re");
  if (!file) return pids;
  for (long pid = 0; std::fscanf(file, "%ld", &pid) == 1;) {
    if (pid != task) pids.push_back(static_cast<pid_t>(pid));
  }
  std::fclose(file);
  return pids;
}

// Kills what the task left (its group, its cgroup, the orphans reparented to
// the shim) until nothing is left or the deadline passes; returns how many
// processes were left when its main process ended.
int kill_leftovers(const ShimOptions& options, pid_t task) {
  std::set<pid_t> seen;
  for (pid_t pid : orphans(task)) seen.insert(pid);
  if (!options.cgroup.empty()) {
    if (auto in_cgroup = cgroup_processes(options.cgroup); in_cgroup) {
      seen.insert(in_cgroup.value().begin(), in_cgroup.value().end());
    }
  }
  kill(-task, SIGKILL);
  const auto deadline = std::chrono::steady_clock::now() + options.drain_timeout;
  for (;;) {
    if (!options.cgroup.empty()) static_cast<void>(signal_cgroup(options.cgroup, SIGKILL));
    for (pid_t pid : orphans(task)) {
      seen.insert(pid);
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, WNOHANG);
    }
    bool populated = false;
    if (!options.cgroup.empty()) {
      auto state = cgroup_populated(options.cgroup);
      populated = state && state.value();
    }
    if (orphans(task).empty() && !populated) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      say("processes of the task are still alive " + std::to_string(options.drain_timeout.count()) +
          " ms after SIGKILL (uninterruptible sleep?); recording its end anyway");
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (!options.cgroup.empty()) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (auto removed = remove_cgroup(options.cgroup, std::max(left, std::chrono::milliseconds(0))); !removed) {
      say(removed.error().message);  // the agent's next start removes it
    }
  }
  seen.erase(task);
  return static_cast<int>(seen.size());
}

// The CLOCK_MONOTONIC time as of which the robot was last in contact with the bridge, from the
// contact file (20 digits and a newline); none when it cannot be read.
std::optional<std::chrono::steady_clock::time_point> read_contact(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return std::nullopt;
  char text[32] = {};
  const ssize_t got = pread(fd, text, sizeof text - 1, 0);
  close(fd);
  if (got != 21 || text[20] != '\n') return std::nullopt;
  long long ns = 0;
  for (int i = 0; i < 20; ++i) {
    if (text[i] < '0' || text[i] > '9') return std::nullopt;
    if (ns > (std::numeric_limits<long long>::max() - (text[i] - '0')) / 10) return std::nullopt;
    ns = ns * 10 + (text[i] - '0');
  }
  return std::chrono::steady_clock::time_point(std::chrono::nanoseconds(ns));
}

// While the task runs: stops it once the agent has heard nothing from the
// bridge for options.stop_after (see shim.h), checked between the shim's
// waits for its children, with no thread of its own.
class ContactWatch {
 public:
  // The window counts from the last contact, not from the task's start: the
  // manager counts from the robot's last heartbeat, and a run that starts
  // late in a silence must stop when the others do. The agent starts a run
  // only in contact (a run due out of contact waits for it), so that is
  // recent; a file from before a reboot (a time ahead of now), or none,
  // counts from the start.
  ContactWatch(const ShimOptions& options, pid_t task)
      : options_(options), task_(task), heard_(std::chrono::steady_clock::now()) {
    if (!enabled()) return;
    if (auto contact = read_contact(options_.contact_file); contact && *contact <= heard_) heard_ = *contact;
  }

  bool enabled() const { return !options_.contact_file.empty(); }
  bool stopped_task() const { return stopped_; }

  // Acts on the contact file and the clock; returns how long the shim may
  // wait for its children before the next check.
  std::chrono::milliseconds check() {
    const auto now = std::chrono::steady_clock::now();
    if (killing_) {
      if (now >= kill_at_) {
        signal_task(SIGKILL);
        killing_ = false;
        return std::chrono::milliseconds(1000);
      }
      return std::chrono::ceil<std::chrono::milliseconds>(kill_at_ - now);
    }
    if (stopped_) return std::chrono::milliseconds(1000);
    if (auto contact = read_contact(options_.contact_file); contact && *contact > heard_ && *contact <= now)
      heard_ = *contact;
    const auto interval =
        std::clamp(options_.stop_after / 4, std::chrono::milliseconds(50), std::chrono::milliseconds(1000));
    if (now - heard_ < options_.stop_after) return interval;
    say("no contact with the bridge for " + std::to_string(options_.stop_after.count()) +
        " ms (disconnect.stopOnRobotAfter): stopping the task, as the manager will run it elsewhere");
    stopped_ = true;
    signal_task(SIGTERM);
    killing_ = true;
    kill_at_ = now + options_.kill_after;
    return options_.kill_after;
  }

 private:
  void signal_task(int signal) { static_cast<void>(signal_task_processes(options_.cgroup, task_, signal)); }

  const ShimOptions& options_;
  pid_t task_;
  std::chrono::steady_clock::time_point heard_;
  std::chrono::steady_clock::time_point kill_at_{};  // SIGKILL then, while killing_
  bool killing_ = false;
  bool stopped_ = false;
};

// The record's file is made and its blocks allocated before the task starts,
// and written in place when it ends: a disk that fills up meanwhile cannot
// take a task's end away.
constexpr off_t kRecordSpace = 4096;

int open_exit_record(const std::string& path) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return -1;
  const int error = posix_fallocate(fd, 0, kRecordSpace);
  if (error != 0) {
    close(fd);
    unlink(path.c_str());
    errno = error;
    return -1;
  }
  return fd;
}

bool write_exit_record(int fd, const std::string& path, const ExitRecord& record) {
  const std::string text = format_exit_record(record);
  const ssize_t written = pwrite(fd, text.data(), text.size(), 0);
  const int error = errno;
  // Shrinking frees blocks, needs none; the reader ignores zero padding anyway.
  [[maybe_unused]] const int truncated = ftruncate(fd, static_cast<off_t>(text.size()));
  if (close(fd) != 0 || written != static_cast<ssize_t>(text.size())) {
    say("cannot write " + path + ": " + std::strerror(written < 0 ? error : EIO));
    return false;
  }
  return true;
}

}  // namespace

std::optional<ShimOptions> parse_shim_args(const std::vector<std::string>& args, std::string& error) {
  ShimOptions options;
  std::size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (i + 1 >= args.size()) {
      error = "'" + arg + "' needs a value";
      return std::nullopt;
    }
    const std::string& value = args[++i];
    if (arg == "--exit-file") {
      options.exit_file = value;
    } else if (arg == "--cgroup") {
      options.cgroup = value;
    } else if (arg == "--stdout") {
      options.stdout_path = value;
    } else if (arg == "--stderr") {
      options.stderr_path = value;
    } else if (arg == "--chdir") {
      options.working_dir = value;
    } else if (arg == "--output") {
      if (value != "truncate" && value != "append") {
        error = "--output must be truncate or append, got '" + value + "'";
        return std::nullopt;
      }
      options.append_output = value == "append";
    } else if (arg == "--report-fd") {
      char* end = nullptr;
      errno = 0;
      const long fd = std::strtol(value.c_str(), &end, 10);
      if (errno != 0 || end == value.c_str() || *end != '\0' || fd < 0 || fd > 1'000'000) {
        error = arg + " must be a descriptor number, got '" + value + "'";
        return std::nullopt;
      }
      options.report_fd = static_cast<int>(fd);
    } else if (arg == "--contact-file") {
      options.contact_file = value;
    } else if (arg == "--stop-after" || arg == "--kill-after") {
      char* end = nullptr;
      errno = 0;
      const long long ms = std::strtoll(value.c_str(), &end, 10);
      if (errno != 0 || end == value.c_str() || *end != '\0' || ms < 0 || ms > 100LL * 365 * 24 * 3600 * 1000) {
        error = arg + " must be milliseconds, got '" + value + "'";
        return std::nullopt;
      }
      (arg == "--stop-after" ? options.stop_after : options.kill_after) = std::chrono::milliseconds(ms);
    } else if (arg == "--user") {
      // UID:GID[:GROUP,GROUP...], all numbers.
      std::vector<unsigned long> numbers;
      std::size_t colons = 0;
      const char* at = value.c_str();
      for (;;) {
        char* end = nullptr;
        errno = 0;
        if (*at < '0' || *at > '9') break;
        const unsigned long number = std::strtoul(at, &end, 10);
        if (errno != 0 || number > 0xfffffffeUL) break;
        numbers.push_back(number);
        at = end;
        if (*at == '\0') break;
        if (*at == ':' && colons < 2) {
          ++colons;
        } else if (*at != ',' || colons != 2) {
          break;
        }
        ++at;
      }
      if (*at != '\0' || numbers.size() < 2 || (colons == 1 && numbers.size() != 2)) {
        error = "--user must be UID:GID[:GROUP,...] in numbers, got '" + value + "'";
        return std::nullopt;
      }
      options.switch_user = true;
      options.uid = static_cast<unsigned>(numbers[0]);
      options.gid = static_cast<unsigned>(numbers[1]);
      options.groups.assign(numbers.begin() + 2, numbers.end());
    } else {
      error = "unknown option '" + arg + "'";
      return std::nullopt;
    }
  }
  options.command.assign(args.begin() + static_cast<std::ptrdiff_t>(std::min(i, args.size())), args.end());
  if (options.exit_file.empty() || options.exit_file.front() != '/') {
    error = "--exit-file must be an absolute path";
    return std::nullopt;
  }
  if (!options.cgroup.empty() && options.cgroup.front() != '/') {
    error = "--cgroup must be an absolute path";
    return std::nullopt;
  }
  if (options.command.empty() || options.command.front().empty()) {
    error = "no command after '--'";
    return std::nullopt;
  }
  if (!options.contact_file.empty() && (options.contact_file.front() != '/' || options.stop_after.count() == 0)) {
    error = "--contact-file must be an absolute path, with --stop-after above 0";
    return std::nullopt;
  }
  return options;
}

int run_shim(const ShimOptions& options) {
  for (int signal : kOwnSignals) ::signal(signal, SIG_IGN);
  // Orphans of the task become the shim's children, to be found and killed
  // when the task ends even where no cgroup holds them.
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  if (options.report_fd >= 0) fcntl(options.report_fd, F_SETFD, FD_CLOEXEC);

  // The task's output files become the shim's own standard output and error
  // (its few words go there too) and the task inherits them. Opened as root:
  // never through a link the task may have put in its directory.
  // Nor a FIFO (which would hold the shim), nor a second name of another
  // file (a hard link): a plain file of its own, or the task does not start.
  const int output_flags =
      O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | (options.append_output ? 0 : O_TRUNC);
  for (const auto& [path, target, step, odd] :
       {std::tuple{&options.stdout_path, STDOUT_FILENO, "stdout", "stdout is not a plain file"},
        std::tuple{&options.stderr_path, STDERR_FILENO, "stderr", "stderr is not a plain file"}}) {
    if (path->empty()) continue;
    const int fd = open(path->c_str(), output_flags, 0640);
    if (fd < 0) {
      write_all(options.report_fd, format_start_failed(step, errno));
      return 1;
    }
    struct stat about {};
    if (fstat(fd, &about) != 0 || !S_ISREG(about.st_mode) || about.st_nlink != 1) {
      write_all(options.report_fd, format_start_failed(odd, EPERM));
      return 1;
    }
    if (fcntl(fd, F_SETFL, O_APPEND) != 0 || dup2(fd, target) < 0) {
      write_all(options.report_fd, format_start_failed(step, errno));
      return 1;
    }
    close(fd);
  }
  if (!options.working_dir.empty() && chdir(options.working_dir.c_str()) != 0) {
    write_all(options.report_fd, format_start_failed("chdir", errno));
    return 1;
  }

  const int record_fd = open_exit_record(options.exit_file);
  if (record_fd < 0) {
    write_all(options.report_fd, format_start_failed("exitfile", errno));
    return 1;
  }
  int cgroup_procs = -1;
  int cgroup_dir = -1;
  if (!options.cgroup.empty()) {
    cgroup_procs = open((options.cgroup + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
    if (cgroup_procs < 0) {
      write_all(options.report_fd, format_start_failed("cgroup", errno));
      return 1;
    }
    cgroup_dir = open(options.cgroup.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  }
  int failure_pipe[2];
  if (pipe2(failure_pipe, O_CLOEXEC) != 0) {
    write_all(options.report_fd, format_start_failed("pipe", errno));
    return 1;
  }
  std::vector<char*> argv;
  for (const std::string& arg : options.command) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  std::vector<std::string> environment;
  std::vector<char*> envp;
  if (options.env) {
    environment = *options.env;
    for (std::string& variable : environment) envp.push_back(variable.data());
    envp.push_back(nullptr);
  }
  std::vector<std::string> candidates =
      command_candidates(options.command.front(), options.env ? &*options.env : nullptr);
  std::vector<char*> candidate_list;
  for (std::string& candidate : candidates) candidate_list.push_back(candidate.data());
  candidate_list.push_back(nullptr);
  std::vector<char*> script_argv{const_cast<char*>("/bin/sh"), nullptr};
  script_argv.insert(script_argv.end(), argv.begin() + 1, argv.end());  // the task's arguments and the final null
  const std::vector<gid_t> groups(options.groups.begin(), options.groups.end());

  // SIGCHLD blocked from before the task exists (the task's process unblocks
  // every signal before its exec): the wait below takes it with sigtimedwait.
  sigset_t child_signal;
  sigemptyset(&child_signal);
  sigaddset(&child_signal, SIGCHLD);
  sigprocmask(SIG_BLOCK, &child_signal, nullptr);
  const pid_t task =
      start_task_process(options, argv.data(), candidate_list.data(), script_argv.data(),
                         envp.empty() ? environ : envp.data(), groups, cgroup_dir, cgroup_procs, failure_pipe[1]);
  if (task < 0) {
    write_all(options.report_fd, format_start_failed("fork", errno));
    return 1;
  }
  close(failure_pipe[1]);
  if (cgroup_procs >= 0) close(cgroup_procs);
  if (cgroup_dir >= 0) close(cgroup_dir);
  ChildFailure failure;
  ssize_t got = 0;
  do {
    got = read(failure_pipe[0], &failure, sizeof failure);
  } while (got < 0 && errno == EINTR);
  close(failure_pipe[0]);
  if (got == static_cast<ssize_t>(sizeof failure)) {
    waitpid(task, nullptr, 0);
    if (!options.cgroup.empty()) rmdir(options.cgroup.c_str());
    close(record_fd);
    unlink(options.exit_file.c_str());
    write_all(options.report_fd, format_start_failed(kSteps[failure.step], failure.error));
    return 1;
  }
  write_all(options.report_fd, format_started(task));
  if (options.report_fd >= 0) close(options.report_fd);
  ContactWatch watch(options, task);

  // Learn how the task ended without reaping it yet (WNOWAIT); reap the
  // orphans of the task that end meanwhile. SIGCHLD is blocked (before the
  // task was started), so a child's end is never missed between a check and
  // the wait for the next one.
  siginfo_t ended{};
  for (;;) {
    ended = siginfo_t{};
    if (waitid(P_ALL, 0, &ended, WEXITED | WNOWAIT | WNOHANG) != 0) {
      if (errno == EINTR) continue;
      say(std::string("waitid: ") + std::strerror(errno));  // cannot happen: the task is our child
      break;
    }
    if (ended.si_pid == task) break;
    if (ended.si_pid != 0) {
      waitpid(ended.si_pid, nullptr, 0);
      continue;
    }
    // Nothing ended: wait for a child, or for the next contact check.
    if (watch.enabled()) {
      const auto wait = watch.check();
      const timespec timeout{static_cast<time_t>(wait.count() / 1000),
                             static_cast<long>(wait.count() % 1000) * 1'000'000};
      sigtimedwait(&child_signal, nullptr, &timeout);
    } else {
      sigwaitinfo(&child_signal, nullptr);
    }
  }
  sigprocmask(SIG_UNBLOCK, &child_signal, nullptr);
  ExitRecord record;
  record.pid = task;
  record.disconnected = watch.stopped_task();
  if (ended.si_code == CLD_EXITED) {
    record.exit_code = ended.si_status;
  } else {
    record.signal = ended.si_status;
    record.exit_code = 128 + record.signal;
  }
  record.leftovers = kill_leftovers(options, task);
  const bool written = write_exit_record(record_fd, options.exit_file, record);
  waitpid(task, nullptr, 0);
  return written ? 0 : 2;
}

namespace {

// Appends `size` bytes read from `fd` to `out`; returns how many it got
// before EOF or an error (errno 0 at EOF).
std::size_t read_exactly(int fd, std::string& out, std::size_t size) {
  const std::size_t start = out.size();
  out.resize(start + size);
  std::size_t done = 0;
  while (done < size) {
    const ssize_t got = read(fd, out.data() + start + done, size - done);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      if (got == 0) errno = 0;
      break;
    }
    done += static_cast<std::size_t>(got);
  }
  out.resize(start + done);
  return done;
}

}  // namespace

int run_spare(int fd) {
  // As run_shim: the agent signals the task, never its shim. A spare leaves
  // when its descriptor closes.
  for (int signal : kOwnSignals) ::signal(signal, SIG_IGN);
  fcntl(fd, F_SETFD, FD_CLOEXEC);
  std::string bytes;
  auto refuse = [fd](const std::string& why, int error) {
    say("the task handed over " + why);
    write_all(fd, format_start_failed("handoff", error));
    return 1;
  };
  for (int block = 0; block < 2; ++block) {
    const std::size_t prefix_at = bytes.size();
    if (read_exactly(fd, bytes, 4) != 4) {
      if (block == 0 && bytes.empty() && errno == 0) return 0;  // no task came: the agent went away
      return refuse("was cut short", errno == 0 ? EPROTO : errno);
    }
    auto length = parse_handoff_length(std::string_view(bytes).substr(prefix_at));
    if (!length) return refuse(length.error().message, E2BIG);
    if (read_exactly(fd, bytes, length.value()) != length.value()) {
      return refuse("was cut short", errno == 0 ? EPROTO : errno);
    }
  }
  auto handoff = parse_task_handoff(bytes);
  if (!handoff) return refuse(handoff.error().to_string(), EPROTO);
  std::string error;
  auto options = parse_shim_args(handoff.value().args, error);
  if (!options) return refuse("has wrong arguments: " + error, EINVAL);
  if (options->report_fd >= 0) {
    return refuse("names a --report-fd: a spare reports on its own", EINVAL);
  }
  bytes.clear();
  bytes.shrink_to_fit();
  options->report_fd = fd;
  options->env = std::move(handoff.value().env);
  return run_shim(*options);
}

}  // namespace k8s4r::shim
