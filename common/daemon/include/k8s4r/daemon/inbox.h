// Backpressure between a thread that receives messages (an MQTT client's
// callback) and the event loop that handles them: at most `limit` units
// (messages, or bytes when the sender counts them) wait in the loop at once;
// the receiving thread blocks in enter() until the loop has handled enough.
// A message larger than the whole limit goes in when the inbox is empty. Blocked, Paho stops reading its socket, so a
// burst waits in the broker (bounded by its max_queued_messages, QoS 0 dropped first) instead of in the daemon's heap.
//
// The loop must never wait on the receiving thread, or the two would wait
// on each other; close() (at shutdown) lets every enter() through at once.
//
// Threading: every method may be called from any thread.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <mutex>

namespace k8s4r::daemon {

class Inbox {
 public:
  explicit Inbox(std::size_t limit) : limit_(limit) {}

  // Before posting a message of `units`: waits while they would not fit
  // (unless closed).
  void enter(std::size_t units = 1);
  // Once the loop has taken the message, with the units it entered with.
  void leave(std::size_t units = 1);
  void close();
  std::size_t depth() const;
  // How often enter() had to wait: the loop was behind.
  std::size_t waits() const;

 private:
  const std::size_t limit_;
  mutable std::mutex mutex_;
  std::condition_variable room_;
  std::size_t depth_ = 0, waits_ = 0;
  bool closed_ = false;
};

}  // namespace k8s4r::daemon
