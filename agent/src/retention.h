// How long a finished task is remembered, so a dispatch sent again is
// answered with its final report instead of running it twice: the most
// recent kRecentFinishedTasks stay whole (in the task table, with their
// directories and logs, and listed in register); older ones only in the
// StateStore, until finished-task-retention has passed on the run clock (or
// more than max-finished-tasks finished within it).
//
// Threading: the agent's loop thread only.
#pragma once

#include "agent_task.h"
#include "durability.h"
#include "k8s4r/agent/config.h"
#include "k8s4r/agent/state_store.h"
#include "k8s4r/daemon/event_loop.h"
#include "run_clock.h"
#include "work_dir.h"

namespace k8s4r::agent {

class Retention {
 public:
  static constexpr std::size_t kRecentFinishedTasks = 256;

  Retention(const AgentConfig& config, TaskTable& tasks, StateStore& store, Durability& durability, WorkDir& work_dir,
            const RunClock& run_clock, daemon::EventLoop& loop);
  ~Retention();
  Retention(const Retention&) = delete;
  Retention& operator=(const Retention&) = delete;

  // Forgets what expired, and keeps doing so (at an eighth of the retention,
  // between 100 ms and 5 min) until stop().
  void start();
  void stop();
  // A finished task only the store remembers, back in the table; null when
  // the store does not remember `uid` as finished.
  AgentTask* recall(const std::string& uid);
  // Moves all but the most recent finished tasks out of the table.
  void prune();

 private:
  void forget_expired();

  const AgentConfig& config_;
  TaskTable& tasks_;
  StateStore& store_;
  Durability& durability_;
  WorkDir& work_dir_;
  const RunClock& run_clock_;
  daemon::EventLoop& loop_;
  daemon::EventLoop::TimerId timer_ = 0;
  bool stopped_ = false;
};

}  // namespace k8s4r::agent
