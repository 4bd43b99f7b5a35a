#include "retention.h"

#include "k8s4r/common/duration.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace k8s4r::agent {

using namespace std::chrono_literals;

Retention::Retention(const AgentConfig& config, TaskTable& tasks, StateStore& store, Durability& durability,
                     WorkDir& work_dir, const RunClock& run_clock, daemon::EventLoop& loop)
    : config_(config),
      tasks_(tasks),
      store_(store),
      durability_(durability),
      work_dir_(work_dir),
      run_clock_(run_clock),
      loop_(loop) {}

Retention::~Retention() { loop_.cancel(timer_); }

void Retention::start() { forget_expired(); }

void Retention::stop() {
  stopped_ = true;
  loop_.cancel(timer_);
  timer_ = 0;
}

AgentTask* Retention::recall(const std::string& uid) {
  const StoredTask* stored = store_.find(uid);
  if (!stored || stored->finished_order == 0) return nullptr;
  AgentTask& task = tasks_[uid];
  task.uid = uid;
  task.phase = Phase::finished;
  task.last_seq = stored->last_seq;
  task.finished_order = stored->finished_order;
  if (auto last = parse_task_status(stored->last_report); last) {
    task.last_report = last.value();
    task.started_at = last.value().started_at;
    task.earlier_restarts = last.value().restart_count;
  }
  return &task;
}

void Retention::prune() {
  std::vector<std::pair<std::uint64_t, std::string>> finished;
  for (const auto& [uid, task] : tasks_) {
    if (task.phase == Phase::finished) finished.emplace_back(task.finished_order, uid);
  }
  if (finished.size() <= kRecentFinishedTasks) return;
  // Oldest first by the order they finished in (persisted), not by the wall
  // clock, which a robot without an RTC may not have set yet. The store still
  // remembers them.
  std::sort(finished.begin(), finished.end());
  for (std::size_t i = 0; i + kRecentFinishedTasks < finished.size(); ++i) {
    const std::string& uid = finished[i].second;
    tasks_.erase(uid);
    work_dir_.remove_task_dir(uid);
  }
}

void Retention::forget_expired() {
  timer_ = 0;
  if (store_.finished_tasks() > 0) {
    const auto now = run_clock_.now();
    const auto forgotten = store_.forget_finished(now - config_.finished_task_retention, config_.max_finished_tasks);
    for (const auto* uids : {&forgotten.expired, &forgotten.evicted}) {
      for (const std::string& uid : *uids) {
        tasks_.erase(uid);
        work_dir_.remove_task_dir(uid);
      }
    }
    if (!forgotten.expired.empty()) {
      spdlog::info("forgot {} task(s) finished more than {} ago", forgotten.expired.size(),
                   format_go_duration(config_.finished_task_retention));
    }
    if (!forgotten.evicted.empty()) {
      spdlog::warn(
          "forgot {} finished task(s) before their retention ended: more than max-finished-tasks ({}) finished "
          "within {}; a dispatch of one of them sent again would run it again",
          forgotten.evicted.size(), config_.max_finished_tasks, format_go_duration(config_.finished_task_retention));
    }
    store_.note_clock(now);
    durability_.request(false);
  }
  if (stopped_) return;
  // Often enough that a task is forgotten at most an eighth of the retention
  // late, and the run clock recorded that often while anything is held.
  const auto every =
      std::clamp(std::chrono::duration_cast<std::chrono::milliseconds>(config_.finished_task_retention / 8),
                 std::chrono::milliseconds(100), std::chrono::milliseconds(5min));
  timer_ = loop_.after(every, [this] { forget_expired(); });
}

}  // namespace k8s4r::agent
