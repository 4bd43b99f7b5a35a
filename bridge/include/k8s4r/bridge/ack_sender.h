// The bridge's end-to-end acknowledgements (k8s4r/robots/{robotId}/acks,
// docs/protocol.md#ack): a status report is confirmed once Kubernetes has
// it (or refused for good), a heartbeat as soon as it arrives. What is to
// be said to a robot waits kDelay for company, so a burst of reports costs
// one message per robot, of at most kMaxAcksPerMessage reports each.
//
// Threading: the bridge's loop thread only.
#pragma once

#include "k8s4r/common/messages.h"
#include "k8s4r/daemon/event_loop.h"

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace k8s4r::bridge {

class AckSender {
 public:
  static constexpr std::chrono::milliseconds kDelay{20};
  using Publish = std::function<void(const std::string& topic, const std::string& payload)>;

  AckSender(daemon::EventLoop& loop, Publish publish) : loop_(loop), publish_(std::move(publish)) {}
  ~AckSender() { loop_.cancel(timer_); }
  AckSender(const AckSender&) = delete;
  AckSender& operator=(const AckSender&) = delete;

  void report(const std::string& robot_id, ReportAck ack);
  // `sent_at`: the heartbeat's own timestamp (echoed for an operator to match).
  void heartbeat(const std::string& robot_id, std::optional<Timestamp> sent_at);
  // Publishes everything waiting now.
  void flush();

 private:
  struct Waiting {
    std::vector<ReportAck> reports;
    std::optional<Timestamp> heartbeat;
    bool heartbeat_seen = false;
  };
  void schedule();

  daemon::EventLoop& loop_;
  Publish publish_;
  std::map<std::string, Waiting> waiting_;
  daemon::EventLoop::TimerId timer_ = 0;
};

}  // namespace k8s4r::bridge
