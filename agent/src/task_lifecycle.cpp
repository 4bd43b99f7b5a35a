#include "task_lifecycle.h"

#include "k8s4r/agent/task_logs.h"
#include "k8s4r/agent/task_outputs.h"
#include "k8s4r/common/duration.h"
#include "task_user.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include <unistd.h>
#include <csignal>
#include <cstring>

namespace k8s4r::agent {

using namespace std::chrono_literals;

namespace {

TaskStatus failure(std::string reason, std::string event, std::string message) {
  TaskStatus status;
  status.state = TaskRunState::failed;
  status.reason = std::move(reason);
  status.event = std::move(event);
  status.message = std::move(message);
  return status;
}

}  // namespace

TaskLifecycle::TaskLifecycle(const AgentConfig& config, TaskTable& tasks, StateStore& store, Durability& durability,
                             ReportSender& reports, TaskRunner& runner, ArtifactWorker& artifacts, WorkDir& work_dir,
                             const RunClock& run_clock, daemon::EventLoop& loop)
    : config_(config),
      tasks_(tasks),
      store_(store),
      durability_(durability),
      reports_(reports),
      runner_(runner),
      artifacts_(artifacts),
      work_dir_(work_dir),
      run_clock_(run_clock),
      loop_(loop) {}

TaskLifecycle::~TaskLifecycle() {
  for (auto& [uid, task] : tasks_) {
    loop_.cancel(task.restart_timer);
    loop_.cancel(task.hold_timer);
  }
}

void TaskLifecycle::refuse_unreadable(const std::string& uid, const std::string& why) {
  AgentTask& task = tasks_[uid];
  task.uid = uid;
  finish(task, failure("InvalidTask", "Refused", why));
}

void TaskLifecycle::cancel_unarrived(const std::string& uid) {
  AgentTask& task = tasks_[uid];
  task.uid = uid;
  finish(task, failure("Cancelled", "Refused", "deleted before its dispatch arrived on this robot; never started"));
}

void TaskLifecycle::state_lost(const std::string& uid, std::int64_t reported_seq) {
  AgentTask& task = tasks_[uid];
  task.uid = uid;
  const std::string why = "this robot reported on the task (seq " + std::to_string(reported_seq) +
                          ") but holds no record of it: its state was lost (wiped, or restored from an older "
                          "copy); how the run ended is unknown, and it is not run again";
  spdlog::error("task {}: {}", uid, why);
  finish(task, failure("StateLost", "Refused", why));
}

void TaskLifecycle::create(const Dispatch& dispatch) {
  const std::string& uid = dispatch.task.metadata.uid;
  AgentTask& task = tasks_[uid];
  task.uid = uid;
  task.name = dispatch.task.metadata.name;
  task.spec = *dispatch.task.spec;
  task.dispatch = to_json_value(dispatch);
  task.restarts = RestartTracker(task.spec.restart_policy);

  auto refuse = [&](const std::string& reason, const std::string& message) {
    spdlog::warn("task {}: {}: {}", uid, reason, message);
    finish(task, failure(reason, "Refused", message));
  };
  if (shutting_down_) return refuse("AgentShutdown", "the agent is shutting down");
  if (!task.spec.target_robot.empty() && task.spec.target_robot != config_.robot_id) {
    return refuse("NotRunnableHere", "spec.targetRobot is " + task.spec.target_robot + ", not this robot");
  }
  if (task.spec.driver != TaskDriver::exec && task.spec.driver != TaskDriver::raw_exec) {
    return refuse("UnsupportedDriver",
                  "driver " + std::string(to_string(task.spec.driver)) + " is not supported; use exec or raw_exec");
  }
  auto user = user_of(task.spec, config_);
  // What this robot lacks (a user) or forbids (root) another may have:
  // NotRunnableHere, which the manager may place elsewhere; InvalidTask
  // would fail on every robot, and is never rescheduled.
  if (!user) return refuse("NotRunnableHere", user.error().message);
  task.run_as = user.value().run_as;
  if (user.value().uid == 0 && !config_.allow_root_tasks) {
    return refuse("NotRunnableHere",
                  "this robot runs no task as root (allow-root-tasks is false); set spec.user to another user");
  }
  if (auto failed = work_dir_.make_task_dir(uid)) return refuse("StartFailed", *failed);
  // Nothing starts before the agent's memory of it is durable: a restart
  // must know the task, or a dispatch sent again would run it twice.
  store_.accept(uid, task.dispatch);
  task.phase = Phase::accepted;
  awaiting_commit_.push_back(uid);
  durability_.request();
  spdlog::info("task {} ({}): accepted", uid, task.name);
}

bool TaskLifecycle::out_of_contact(const AgentTask& task) const {
  const auto window = stop_after_disconnect(task);
  if (window <= std::chrono::nanoseconds::zero()) return false;  // it runs however long the robot is cut off
  // Its shim counts the window from the last contact: a run starts with at
  // least half of it ahead, time for the bridge to answer a heartbeat.
  return !contact_ || loop_.clock().steady() - *contact_ >= window / 2;
}

// Why: the manager replaces a task once its robot has been silent for the
// task's window and a margin (docs/manager.md#partitions), sure that the
// robot stopped it. A dispatch that waited in the network or the broker
// meanwhile arrives at the end of such a silence, a download may end in one,
// a restart may come due in one; a run started then could run beside the
// replacement. So it waits until the bridge answers a heartbeat made after
// it was held: by then a Task the manager took for lost has been deleted
// here (its delete, sent when it was marked lost, comes before that answer;
// and the bridge answers a heartbeat that lists an ended Task with its
// delete).
void TaskLifecycle::hold(AgentTask& task) {
  const SteadyTime now = loop_.clock().steady();
  const auto window = stop_after_disconnect(task);
  task.held_for_beat = next_beat ? next_beat() : 0;
  const bool restart = task.phase == Phase::waiting_restart;
  const std::string silent =
      contact_ ? "for " + format_go_duration(std::chrono::duration_cast<std::chrono::milliseconds>(now - *contact_))
               : "since the agent started";
  spdlog::info(
      "task {}: held before it {}: no contact with the bridge {}, half its disconnect.stopOnRobotAfter of {} or "
      "more; it waits for the bridge to answer a heartbeat, as the manager may have run it elsewhere meanwhile",
      task.uid, restart ? "restarts" : "starts", silent, format_go_duration(window));
  const std::string uid = task.uid;
  task.hold_timer = loop_.after(window, [this, uid, window, restart] {
    auto found = tasks_.find(uid);
    if (found == tasks_.end() || !found->second.held_for_beat) return;
    AgentTask& held = found->second;
    TaskStatus status = restart ? held.last_report.value_or(TaskStatus{}) : TaskStatus{};
    status.state = TaskRunState::failed;
    status.reason = "Disconnected";
    status.event = restart ? "Stopped" : "Refused";
    status.message = std::string(restart ? "not restarted" : "not started") +
                     ": the bridge answered no heartbeat in its disconnect.stopOnRobotAfter of " +
                     format_go_duration(window) + " after it was due; the manager runs it elsewhere";
    spdlog::warn("task {}: {}", uid, status.message);
    finish(held, status);
  });
  if (ask_for_contact) ask_for_contact(*task.held_for_beat);
}

void TaskLifecycle::on_contact(SteadyTime sent, std::uint64_t beat) {
  if (!contact_ || sent > *contact_) contact_ = sent;
  std::vector<std::string> ready;
  std::uint64_t wanted = 0;
  for (const auto& [uid, task] : tasks_) {
    if (!task.held_for_beat) continue;
    if (*task.held_for_beat <= beat) {
      ready.push_back(uid);
    } else {
      wanted = std::max(wanted, *task.held_for_beat);
    }
  }
  for (const std::string& uid : ready) {
    auto found = tasks_.find(uid);
    if (found == tasks_.end() || !found->second.held_for_beat) continue;
    AgentTask& task = found->second;
    loop_.cancel(task.hold_timer);
    task.hold_timer = 0;
    task.held_for_beat.reset();
    spdlog::info("task {}: the bridge answered a heartbeat; {}", uid,
                 task.phase == Phase::waiting_restart ? "restarting" : "starting");
    run(task);  // its window counts from this contact
  }
  if (wanted > 0 && ask_for_contact) ask_for_contact(wanted);
}

void TaskLifecycle::on_committed(const Result<void>& outcome) {
  if (outcome) {
    for (const TaskProcess& processes : records_to_forget_) runner_.forget_record(processes);
    records_to_forget_.clear();
  }
  const auto waiting = std::move(awaiting_commit_);
  awaiting_commit_.clear();
  for (const std::string& uid : waiting) {
    auto found = tasks_.find(uid);
    if (found == tasks_.end() || found->second.phase != Phase::accepted) continue;
    if (outcome) {
      begin(found->second);
      continue;
    }
    const std::string reason = store_.out_of_space() ? "StorageFull" : "StorageError";
    spdlog::warn("task {}: not started: {}", uid, outcome.error().message);
    finish(found->second, failure(reason, "Refused",
                                  "not started: the agent cannot store its state (" + outcome.error().message + ")"));
  }
}

bool TaskLifecycle::hand_over(AgentTask& task) {
  if (!task.run_as) return true;
  if (work_dir_.hand_over(task.uid, task.run_as->uid, task.run_as->gid)) return true;
  finish(task, failure("StartFailed", "StartFailed", "cannot give the task directory to " + task.run_as->name));
  return false;
}

void TaskLifecycle::begin(AgentTask& task) {
  if (task.spec.artifacts.empty()) {
    if (hand_over(task)) start_run(task);
    return;
  }
  task.phase = Phase::fetching;
  std::optional<ReadAs> read_as;
  if (task.run_as) read_as = ReadAs{task.run_as->uid, task.run_as->gid};
  const std::string uid = task.uid;
  artifacts_.fetch(task.spec.artifacts, work_dir_.task_dir(uid), read_as, [this, uid](Result<void> outcome) {
    loop_.post([this, uid, outcome = std::move(outcome)]() mutable { on_artifacts(uid, std::move(outcome)); });
  });
}

void TaskLifecycle::on_artifacts(const std::string& uid, Result<void> outcome) {
  auto found = tasks_.find(uid);
  if (found == tasks_.end() || found->second.phase != Phase::fetching) return;
  AgentTask& task = found->second;
  if (!outcome) {
    spdlog::warn("task {}: artifact download failed: {}", uid, outcome.error().message);
    return finish(task, failure("DownloadFailed", "DownloadFailed", outcome.error().message));
  }
  // Downloaded by root; the task's user must be able to read and replace them.
  if (hand_over(task)) start_run(task);
}

void TaskLifecycle::start_run(AgentTask& task) {
  if (task.held_for_beat) return;  // started when the bridge answers
  if (out_of_contact(task)) return hold(task);
  run(task);
}

void TaskLifecycle::run(AgentTask& task) {
  task.phase = Phase::starting;
  RunRequest request;
  request.task_uid = task.uid;
  request.process = process_spec(task, config_, work_dir_);
  request.run = task.restart_count();
  request.timeout = task.spec.timeout;
  request.kill_timeout = task.spec.kill_timeout.value_or(config_.default_kill_timeout);
  request.stop_after_disconnect = stop_after_disconnect(task);
  runner_.start(std::move(request));
}

void TaskLifecycle::on_started(const std::string& uid, Result<TaskProcess> processes) {
  auto found = tasks_.find(uid);
  if (found == tasks_.end() || found->second.phase != Phase::starting) return;
  AgentTask& task = found->second;
  if (!processes && processes.error().field == "Withdrawn") {
    spdlog::info("task {}: stopped before it started", uid);
    return finish(task, failure(to_string(task.stop_requested.value_or(StopReason::cancelled)), "Stopped",
                                "stopped before it started"));
  }
  if (!processes) {
    spdlog::warn("task {}: cannot start: {}", uid, processes.error().message);
    const std::string& field = processes.error().field;
    const bool storage = field == "StorageFull" || field == "StorageError";
    // E2BIG: its command, arguments and environment exceed what execve
    // takes, on any robot.
    if (processes.error().message.find("Argument list too long") != std::string::npos)
      return finish(task, failure("InvalidTask", "StartFailed", processes.error().message));
    return finish(
        task, failure(storage ? field : "StartFailed", storage ? "Refused" : "StartFailed", processes.error().message));
  }
  task.phase = Phase::running;
  task.process = processes.value();
  store_.set_process(uid, task.process);
  task.started_at = loop_.clock().wall();
  spdlog::info("task {}: started pid {} (shim pid {}{})", uid, task.process.pgid, task.process.pid,
               task.process.cgroup.empty() ? "" : ", cgroup " + task.process.cgroup);
  TaskStatus status;
  status.state = TaskRunState::running;
  status.event = "Started";
  status.started_at = task.started_at;
  status.message = "started " + task.spec.exec_config->command;
  reports_.report(task, status);
  // Stopped while it was starting: now that it runs, the stop reaches it.
  if (task.stop_requested) runner_.stop(uid, *task.stop_requested);
}

void TaskLifecycle::stop(AgentTask& task, StopReason reason) {
  switch (task.phase) {
    case Phase::running:
      // Remembered here too: the process may already have exited, with its
      // exit on the way to the loop, and must then not be restarted.
      if (!task.stop_requested) task.stop_requested = reason;
      runner_.stop(task.uid, reason);
      break;
    case Phase::starting:
      // Taken back if no shim has it yet (on_started then hears Withdrawn);
      // else stopped once the runner says it runs (on_started).
      if (!task.stop_requested) task.stop_requested = reason;
      runner_.withdraw(task.uid);
      break;
    case Phase::accepted:
    case Phase::fetching:
      // A download runs on; its result is ignored, and nothing starts.
      finish(task, failure(to_string(reason), "Stopped", "stopped before it started"));
      break;
    case Phase::waiting_restart: {
      loop_.cancel(task.restart_timer);
      task.restart_timer = 0;
      TaskStatus status = task.last_report.value_or(TaskStatus{});
      status.state = TaskRunState::failed;
      status.reason = to_string(reason);
      status.event = "Stopped";
      status.message = "stopped while waiting to restart";
      finish(task, status);
      break;
    }
    case Phase::finished:
      break;
  }
}

void TaskLifecycle::on_exit(const TaskExit& exit) {
  auto found = tasks_.find(exit.task_uid);
  if (found == tasks_.end()) return;
  AgentTask& task = found->second;
  records_to_forget_.push_back(task.process);
  task.process = TaskProcess{};
  if (!exit.status_known) {
    // An agent before shims started it; or its shim was killed.
    const bool adopted = exit.unknown_why == "adopted";
    TaskStatus status = failure(exit.stopped_by ? to_string(*exit.stopped_by)
                                : adopted       ? "AgentRestarted"
                                                : "ExitUnknown",
                                "Exited",
                                adopted ? "ran on across an agent restart and ended; its exit code is unknown, since "
                                          "the restarted agent is not its parent"
                                        : "ended, and its exit code is unknown: " + exit.unknown_why);
    status.finished_at = loop_.clock().wall();
    status.logs_tail = work_dir_.logs_tail(task.uid);
    spdlog::warn("task {}: {}", task.uid, status.message);
    return finish(task, status);
  }
  if (exit.leftovers > 0) {
    spdlog::info("task {}: {} process(es) it left behind were killed when it ended", task.uid, exit.leftovers);
  }

  TaskStatus status;
  status.finished_at = loop_.clock().wall();
  status.exit_code = exit.status.exit_code;
  if (exit.status.signal != 0) status.signal = exit.status.signal;
  // What stopped it, if anything did: a stop asked for that found the task
  // already ended is not how it ended. Such a task is recorded as it ended
  // (completed on exit 0), and never restarted.
  const std::optional<StopReason> stopped_by = exit.stopped_by;
  const bool clean = exit.status.exit_code == 0 && exit.status.signal == 0;
  const RestartDecision decision =
      task.stop_requested && !stopped_by && !clean
          ? RestartDecision{RestartDecision::Kind::fail,
                            {},
                            "Error",
                            describe_exit(exit.status) + "; not restarted, as it was being stopped (" +
                                to_string(*task.stop_requested) + ")"}
          : task.restarts.on_exit(exit.exited_at, exit.status, stopped_by);
  status.event = exit.status.signal == SIGKILL ? "Killed" : exit.status.signal != 0 ? "Terminated" : "Exited";
  status.message = decision.message;
  const auto kill_timeout = task.spec.kill_timeout.value_or(config_.default_kill_timeout);
  if (stopped_by == StopReason::timeout && task.spec.timeout) {
    status.message =
        exit.status.signal == SIGKILL
            ? "did not stop " + format_go_duration(kill_timeout) + " after SIGTERM at its " +
                  format_go_duration(*task.spec.timeout) + " timeout; killed"
            : "stopped at its " + format_go_duration(*task.spec.timeout) + " timeout, " + describe_exit(exit.status);
  } else if (stopped_by == StopReason::disconnected) {
    status.message = "stopped on the robot after " + format_go_duration(stop_after_disconnect(task)) +
                     " without contact with the bridge (disconnect.stopOnRobotAfter), as the manager runs it "
                     "elsewhere then; " +
                     describe_exit(exit.status);
  } else if (stopped_by) {
    status.message = "stopped (" + to_string(*stopped_by) + "), " + describe_exit(exit.status);
  }

  switch (decision.kind) {
    case RestartDecision::Kind::complete: {
      status.state = TaskRunState::completed;
      auto outputs = read_task_outputs(work_dir_.task_file(task.uid, kTaskOutputsFile));
      if (outputs) {
        status.outputs = std::move(outputs.value());
      } else {
        // It exited 0, but what it declared cannot be used: not a success
        // to give to other tasks or to the cache.
        status.state = TaskRunState::failed;
        status.reason = "InvalidOutputs";
        status.message = describe_exit(exit.status) + ", but its " + outputs.error().message;
      }
      break;
    }
    case RestartDecision::Kind::fail:
      status.state = TaskRunState::failed;
      status.reason = decision.reason;
      break;
    case RestartDecision::Kind::restart: {
      // Outputs are what the run that completes declares, never an earlier
      // attempt's (unlink removes a name, never what a link points to).
      ::unlink(work_dir_.task_file(task.uid, kTaskOutputsFile).c_str());
      status.state = TaskRunState::running;
      status.event = "Restarting";
      task.phase = Phase::waiting_restart;
      store_.set_process(task.uid, TaskProcess{});
      reports_.report(task, status);
      const std::string uid = task.uid;
      task.restart_timer = loop_.after(decision.delay, [this, uid] {
        auto again = tasks_.find(uid);
        if (again == tasks_.end() || again->second.phase != Phase::waiting_restart) return;
        again->second.restart_timer = 0;
        start_run(again->second);
      });
      return;
    }
  }
  status.logs_tail = work_dir_.logs_tail(task.uid);
  spdlog::info("task {}: {} ({})", task.uid, to_string(status.state), status.message);
  finish(task, status);
}

void TaskLifecycle::report_again(AgentTask& task) {
  if (task.last_report) reports_.report(task, *task.last_report);
}

void TaskLifecycle::finish(AgentTask& task, TaskStatus status) {
  loop_.cancel(task.hold_timer);
  task.hold_timer = 0;
  task.held_for_beat.reset();
  task.phase = Phase::finished;
  task.finished_order = ++last_finished_order_;
  task.process = TaskProcess{};
  store_.finish(task.uid, task.finished_order, run_clock_.now());
  reports_.report(task, std::move(status));
  // Only the report is needed from now on; a dispatch can be 256 KiB.
  task.dispatch = nullptr;
  task.spec = TaskSpec{};
  if (on_finished) on_finished(task);
}

std::chrono::nanoseconds TaskLifecycle::stop_after_disconnect(const AgentTask& task) const {
  if (task.spec.disconnect && task.spec.disconnect->stop_on_robot_after)
    return *task.spec.disconnect->stop_on_robot_after;
  return config_.disconnect_stop_after;
}

void TaskLifecycle::cap_logs() {
  for (const auto& [uid, task] : tasks_) {
    if (task.phase != Phase::running) continue;
    for (const std::string& path : {work_dir_.stdout_of(uid), work_dir_.stderr_of(uid)}) {
      if (cap_log(path, config_.max_log_bytes)) {
        spdlog::info("task {}: {} rotated at {} bytes", uid, path, config_.max_log_bytes);
      }
    }
  }
}

bool TaskLifecycle::all_finished() const {
  for (const auto& [uid, task] : tasks_) {
    if (task.active()) return false;
  }
  return true;
}

bool TaskLifecycle::in_transit(const AgentTask& task) const {
  // Held for want of contact: a hand-over (its session stopped) would wait
  // for nothing; the next agent fails it, AgentRestarted, never started.
  if (task.held_for_beat) return false;
  switch (task.phase) {
    case Phase::accepted:
    case Phase::fetching:
    case Phase::starting:
    case Phase::waiting_restart:
      return true;
    case Phase::running:
      // Being stopped by us, or by the monitor at its timeout.
      return task.stop_requested ||
             (task.spec.timeout && task.started_at && loop_.clock().wall() >= *task.started_at + *task.spec.timeout);
    case Phase::finished:
      return false;
  }
  return false;
}

std::size_t TaskLifecycle::in_transit() const {
  return static_cast<std::size_t>(
      std::count_if(tasks_.begin(), tasks_.end(), [this](const auto& item) { return in_transit(item.second); }));
}

std::chrono::nanoseconds TaskLifecycle::longest_kill_timeout_in_transit() const {
  std::chrono::nanoseconds longest{0};
  for (const auto& [uid, task] : tasks_) {
    if (in_transit(task)) longest = std::max(longest, task.spec.kill_timeout.value_or(config_.default_kill_timeout));
  }
  return longest;
}

void TaskLifecycle::stop_all() {
  shutting_down_ = true;
  std::vector<std::string> active;
  for (auto& [uid, task] : tasks_) {
    if (task.active()) active.push_back(uid);
  }
  for (const std::string& uid : active) stop(tasks_.at(uid), StopReason::shutdown);
}

}  // namespace k8s4r::agent
