// The agent daemon: everything between the MQTT link and the task processes,
// made of parts with one job each (agent/src):
//
//   session          connect, subscribe, presence, register, heartbeat
//   dispatch_intake  dispatches into new tasks, resends into reports, deletes into stops
//   task_lifecycle   a task from accepted to its final report, over a TaskRunner
//   report_sender    every state change, with a seq, until the bridge has it
//   durability       group commit of the StateStore (one fdatasync per batch)
//   retention        finished tasks remembered, then forgotten
//   recovery         at start, the tasks an earlier run left
//   shim_runner      the real TaskRunner: k8s4r-task-shim, cgroups, one monitor thread
//
// The StateStore remembers every task and every report until it is
// delivered, so after a crash the agent adopts tasks still running and
// reports the rest failed with reason AgentRestarted; no task runs twice. A
// task starts, and a report is published, only after the commit that holds
// it; when storage fails, no new task starts (each is reported failed,
// reason StorageFull or StorageError) and reports go out from memory.
//
// Time comes from the loop's Clock (steady and wall), so component tests
// run the agent on a ManualClock with a fake link and a fake TaskRunner.
//
// Threading: one thread, the EventLoop's, runs all of this. MQTT callbacks,
// process events and finished downloads arrive on other threads and are
// posted to the loop. Construct, start() and shutdown() on the loop's thread
// (or before run()).
#pragma once

#include "k8s4r/agent/config.h"
#include "k8s4r/agent/task_runner.h"
#include "k8s4r/daemon/event_loop.h"
#include "k8s4r/mqtt/link.h"

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace k8s4r::agent {

// What the agent needs from the world besides MQTT; main() fills it.
struct AgentHooks {
  // sd_notify(3) state strings: "READY=1", "WATCHDOG=1", "STOPPING=1", "STATUS=...".
  std::function<void(const std::string&)> notify;
  // Half the systemd watchdog timeout, or nullopt when the watchdog is off.
  std::optional<std::chrono::microseconds> watchdog_interval;
  // How tasks are run; unset: make_shim_runner.
  RunnerFactory make_runner;
};

// The agent's exit status after a hand-over (EX_TEMPFAIL): the unit restarts
// it (RestartForceExitStatus=75) and counts it a success (SuccessExitStatus).
inline constexpr int kHandOverExitCode = 75;

class Agent {
 public:
  using LinkFactory = std::function<std::unique_ptr<mqtt::Link>(mqtt::LinkEvents)>;

  // Opens the work dir and the state store, and sets up the runner; throws
  // std::runtime_error naming what is unusable.
  Agent(AgentConfig config, daemon::EventLoop& loop, LinkFactory make_link, AgentHooks hooks = {});
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Restores the state store's tasks, then connects.
  void start();
  // Stops accepting tasks, stops the running ones (SIGTERM, then SIGKILL),
  // reports them, flushes the report queue (bounded wait), says offline and
  // disconnects; then stops the loop.
  void shutdown();
  // Exits leaving the running tasks to their shims, for the next agent on
  // this work dir to adopt (the package's upgrade sends SIGUSR2): leaves the
  // broker at once (what arrives waits in the persistent session; the broker
  // publishes no last will: the robot is not gone), waits until no task is
  // starting, being stopped or waiting to restart (30 s, or the longest
  // killTimeout under way plus 5 s, at most), commits the state store and
  // stops the loop; exit_code() is then kHandOverExitCode, on which systemd
  // starts the next agent (RestartForceExitStatus). A shutdown() during the
  // wait stops the tasks instead. Tasks whose agent does not come back are
  // stopped by their shims after disconnect.stopOnRobotAfter.
  void hand_over();
  // What main() returns: 0, or kHandOverExitCode after a hand-over.
  int exit_code() const { return exit_code_; }

 private:
  struct Parts;
  void feed_watchdog();
  void cap_logs_periodically();
  void sample_logs_periodically();
  void check_shutdown_progress();
  void finish_shutdown();
  void finish_hand_over();
  void poll_hand_over();

  AgentConfig config_;
  daemon::EventLoop& loop_;
  AgentHooks hooks_;
  std::unique_ptr<Parts> parts_;
  bool shutting_down_ = false;
  bool shutdown_finished_ = false;
  bool handing_over_ = false;
  daemon::EventLoop::TimerId hand_over_deadline_ = 0, hand_over_poll_ = 0;
  int exit_code_ = 0;
  std::optional<SteadyTime> flush_deadline_;
};

}  // namespace k8s4r::agent
