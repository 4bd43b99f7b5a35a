#include "k8s4r/agent/monitor.h"

#include "k8s4r/common/files.h"
#include "k8s4r/shim/cgroup.h"
#include "k8s4r/shim/protocol.h"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <vector>

namespace k8s4r::agent {

Monitor::Monitor(MonitorCallbacks callbacks) : callbacks_(std::move(callbacks)) {
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (epoll_fd_ < 0 || wake_fd_ < 0) {
    const std::string why = std::strerror(errno);
    if (epoll_fd_ >= 0) close(epoll_fd_);
    if (wake_fd_ >= 0) close(wake_fd_);
    throw std::runtime_error("monitor: " + why);
  }
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.fd = wake_fd_;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &event);
  thread_ = std::thread([this] { loop(); });
}

Monitor::~Monitor() {
  stopping_ = true;
  wake();
  if (thread_.joinable()) thread_.join();
  std::lock_guard lock(mutex_);
  for (auto& [uid, child] : children_) {
    if (released_) {  // handed over: the next agent watches it
      close(child.pidfd);
      continue;
    }
    // Nothing may outlive its monitor unwatched, unless handed over.
    static_cast<void>(signal_task(child.process, SIGKILL));
    if (!child.adopted) {
      siginfo_t info{};
      waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(child.pidfd), &info, WEXITED);
    }
    close(child.pidfd);
  }
  close(wake_fd_);
  close(epoll_fd_);
}

void Monitor::release_all() {
  std::lock_guard lock(mutex_);
  released_ = true;
  schedule_ = KillSchedule{};  // no SIGTERM at a deadline: the next agent keeps them
}

namespace {

// The process behind a pidfd has ended (its exit not yet taken).
bool has_ended(int pidfd) {
  pollfd polled{pidfd, POLLIN, 0};
  return poll(&polled, 1, 0) == 1;
}

}  // namespace

void Monitor::wake() {
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto written = write(wake_fd_, &one, sizeof one);
}

Result<TaskProcess> Monitor::launch(const std::string& task_uid, const ProcessSpec& spec,
                                    const std::optional<ShimSpec>& shim,
                                    std::optional<std::chrono::nanoseconds> timeout,
                                    std::chrono::nanoseconds kill_timeout) {
  {
    std::lock_guard lock(mutex_);
    if (children_.count(task_uid)) return Error{"taskUid", task_uid + " is already running"};
  }
  // Started without the lock: waiting for the shim's report must not hold up
  // the monitor's thread (exits, deadlines). The caller starts one uid once.
  Child child;
  if (shim) {
    auto started = spawn_task(spec, *shim, child.pidfd);
    if (!started) return started.error();
    child.process = started.value();
  } else {
    auto spawned = spawn_process(spec);
    if (!spawned) return spawned.error();
    child.pidfd = spawned.value().pidfd;
    child.process.pid = child.process.pgid = spawned.value().pid;
    child.process.start = child.process.task_start = process_start_time(child.process.pid).value_or(0);
  }
  const TaskProcess process = child.process;
  std::lock_guard lock(mutex_);
  watch(task_uid, std::move(child), std::chrono::steady_clock::now(), timeout, kill_timeout);
  return process;
}

Result<void> Monitor::adopt(const std::string& task_uid, const TaskProcess& process, SteadyTime started,
                            std::optional<std::chrono::nanoseconds> timeout, std::chrono::nanoseconds kill_timeout) {
  std::lock_guard lock(mutex_);
  if (children_.count(task_uid)) return Error{"taskUid", task_uid + " is already running"};
  auto pidfd = open_pidfd(process.pid);
  if (!pidfd) return pidfd.error();
  watch(task_uid, Child{process, pidfd.value(), std::nullopt, true}, started, timeout, kill_timeout);
  return ok();
}

void Monitor::learn_status(Ended& ended) {
  TaskExit& exit = ended.exit;
  const std::string& file = ended.process.exit_file;
  if (file.empty()) {
    if (!exit.status_known) exit.unknown_why = "adopted";
    return;
  }
  auto text = read_file(file);
  auto record = text ? shim::parse_exit_record(text.value()) : Result<shim::ExitRecord>(text.error());
  if (!record) {
    // The shim was killed or crashed: its task may run on, and nobody else
    // removes its cgroup.
    kill_remains(ended.process);
    exit.status_known = false;
    exit.unknown_why = "its shim (pid " + std::to_string(ended.process.pid) + ") ended without recording it (" + file +
                       ": " + record.error().to_string() + ")";
    return;
  }
  exit.status_known = true;
  exit.status = ExitStatus{record.value().exit_code, record.value().signal};
  exit.leftovers = record.value().leftovers;
  // Its shim stopped it: its robot had been cut off from the bridge too long.
  if (record.value().disconnected && !exit.stopped_by) exit.stopped_by = StopReason::disconnected;
}

