// The bridge's side of following a task's log over MQTT (docs/logs.md): a
// follower (an HTTP request of logs_endpoint) asks its robot for one piece at
// a time and waits for the answer; the bridge's loop hands each answer that
// arrives to the follower waiting for it. An answer nobody waits for (late,
// or for a follow that has gone) is dropped: the follower asked again.
//
// Threading: ask() from any thread (each follower's own); on_chunk() from the
// bridge's loop.
#pragma once

#include "k8s4r/common/log_messages.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>

namespace k8s4r::bridge {

class LogFollows {
 public:
  // Publishes a request to the robot's log request topic (at QoS 0); from any thread.
  using Publish = std::function<void(const std::string& topic, const std::string& payload)>;

  // `reply_to`: this bridge's name in its answers' topic (BridgeConfig::log_reply_to).
  LogFollows(std::string reply_to, Publish publish) : reply_to_(std::move(reply_to)), publish_(std::move(publish)) {}

  const std::string& reply_to() const { return reply_to_; }
  // A follow id no other follow of this bridge has.
  std::string new_follow_id();

  // Sends `request` (its replyTo set here) and waits up to `timeout` for its
  // answer; nullopt when none came, or when `stop` is set meanwhile.
  std::optional<LogChunk> ask(LogRequest request, std::chrono::milliseconds timeout);
  // An answer from the loop; false when no follower waits for it.
  bool on_chunk(LogChunk chunk);
  // Wakes every follower waiting (the bridge stops); ask() answers nullopt from then on.
  void stop();
  bool stopped() const;

  std::size_t followers() const;
  std::uint64_t bytes_received() const { return bytes_.load(); }
  std::uint64_t chunks_dropped() const { return dropped_.load(); }

 private:
  struct Waiting {
    LogRequest request;
    std::optional<LogChunk> answer;
  };

  std::string reply_to_;
  Publish publish_;
  mutable std::mutex mutex_;
  std::condition_variable arrived_;
  std::map<std::string, Waiting> waiting_;  // by followId
  bool stopped_ = false;
  std::uint64_t next_id_ = 0;
  std::atomic<std::uint64_t> bytes_{0}, dropped_{0};
};

}  // namespace k8s4r::bridge
