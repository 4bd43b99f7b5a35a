// What the agent does at start with the tasks an earlier run of it left in
// state.log: finished ones come back as they were (the most recent whole);
// one whose run still lives is watched again, its timeout counted from its
// start; one whose run ended meanwhile is judged from its shim's exit record
// as if the agent had seen it end (its restart policy included); one whose
// run cannot be watched, or had not started, is killed if need be and
// reported failed, reason AgentRestarted. Then whatever earlier runs left
// and no task accounts for is killed (TaskRunner::sweep). No task runs twice.
//
// Threading: the agent's loop thread, before it connects.
#pragma once

#include "agent_task.h"
#include "k8s4r/agent/config.h"
#include "k8s4r/agent/state_store.h"
#include "k8s4r/agent/task_runner.h"
#include "retention.h"
#include "task_lifecycle.h"
#include "work_dir.h"

namespace k8s4r::agent {

class Recovery {
 public:
  Recovery(const AgentConfig& config, TaskTable& tasks, StateStore& store, TaskRunner& runner, TaskLifecycle& lifecycle,
           WorkDir& work_dir, const Clock& clock)
      : config_(config),
        tasks_(tasks),
        store_(store),
        runner_(runner),
        lifecycle_(lifecycle),
        work_dir_(work_dir),
        clock_(clock) {}

  void restore();

 private:
  // The task's run ended while no agent watched it.
  void restore_ended(AgentTask& task, const TaskProcess& processes);

  const AgentConfig& config_;
  TaskTable& tasks_;
  StateStore& store_;
  TaskRunner& runner_;
  TaskLifecycle& lifecycle_;
  WorkDir& work_dir_;
  const Clock& clock_;
};

}  // namespace k8s4r::agent
