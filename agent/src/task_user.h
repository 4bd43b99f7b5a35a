// Who a task runs as (spec.user, else the agent's task-user, else the
// agent's own user), and the ProcessSpec a run of it gets: its command, its
// directory and output files, its environment, its user and groups.
//
// Thread-safety: functions of their arguments and the user database.
#pragma once

#include "agent_task.h"
#include "k8s4r/agent/config.h"
#include "k8s4r/agent/process.h"
#include "k8s4r/common/result.h"
#include "work_dir.h"

namespace k8s4r::agent {

struct TaskUser {
  std::optional<RunAs> run_as;  // set when the agent (root) switches to another user
  uid_t uid;                    // whom the task runs as
};

// An Error says why the task's user cannot be had.
Result<TaskUser> user_of(const TaskSpec& spec, const AgentConfig& config);

ProcessSpec process_spec(const AgentTask& task, const AgentConfig& config, const WorkDir& work_dir);

}  // namespace k8s4r::agent
