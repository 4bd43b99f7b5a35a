#include "k8s4r/daemon/inbox.h"

#include <algorithm>

namespace k8s4r::daemon {

void Inbox::enter(std::size_t units) {
  std::unique_lock lock(mutex_);
  // One larger than the whole limit still goes in alone.
  auto room = [&] { return closed_ || depth_ == 0 || depth_ + units <= limit_; };
  if (!room()) {
    ++waits_;
    room_.wait(lock, room);
  }
  depth_ += units;
}

void Inbox::leave(std::size_t units) {
  {
    std::lock_guard lock(mutex_);
    depth_ -= std::min(depth_, units);
  }
  room_.notify_all();
}

void Inbox::close() {
  {
    std::lock_guard lock(mutex_);
    closed_ = true;
  }
  room_.notify_all();
}

std::size_t Inbox::depth() const {
  std::lock_guard lock(mutex_);
  return depth_;
}

std::size_t Inbox::waits() const {
  std::lock_guard lock(mutex_);
  return waits_;
}

}  // namespace k8s4r::daemon
