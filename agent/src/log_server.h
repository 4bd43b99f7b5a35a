// A task's log, to the bridge that follows it (k8s4r/common/log_messages.h,
// docs/logs.md): each request is answered with one piece read from the task's
// files by offset. A request for bytes not written yet is held (up to its
// waitMs) and answered as soon as there are some, or the task ends; the held
// ones are looked at every 50 ms, and only while there are any. Nothing is
// sent unless a bridge asks.
//
// For a request by time (sinceSeconds), sample() notes once a second how much a
// running task's streams hold, in its logs.index.
//
// Threading: the agent's loop only.
#pragma once

#include "k8s4r/common/log_messages.h"
#include "k8s4r/daemon/event_loop.h"
#include "work_dir.h"

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace k8s4r::agent {

class LogServer {
 public:
  struct Hooks {
    std::function<void(const std::string& topic, const std::string& payload)> publish;  // at QoS 1
    // Whether the task has ended (its process gone: no byte will be added);
    // nullopt when the agent does not hold it.
    std::function<std::optional<bool>(const std::string& uid)> ended;
  };

  static constexpr std::size_t kMaxHeld = 256;

  LogServer(std::string robot_id, const WorkDir& work_dir, daemon::EventLoop& loop, Hooks hooks);
  ~LogServer();
  LogServer(const LogServer&) = delete;
  LogServer& operator=(const LogServer&) = delete;

  void on_request(const std::string& payload);
  // Notes the running tasks' stream sizes (a line in each one's logs.index
  // when they changed); forgets the others.
  void sample(const std::vector<std::string>& running_uids);
  std::size_t held() const { return held_.size(); }

 private:
  struct Held {
    LogRequest request;
    std::int64_t offset = 0;
    SteadyTime until;
  };

  // Where a request starts: its offset, or by sinceSeconds and tailLines.
  std::int64_t start_of(const LogRequest& request) const;
  // Answers unless there is nothing to say yet and `may_hold`; true when answered.
  bool answer(const LogRequest& request, std::int64_t offset, bool may_hold);
  void send(const LogRequest& request, LogChunk chunk);
  void poll();

  std::string robot_id_;
  const WorkDir& work_dir_;
  daemon::EventLoop& loop_;
  Hooks hooks_;
  std::map<std::string, Held> held_;  // by replyTo/followId: one per follow
  daemon::EventLoop::TimerId poll_timer_ = 0;
  std::map<std::string, std::pair<std::int64_t, std::int64_t>> sampled_;  // uid: the sizes last noted
};

}  // namespace k8s4r::agent
