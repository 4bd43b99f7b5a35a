// A task's life on the robot, from an accepted dispatch to its final report:
//
//   create   checks the task (driver, user, target robot), makes its private
//            directory and records the dispatch; nothing starts before that
//            record is durable, so a restart knows the task and a dispatch
//            sent again never runs it twice
//   begin    after the commit: artifacts fetched (off the loop), the
//            directory given to the task's user, the run handed to the
//            TaskRunner (which answers later: the loop never waits on a start)
//   hold     a run due (its first, or a restart) while the robot has been
//            out of contact with the bridge for half its disconnect window
//            waits until the bridge answers a heartbeat made after that: its
//            dispatch may have waited in the network while the manager
//            replaced it
//   exits    the restart policy decides: completed, failed, or run again
//            after its delay
//   stop     a cancel, a timeout or the agent's shutdown: SIGTERM, then
//            SIGKILL; a task not yet running is failed with the reason
// Every state change becomes a report (ReportSender). A finished task keeps
// only its final report; the Retention decides how long.
//
// Threading: the agent's loop thread only; runner and download events are
// posted to the loop by the agent.
#pragma once

#include "agent_task.h"
#include "durability.h"
#include "k8s4r/agent/artifacts.h"
#include "k8s4r/agent/config.h"
#include "k8s4r/agent/state_store.h"
#include "k8s4r/agent/task_runner.h"
#include "k8s4r/common/messages.h"
#include "k8s4r/daemon/event_loop.h"
#include "report_sender.h"
#include "run_clock.h"
#include "work_dir.h"

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

namespace k8s4r::agent {

class TaskLifecycle {
 public:
  TaskLifecycle(const AgentConfig& config, TaskTable& tasks, StateStore& store, Durability& durability,
                ReportSender& reports, TaskRunner& runner, ArtifactWorker& artifacts, WorkDir& work_dir,
                const RunClock& run_clock, daemon::EventLoop& loop);
  ~TaskLifecycle();
  TaskLifecycle(const TaskLifecycle&) = delete;
  TaskLifecycle& operator=(const TaskLifecycle&) = delete;

  // A new task from a parsed dispatch; refused (finished with a reason) when
  // it cannot run here.
  void create(const Dispatch& dispatch);
  // A task the agent does not hold, whose dispatch did not parse: failed,
  // reason InvalidTask, with `why`.
  void refuse_unreadable(const std::string& uid, const std::string& why);
  // A task the agent never held, deleted before its create arrived (the
  // two crossed, or the create is a late resend): failed, reason Cancelled,
  // and remembered as finished, so the create, when it comes, is answered
  // with that report instead of run.
  void cancel_unarrived(const std::string& uid);
  // A create for a task this robot reported on (Dispatch.reportedSeq) and
  // holds no record of: its state was lost. Failed, reason StateLost, with a
  // seq above the one reported; never run.
  void state_lost(const std::string& uid, std::int64_t reported_seq);
  // Stops the task (a running one by signal; one not yet running at once).
  void stop(AgentTask& task, StopReason reason);
  // The task's last report, made again with a new seq (a dispatch sent again).
  void report_again(AgentTask& task);
  // Ends the task with `status` as its final report.
  void finish(AgentTask& task, TaskStatus status);

  // Events, on the loop.
  // The bridge has the robot's heartbeat number `beat`, sent at `sent`:
  // tasks held for it or an earlier one start.
  void on_contact(SteadyTime sent, std::uint64_t beat);
  void on_committed(const Result<void>& outcome);
  void on_started(const std::string& uid, Result<TaskProcess> processes);
  void on_exit(const TaskExit& exit);
  void on_artifacts(const std::string& uid, Result<void> outcome);

  // The task's disconnect.stopOnRobotAfter, else the agent's default (0: never).
  std::chrono::nanoseconds stop_after_disconnect(const AgentTask& task) const;
  // Keeps running tasks' output within max-log-bytes (called each heartbeat interval).
  void cap_logs();
  // True when no task is starting, running or waiting to restart.
  bool all_finished() const;
  // Tasks a hand-over waits for, which the next agent could not take over
  // as they are: starting (accepted, fetching artifacts, handed to a shim:
  // no pid recorded yet), waiting out a restart delay, or being stopped (by
  // the agent, or by the monitor at their timeout: a stop the next agent
  // would not know of, or would send again).
  std::size_t in_transit() const;
  // The longest killTimeout among them: how long a stop may still take.
  std::chrono::nanoseconds longest_kill_timeout_in_transit() const;
  bool shutting_down() const { return shutting_down_; }
  // Refuses new tasks from now on and stops every task that has not finished.
  void stop_all();

  // The finish order the next finished task follows (Recovery, from the store).
  void continue_finish_order(std::uint64_t last) { last_finished_order_ = std::max(last_finished_order_, last); }
  // An ended run whose exit record the next commit makes unneeded.
  void forget_record_after_commit(const TaskProcess& processes) { records_to_forget_.push_back(processes); }

  // Called after a task finished (its final report queued).
  std::function<void(AgentTask& task)> on_finished;
  // The number the robot's next heartbeat will carry (Session).
  std::function<std::uint64_t()> next_beat;
  // Called when a task is held: an answered heartbeat numbered `beat` or
  // later is wanted.
  std::function<void(std::uint64_t beat)> ask_for_contact;

 private:
  bool in_transit(const AgentTask& task) const;
  // Out of contact for a new run of the task: half its window or more has
  // passed since the last contact (or there was none since the agent started).
  bool out_of_contact(const AgentTask& task) const;
  void hold(AgentTask& task);
  // Hands the run to the runner (start_run, once in contact).
  void run(AgentTask& task);
  void begin(AgentTask& task);
  void start_run(AgentTask& task);
  bool hand_over(AgentTask& task);

  const AgentConfig& config_;
  TaskTable& tasks_;
  StateStore& store_;
  Durability& durability_;
  ReportSender& reports_;
  TaskRunner& runner_;
  ArtifactWorker& artifacts_;
  WorkDir& work_dir_;
  const RunClock& run_clock_;
  daemon::EventLoop& loop_;
  std::vector<std::string> awaiting_commit_;    // accepted tasks, to begin once durable
  std::vector<TaskProcess> records_to_forget_;  // ended runs whose end the next commit makes durable
  std::uint64_t last_finished_order_ = 0;
  std::optional<SteadyTime> contact_;  // the newest contact (on_contact)
  bool shutting_down_ = false;
};

}  // namespace k8s4r::agent
