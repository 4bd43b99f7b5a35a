// When the agent's state becomes durable: group commit over the StateStore.
// A change that something waits on (a task to start, a report to publish)
// asks for an urgent commit, which runs after the work already posted to the
// loop, so a batch of messages shares one fdatasync; one that only saves a
// resend after a crash (an acknowledgement, the run clock) waits up to
// kLazyDelay for company. A failed commit is tried again every kRetry, and
// the failure is what storage_error() tells heartbeats and presence.
//
// Threading: the agent's loop thread only.
#pragma once

#include "k8s4r/agent/state_store.h"
#include "k8s4r/common/messages.h"
#include "k8s4r/daemon/event_loop.h"

#include <chrono>
#include <functional>
#include <optional>
#include <string>

namespace k8s4r::agent {

class Durability {
 public:
  static constexpr std::chrono::milliseconds kLazyDelay{200};
  static constexpr std::chrono::seconds kRetry{5};

  struct Listener {
    // After every commit attempt, with its outcome.
    std::function<void(const Result<void>& outcome)> committed;
    // storage_error() changed (failing, or writable again).
    std::function<void()> storage_changed;
  };

  Durability(StateStore& store, daemon::EventLoop& loop, Listener listener);
  ~Durability();
  Durability(const Durability&) = delete;
  Durability& operator=(const Durability&) = delete;

  // A commit after the current batch (urgent), or within kLazyDelay.
  void request(bool urgent = true);
  // Commits now (shutdown); the outcome also goes to the listener.
  Result<void> commit();

  bool failing() const { return failure_.has_value(); }
  // Why storage fails, cut to what a message carries; none while it works.
  std::optional<StorageError> storage_error() const;

 private:
  StateStore& store_;
  daemon::EventLoop& loop_;
  Listener listener_;
  bool posted_ = false;
  daemon::EventLoop::TimerId lazy_timer_ = 0;
  std::optional<std::string> failure_;  // why the last commit failed; unset while commits succeed
};

}  // namespace k8s4r::agent
