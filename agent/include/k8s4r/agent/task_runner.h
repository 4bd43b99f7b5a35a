// What the agent's task lifecycle needs of processes, and nothing more, as
// Nomad's executor interface: start a run and learn its processes, watch
// again a run an earlier agent started, stop one (SIGTERM, then SIGKILL),
// learn how each ended. The real runner (make_shim_runner) starts every run
// under k8s4r-task-shim, in a cgroup of its own where it can, and watches
// them all from one monitor thread; the agent's component tests use a fake
// that starts nothing and ends runs when the test says.
//
// Threading: every method is called on the agent's loop thread; events may
// arrive on any thread (the agent posts them to its loop).
#pragma once

#include "k8s4r/agent/config.h"
#include "k8s4r/agent/kill_schedule.h"
#include "k8s4r/agent/monitor.h"
#include "k8s4r/agent/process.h"
#include "k8s4r/common/clock.h"
#include "k8s4r/common/result.h"

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace k8s4r::agent {

struct RunRequest {
  std::string task_uid;
  ProcessSpec process;
  std::int64_t run = 0;  // which run of the task (0, then one more per restart): names its exit record
  std::optional<std::chrono::nanoseconds> timeout;
  std::chrono::nanoseconds kill_timeout{0};
  // Stopped once the robot has been out of contact with the bridge this long (its
  // disconnect.stopOnRobotAfter; 0: never), even if the agent is hung.
  std::chrono::nanoseconds stop_after_disconnect{0};
};

struct RunnerEvents {
  // A start requested with start() has its processes, or failed: exactly
  // once per start. An Error's field is StorageFull or StorageError when the
  // run's exit record cannot be kept.
  std::function<void(const std::string& task_uid, Result<TaskProcess> processes)> started;
  // A run ended (started, or adopted): exactly once per run, and for a
  // started run always after its `started`.
  std::function<void(const TaskExit& exit)> exited;
  // A signal was sent `lateness` after its deadline (for the log).
  std::function<void(const SignalAction& action, std::chrono::nanoseconds lateness)> signalled;
};

class TaskRunner {
 public:
  virtual ~TaskRunner() = default;

  // Starts a run; events.started follows. The loop does not wait for it.
  virtual void start(RunRequest request) = 0;
  // Watches again a run an earlier agent started that still runs; its
  // deadline is `timeout` after `started`. An Error when it cannot be
  // watched (it must then not run on unseen: kill_unwatched()).
  virtual Result<void> adopt(const std::string& task_uid, const TaskProcess& processes, SteadyTime started,
                             std::optional<std::chrono::nanoseconds> timeout,
                             std::chrono::nanoseconds kill_timeout) = 0;
  // True while the run an earlier agent started still runs.
  virtual bool still_runs(const TaskProcess& processes) = 0;
  // Run `run` of the task, started by an earlier agent that died before it
  // recorded its processes: found by what marks a task's process (its
  // environment, its cgroup) under a live shim, so it is watched again
  // rather than killed and run twice. None when there is no such run.
  virtual std::optional<TaskProcess> find_unrecorded(const std::string& task_uid, std::int64_t run) = 0;
  // Ends, at once, a run that cannot be watched.
  virtual void kill_unwatched(const TaskProcess& processes) = 0;
  // How a run an earlier agent started ended while no agent watched it: from
  // its exit record, or unknown (status_known false, and why).
  virtual TaskExit ended_unwatched(const std::string& task_uid, const TaskProcess& processes) = 0;
  // SIGTERM now, SIGKILL after the run's kill timeout; events.exited
  // follows. False when the task has no run (or its start has not finished:
  // the caller stops it once events.started says it runs).
  virtual bool stop(const std::string& task_uid, StopReason reason) = 0;
  // Takes back a start not yet begun (waiting for a launcher, or not yet
  // handed to its shim): it never runs, and events.started follows with an
  // Error whose field is "Withdrawn". Too late (the shim has it, or there is
  // no such start): nothing changes, and the caller stops the run once it
  // has started.
  virtual void withdraw(const std::string& task_uid) = 0;
  // Kills what earlier agents left and `keep` does not account for, and
  // drops exit records no run in `keep` needs.
  virtual void sweep(const std::vector<TaskProcess>& keep) = 0;
  // The run's end is durable in the agent's state: its exit record may go.
  virtual void forget_record(const TaskProcess& processes) = 0;
  // The agent hands over to its successor (Agent::hand_over): every run is
  // left as it is, unsignalled and unwatched, for the next agent to adopt;
  // runs not yet started never start.
  virtual void release_all() = 0;
};

using RunnerFactory = std::function<std::unique_ptr<TaskRunner>(const AgentConfig&, RunnerEvents)>;

// The real runner: k8s4r-task-shim (config.task_shim, else next to the
// agent's own binary), task cgroups as config.task_cgroups says, and one
// monitor thread. Throws std::runtime_error at start-up when the shim is
// missing, or task-cgroups is on and cgroups cannot be used.
std::unique_ptr<TaskRunner> make_shim_runner(const AgentConfig& config, RunnerEvents events);

}  // namespace k8s4r::agent