void Monitor::watch(const std::string& task_uid, Child child, SteadyTime started,
                    std::optional<std::chrono::nanoseconds> timeout, std::chrono::nanoseconds kill_timeout) {
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.fd = child.pidfd;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, child.pidfd, &event);
  task_by_fd_[child.pidfd] = task_uid;
  children_[task_uid] = std::move(child);
  if (!released_) schedule_.track(task_uid, started, timeout, kill_timeout);
  wake();  // the nearest deadline may have moved
}

bool Monitor::stop_task(const std::string& task_uid, StopReason reason) {
  {
    std::lock_guard lock(mutex_);
    if (released_ || !children_.count(task_uid)) return false;
    schedule_.stop(task_uid, std::chrono::steady_clock::now(), reason);
  }
  wake();
  return true;
}

std::size_t Monitor::running() const {
  std::lock_guard lock(mutex_);
  return children_.size();
}

void Monitor::loop() {
  std::vector<epoll_event> events(64);
  while (!stopping_) {
    timespec timeout{};
    timespec* wait_for = nullptr;  // no deadline: wait until a process exits or we are woken
    {
      std::lock_guard lock(mutex_);
      if (auto next = schedule_.next_deadline()) {
        const auto left = std::max(std::chrono::nanoseconds(0), *next - std::chrono::steady_clock::now());
        timeout.tv_sec = static_cast<time_t>(left.count() / 1'000'000'000);
        timeout.tv_nsec = static_cast<long>(left.count() % 1'000'000'000);
        wait_for = &timeout;
      }
    }
    int ready =
        use_pwait2_ ? epoll_pwait2(epoll_fd_, events.data(), static_cast<int>(events.size()), wait_for, nullptr) : -1;
    if (ready < 0 && errno == ENOSYS) use_pwait2_ = false;  // kernels before 5.11
    if (!use_pwait2_) {
      // Millisecond resolution, rounded up so a deadline is never missed.
      const long long ms =
          wait_for ? (static_cast<long long>(timeout.tv_sec) * 1000 + (timeout.tv_nsec + 999'999) / 1'000'000) : -1;
      ready = epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()),
                         static_cast<int>(std::min(ms, 86'400'000LL)));
    }
    if (ready < 0 && errno != EINTR) {
      // Cannot happen with a valid epoll fd; a monitor that stopped watching
      // would leave timeouts unenforced, so fail loudly.
      std::perror("k8s4r monitor: epoll");
      std::abort();
    }

    std::vector<Ended> exits;
    std::vector<std::pair<SignalAction, std::chrono::nanoseconds>> signals;
    {
      std::lock_guard lock(mutex_);
      for (int i = 0; i < std::max(ready, 0); ++i) {
        const int fd = events[static_cast<std::size_t>(i)].data.fd;
        if (fd == wake_fd_) {
          std::uint64_t count = 0;
          [[maybe_unused]] const auto drained = read(wake_fd_, &count, sizeof count);
          continue;
        }
        auto uid = task_by_fd_.find(fd);
        if (uid == task_by_fd_.end()) continue;
        const std::string task_uid = uid->second;
        Child& child = children_.at(task_uid);
        // An adopted process is not ours to reap; readable means it ended.
        auto status = child.adopted ? std::optional<ExitStatus>(ExitStatus{}) : reap(fd);
        if (!status) continue;
        // The task ended with its leader: whatever of it is left (a
        // background child, or one that ignored SIGTERM) must not live on
        // unwatched, nor overlap a restart of the task. A shim does this
        // itself (learn_status covers a shim that was killed).
        if (child.process.exit_file.empty()) static_cast<void>(signal_task(child.process, SIGKILL));
        const bool known = !child.adopted || !child.process.exit_file.empty();
        exits.push_back(
            {{task_uid, *status, child.stopped_by, std::chrono::steady_clock::now(), known}, child.process});
        epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
        close(fd);
        task_by_fd_.erase(uid);
        children_.erase(task_uid);
        schedule_.forget(task_uid);
      }
      const auto now = std::chrono::steady_clock::now();
      for (const SignalAction& action : schedule_.take_due(now)) {
        auto child = children_.find(action.task_uid);
        if (child == children_.end()) continue;
        // Ended before its signal, with its exit not taken yet (an epoll_wait
        // cut short: SIGSTOP and SIGCONT of the agent end one with EINTR): the
        // signal would stop nothing, and its reason is not how the task ended.
        // The exit is taken next round (the pidfd stays readable).
        if (has_ended(child->second.pidfd)) continue;
        // Only ESRCH can fail for our own child's group, and it means gone.
        static_cast<void>(signal_task(child->second.process, action.signal));
        if (!child->second.stopped_by) child->second.stopped_by = action.reason;
        signals.emplace_back(action, std::chrono::steady_clock::now() - action.deadline);
      }
    }
    for (const auto& [action, lateness] : signals) {
      if (callbacks_.on_signal) callbacks_.on_signal(action, lateness);
    }
    for (Ended& ended : exits) {
      learn_status(ended);
      if (callbacks_.on_exit) callbacks_.on_exit(ended.exit);
    }
  }
}

}  // namespace k8s4r::agent
