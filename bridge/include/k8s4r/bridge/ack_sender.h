// The bridge's end-to-end acknowledgements (k8s4r/robots/{robotId}/acks,
// docs/protocol.md#ack): a status report is confirmed once Kubernetes has
// it (or refused for good), a heartbeat as soon as it arrives. What is to
// be said to a robot waits kDelay for company, so a burst of reports costs
// one message per robot, of at most kMaxAcksPerMessage reports each.
// Refusals go out at most kMaxRefusalsPerSecond (all robots together): an
// honest robot's report is rarely refused, and one whose refusal is not
// sent sends its report again later; a flood of forged reports on a robot's
// topic must not become a flood of acknowledgements to that robot, ahead of
// its dispatches in the broker (bench/flood_bench.py found dispatches two
// minutes late behind them).
// While the link to the broker has no room (a busy broker reads a client's
// publishes no faster than its other clients'), acknowledgements wait here,
// one entry per robot: a newer heartbeat's replaces an older one's and a
// report acknowledged twice is said once, so what waits is bounded by the
// fleet, not by the messages it sends, and goes out fresh once there is room.
//
// Threading: the bridge's loop thread only, but refusals_dropped().
#pragma once

#include "k8s4r/bridge/token_bucket.h"
#include "k8s4r/common/messages.h"
#include "k8s4r/daemon/event_loop.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace k8s4r::bridge {

class AckSender {
 public:
  static constexpr std::chrono::milliseconds kDelay{20};
  static constexpr double kMaxRefusalsPerSecond = 500;
  using Publish = std::function<void(const std::string& topic, const std::string& payload)>;
  // The epoch each Ack to a robot carries (Ack::epoch); none when unset.
  using EpochOf = std::function<std::optional<std::int64_t>(const std::string& robot_id)>;

  // Whether the link takes more now; none: always.
  using HasRoom = std::function<bool()>;

  AckSender(daemon::EventLoop& loop, Publish publish, EpochOf epoch_of = {}, HasRoom has_room = {})
      : loop_(loop), publish_(std::move(publish)), epoch_of_(std::move(epoch_of)), has_room_(std::move(has_room)) {}
  ~AckSender() { loop_.cancel(timer_); }
  AckSender(const AckSender&) = delete;
  AckSender& operator=(const AckSender&) = delete;

  void report(const std::string& robot_id, ReportAck ack);
  // `sent_at`: the heartbeat's own timestamp (echoed for an operator to match).
  void heartbeat(const std::string& robot_id, std::optional<Timestamp> sent_at);
  // Asks the robot to list its artifacts again (Ack::resend_artifacts).
  void resend_artifacts(const std::string& robot_id);
  // Publishes everything waiting now, room or not.
  void flush();
  // Refusals not sent, over kMaxRefusalsPerSecond. Any thread (metrics).
  std::uint64_t refusals_dropped() const { return refusals_dropped_.load(std::memory_order_relaxed); }
  // Robots with acknowledgements waiting, and how often they waited for
  // room in the link. Any thread (metrics).
  std::size_t robots_waiting() const { return robots_waiting_.load(std::memory_order_relaxed); }
  std::uint64_t waits_for_room() const { return waits_for_room_.load(std::memory_order_relaxed); }

 private:
  struct Waiting {
    std::vector<ReportAck> reports;                                        // in the order first seen
    std::map<std::pair<std::string, std::int64_t>, std::size_t> position;  // (task uid, seq) → index in reports
    std::optional<Timestamp> heartbeat;
    bool heartbeat_seen = false;
    bool resend_artifacts = false;
  };
  void schedule();
  void counted() { robots_waiting_.store(waiting_.size(), std::memory_order_relaxed); }

  daemon::EventLoop& loop_;
  Publish publish_;
  EpochOf epoch_of_;
  HasRoom has_room_;
  std::map<std::string, Waiting> waiting_;
  daemon::EventLoop::TimerId timer_ = 0;
  TokenBucket refusals_{kMaxRefusalsPerSecond};
  std::atomic<std::uint64_t> refusals_dropped_{0};
  std::atomic<std::size_t> robots_waiting_{0};
  std::atomic<std::uint64_t> waits_for_room_{0};
};

}  // namespace k8s4r::bridge
