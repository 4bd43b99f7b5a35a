// Status reports, from the moment a task's state changes until the bridge
// has recorded them in Kubernetes: each gets the next seq (one counter for
// every task, written down before any report carries it, so it grows across
// restarts of the agent), is queued in the StateStore, and is published once
// the commit holding it is durable (while storage fails, from memory: the
// broker is then the only place it can be kept).
//
// A report that a later one of the same task supersedes before it was sent
// is not sent (the later one's confirmation confirms it). A broker's PUBACK
// only frees a place in the window of kMaxInFlight publishes; a report leaves the queue when the bridge confirms it on
// k8s4r/robots/{robotId}/acks (recorded, or refused for good), which covers
// the task's earlier reports too. What is unconfirmed is published again on
// every new connection, after kFirstResend without a confirmation (then
// twice as long each time, up to kMaxResend), and at once when the bridge
// is heard again after a silence. Duplicates are harmless: the bridge drops
// a seq it has applied. With legacy-topics (a Go K8s4r server, which
// confirms nothing) the PUBACK is the end of a report's journey, as before.
//
// Threading: the agent's loop thread only. Link completions are posted to
// the loop.
#pragma once

#include "agent_task.h"
#include "durability.h"
#include "k8s4r/agent/config.h"
#include "k8s4r/agent/state_store.h"
#include "k8s4r/daemon/event_loop.h"
#include "k8s4r/mqtt/link.h"

#include <cstdint>
#include <functional>
#include <map>
#include <set>

namespace k8s4r::agent {

class ReportSender {
 public:
  // Below Mosquitto's default receive maximum (20): more would wait inside
  // Paho, which sends queued messages late (up to a quarter second was measured).
  static constexpr std::size_t kMaxInFlight = 16;
  static constexpr std::chrono::seconds kFirstResend{10};
  static constexpr std::chrono::minutes kMaxResend{5};

  ReportSender(const AgentConfig& config, StateStore& store, Durability& durability, daemon::EventLoop& loop,
               mqtt::Link& link);
  ~ReportSender();
  ReportSender(const ReportSender&) = delete;
  ReportSender& operator=(const ReportSender&) = delete;

  // Makes `status` the task's next report (its seq, robot, restart count,
  // times) and queues it; it goes out after the next commit.
  void report(AgentTask& task, TaskStatus status);
  // Publishes what is queued and not yet sent on this connection, up to the window.
  void drain();
  void on_connected();
  void on_disconnected();
  // The bridge's confirmations.
  void on_ack(const Ack& ack);
  // The bridge answered a register: it hears this robot again; whatever is
  // unconfirmed goes out again at once.
  void on_bridge_back();
  // Whether the bridge confirms reports (false with legacy-topics).
  bool end_to_end() const { return end_to_end_; }
  // Called whenever a report left the queue (shutdown waits for none left).
  std::function<void()> on_delivered;

 private:
  void publish(const QueuedReport& queued, std::uint64_t generation);
  bool superseded(const QueuedReport& queued) const;
  void resend_all();
  void schedule_resend();

  const AgentConfig& config_;
  StateStore& store_;
  Durability& durability_;
  daemon::EventLoop& loop_;
  mqtt::Link& link_;
  const bool end_to_end_;
  bool connected_ = false;
  std::uint64_t generation_ = 0;                     // counts connections; completions of an earlier one are ignored
  std::uint64_t sent_up_to_ = 0;                     // reports up to this id were published on this connection
  std::set<std::uint64_t> in_flight_;                // published, no PUBACK yet
  std::map<std::uint64_t, SteadyTime> unconfirmed_;  // PUBACKed, not yet confirmed by the bridge: since when
  std::chrono::nanoseconds resend_after_ = kFirstResend;
  daemon::EventLoop::TimerId retry_timer_ = 0, resend_timer_ = 0;
};

}  // namespace k8s4r::agent
