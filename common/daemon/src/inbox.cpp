#include "k8s4r/daemon/inbox.h"

namespace k8s4r::daemon {

void Inbox::enter() {
  std::unique_lock lock(mutex_);
  if (depth_ >= limit_ && !closed_) {
    ++waits_;
    room_.wait(lock, [this] { return depth_ < limit_ || closed_; });
  }
  ++depth_;
}

void Inbox::leave() {
  {
    std::lock_guard lock(mutex_);
    if (depth_ > 0) --depth_;
  }
  room_.notify_one();
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
