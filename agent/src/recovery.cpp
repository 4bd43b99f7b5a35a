#include "recovery.h"

#include "task_user.h"

#include <spdlog/spdlog.h>

namespace k8s4r::agent {

void Recovery::restore() {
  // A copy: finishing a task below changes the store.
  const auto entries = store_.tasks();
  std::uint64_t last_order = 0;
  for (const auto& [uid, entry] : entries) last_order = std::max(last_order, entry.finished_order);
  lifecycle_.continue_finish_order(last_order);
  std::vector<TaskProcess> keep;  // runs watched again, and ended runs whose records are still to be read
  for (const auto& [uid, entry] : entries) {
    if (entry.finished_order != 0 && entry.finished_order + Retention::kRecentFinishedTasks <= last_order) {
      continue;  // not among the most recent: the store alone remembers it
    }
    AgentTask& task = tasks_[uid];
    task.uid = uid;
    task.last_seq = entry.last_seq;
    task.dispatch = entry.dispatch;
    task.finished_order = entry.finished_order;
    if (!entry.last_report.empty()) {
      if (auto last = parse_task_status(entry.last_report); last) {
        task.last_report = last.value();
        task.started_at = last.value().started_at;
        task.earlier_restarts = last.value().restart_count;
      }
    }
    if (task.last_report && task.last_report->state != TaskRunState::running) {
      task.phase = Phase::finished;  // its final report is in the queue or delivered
      continue;
    }
    auto dispatch = parse_dispatch(entry.dispatch.dump());
    if (dispatch && dispatch.value().task.spec) {
      task.spec = *dispatch.value().task.spec;
      task.name = dispatch.value().task.metadata.name;
    }

    // What follows its end, as before the restart: its restart policy, and
    // the user it runs as (a user gone meanwhile means no more runs).
    task.restarts = RestartTracker(task.spec.restart_policy);
    if (auto user = user_of(task.spec, config_); user) {
      task.run_as = user.value().run_as;
    } else {
      task.restarts = RestartTracker(std::nullopt);  // its user is gone: it cannot start again
    }

    TaskProcess process = entry.process;
    bool unrecorded = false;
    if (dispatch && process.pid == 0) {
      // Started just before the earlier agent died, too late to be recorded:
      // found by its marks and watched again, never killed and run twice.
      const std::int64_t run = task.last_report ? task.last_report->restart_count : 0;
      if (auto found = runner_.find_unrecorded(uid, run)) {
        process = *found;
        unrecorded = true;
        spdlog::warn("task {}: its process (pid {}, shim pid {}) started before the earlier agent recorded it", uid,
                     process.pgid, process.pid);
      }
    }
    std::string unwatched;
    if (dispatch && process.pid > 0 && runner_.still_runs(process)) {
      // Watch it again until it ends; its timeout still counts from its start.
      auto started = clock_.steady();
      if (task.started_at)
        started -= std::chrono::duration_cast<SteadyTime::duration>(clock_.wall() - *task.started_at);
      const auto kill_timeout = task.spec.kill_timeout.value_or(config_.default_kill_timeout);
      auto adopted = runner_.adopt(uid, process, started, task.spec.timeout, kill_timeout);
      if (adopted) {
        keep.push_back(process);
        if (unrecorded) {
          // As if its start had just been answered: recorded, and reported running.
          task.phase = Phase::starting;
          lifecycle_.on_started(uid, process);
          continue;
        }
        task.phase = Phase::running;
        task.process = process;
        if (process.exit_file.empty()) {
          spdlog::info("task {}: pid {} still runs; watching it again", uid, process.pid);
        } else {
          spdlog::info("task {}: pid {} still runs under its shim (pid {}); watching it again", uid, process.pgid,
                       process.pid);
        }
        continue;
      }
      // Alive, but it cannot be watched (no pidfd): it must not run on unseen.
      unwatched = adopted.error().message;
      runner_.kill_unwatched(process);
    }
    if (unwatched.empty() && dispatch && process.pid > 0 && !process.exit_file.empty()) {
      keep.push_back(process);
      restore_ended(task, process);
      continue;
    }
    TaskStatus status = task.last_report.value_or(TaskStatus{});
    status.state = TaskRunState::failed;
    status.reason = "AgentRestarted";
    status.event = "AgentRestarted";
    status.exit_code.reset();
    status.signal.reset();
    status.finished_at = clock_.wall();
    status.message =
        !unwatched.empty() ? "the agent restarted and could not watch the task again (" + unwatched + "); it was killed"
        : process.pid > 0  ? "the agent restarted and the task's process (pid " + std::to_string(process.pid) +
                                ") had ended meanwhile; its exit code is unknown"
                          : "the agent restarted before it had recorded the task's process; whatever of it had "
                            "started was killed";
    status.logs_tail = work_dir_.logs_tail(uid);
    spdlog::warn("task {}: {}", uid, status.message);
    lifecycle_.finish(task, status);
  }
  runner_.sweep(keep);
}

void Recovery::restore_ended(AgentTask& task, const TaskProcess& processes) {
  // As if the runner had seen it end: the exit record says how, and the
  // restart policy decides what follows, as it would have without the restart.
  task.phase = Phase::running;
  task.process = processes;
  TaskExit exit = runner_.ended_unwatched(task.uid, processes);
  exit.exited_at = clock_.steady();
  lifecycle_.on_exit(exit);
}

}  // namespace k8s4r::agent
