// Status reports, from the moment a task's state changes until the bridge
// has them: each gets the next seq (one counter for every task, written down
// before any report carries it, so it grows across restarts of the agent),
// is queued in the StateStore, and is published once the commit holding it
// is durable (while storage fails, from memory: the broker is then the only
// place it can be kept). At most kMaxInFlight wait for the broker at a time,
// oldest first; what is unacknowledged when the connection drops is
// published again on the next one.
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
#include <set>

namespace k8s4r::agent {

class ReportSender {
 public:
  // Below Mosquitto's default receive maximum (20): more would wait inside
  // Paho, which sends queued messages late (up to a quarter second was measured).
  static constexpr std::size_t kMaxInFlight = 16;

  ReportSender(const AgentConfig& config, StateStore& store, Durability& durability, daemon::EventLoop& loop,
               mqtt::Link& link);
  ~ReportSender();
  ReportSender(const ReportSender&) = delete;
  ReportSender& operator=(const ReportSender&) = delete;

  // Makes `status` the task's next report (its seq, robot, restart count,
  // times) and queues it; it goes out after the next commit.
  void report(AgentTask& task, TaskStatus status);
  // Publishes what is queued and not in flight, up to the window.
  void drain();
  void on_connected();
  void on_disconnected();
  // Called whenever a report left the queue (shutdown waits for none left).
  std::function<void()> on_delivered;

 private:
  const AgentConfig& config_;
  StateStore& store_;
  Durability& durability_;
  daemon::EventLoop& loop_;
  mqtt::Link& link_;
  bool connected_ = false;
  std::uint64_t generation_ = 0;  // counts connections; completions of an earlier one are ignored
  std::set<std::uint64_t> in_flight_;
  daemon::EventLoop::TimerId retry_timer_ = 0;
};

}  // namespace k8s4r::agent
