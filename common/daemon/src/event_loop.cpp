#include "k8s4r/daemon/event_loop.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace k8s4r::daemon {

EventLoop::EventLoop(const Clock& clock) : clock_(clock) {
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) throw std::runtime_error(std::string("event loop: eventfd: ") + std::strerror(errno));
}

EventLoop::~EventLoop() { close(wake_fd_); }

void EventLoop::wake() {
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto written = write(wake_fd_, &one, sizeof one);
}

void EventLoop::post(std::function<void()> work) {
  bool was_empty = false;
  {
    std::lock_guard lock(mutex_);
    was_empty = posted_.empty();
    posted_.push_back(std::move(work));
  }
  // Work already waiting was announced by the post that queued it, and the
  // loop looks at the queue before it sleeps: one wake per batch, not per
  // message (at 10,000 messages a second, a write and a wake-up each).
  if (was_empty) wake();
}

void EventLoop::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake();
}

EventLoop::TimerId EventLoop::at(SteadyTime when, std::function<void()> work) {
  const TimerId id = next_timer_++;
  timers_.emplace(id, std::make_pair(when, std::move(work)));
  timer_order_.emplace(when, id);
  return id;
}

void EventLoop::cancel(TimerId timer) {
  auto found = timers_.find(timer);
  if (found == timers_.end()) return;
  auto [first, last] = timer_order_.equal_range(found->second.first);
  for (auto it = first; it != last; ++it) {
    if (it->second == timer) {
      timer_order_.erase(it);
      break;
    }
  }
  timers_.erase(found);
}

void EventLoop::watch(int fd, std::function<void()> on_readable) { watched_.emplace_back(fd, std::move(on_readable)); }

bool EventLoop::run_once() {
  std::deque<std::function<void()>> work;
  {
    std::lock_guard lock(mutex_);
    work.swap(posted_);
  }
  bool ran = !work.empty();
  for (auto& item : work) item();

  // Timers due now, each once; a timer may add or cancel others.
  while (!timer_order_.empty() && timer_order_.begin()->first <= clock_.steady()) {
    const TimerId id = timer_order_.begin()->second;
    timer_order_.erase(timer_order_.begin());
    auto found = timers_.find(id);
    auto due = std::move(found->second.second);
    timers_.erase(found);
    due();
    ran = true;
  }
  return ran;
}

void EventLoop::run_ready() {
  while (run_once()) {
  }
}

std::optional<SteadyTime> EventLoop::next_timer() const {
  if (timer_order_.empty()) return std::nullopt;
  return timer_order_.begin()->first;
}

void EventLoop::run() {
  for (;;) {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) {
        stopping_ = false;
        return;
      }
    }
    run_once();
    {
      std::lock_guard lock(mutex_);
      if (!posted_.empty() || stopping_) continue;
    }

    int timeout_ms = -1;
    if (!timer_order_.empty()) {
      const auto left = timer_order_.begin()->first - clock_.steady();
      // Round up, so a timer never fires early and the loop never spins.
      const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
      timeout_ms = static_cast<int>(std::clamp<long long>(ms, 0, 24 * 3600 * 1000));
    }
    std::vector<pollfd> fds{{wake_fd_, POLLIN, 0}};
    for (const auto& [fd, handler] : watched_) fds.push_back({fd, POLLIN, 0});
    const int ready = poll(fds.data(), fds.size(), timeout_ms);
    if (ready <= 0) continue;
    if (fds[0].revents & POLLIN) {
      std::uint64_t count = 0;
      [[maybe_unused]] const auto drained = read(wake_fd_, &count, sizeof count);
    }
    for (std::size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents & (POLLIN | POLLERR | POLLHUP)) watched_[i - 1].second();
    }
  }
}

std::size_t EventLoop::posted_depth() {
  std::lock_guard lock(mutex_);
  return posted_.size();
}

}  // namespace k8s4r::daemon
