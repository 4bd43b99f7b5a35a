#include "task_user.h"

#include "k8s4r/agent/task_outputs.h"

#include <grp.h>
#include <pwd.h>
#include <unistd.h>
#include <algorithm>
#include <cstdlib>

namespace k8s4r::agent {

Result<TaskUser> user_of(const TaskSpec& spec, const AgentConfig& config) {
  const std::string name = spec.user.empty() ? config.task_user : spec.user;
  const std::string whose = spec.user.empty() ? "task-user " : "spec.user ";
  TaskUser chosen{std::nullopt, geteuid()};
  if (name.empty()) return chosen;
  const passwd* user = getpwnam(name.c_str());
  if (!user) return Error{"user", whose + name + " does not exist on this robot"};
  if (geteuid() != 0 && user->pw_uid != geteuid())
    return Error{"user", whose + name + " needs the agent to run as root"};
  if (geteuid() == 0) chosen.run_as = RunAs{user->pw_uid, user->pw_gid, name};
  chosen.uid = user->pw_uid;
  return chosen;
}

ProcessSpec process_spec(const AgentTask& task, const AgentConfig& config, const WorkDir& work_dir) {
  ProcessSpec spec;
  const std::string dir = work_dir.task_dir(task.uid);
  spec.working_dir = dir;
  spec.stdout_path = work_dir.stdout_of(task.uid);
  spec.stderr_path = work_dir.stderr_of(task.uid);
  spec.append_output = task.restarts.restart_count() > 0;
  const char* path = std::getenv("PATH");
  spec.env["PATH"] = path ? path : "/usr/local/bin:/usr/bin:/bin";
  spec.env["HOME"] = dir;
  spec.env["K8S4R_TASK_UID"] = task.uid;
  spec.env["K8S4R_TASK_NAME"] = task.name;
  spec.env["K8S4R_TASK_DIR"] = dir;
  spec.env["K8S4R_OUTPUTS_FILE"] = work_dir.task_file(task.uid, kTaskOutputsFile);
  spec.env["K8S4R_ROBOT_ID"] = config.robot_id;
  // Marks the process as this agent's, so a restarted agent finds orphans.
  spec.env["K8S4R_AGENT_WORK_DIR"] = config.work_dir;
  for (const auto& [key, value] : task.spec.env) spec.env[key] = value;
  const ExecConfig& exec = *task.spec.exec_config;
  spec.command = exec.command;
  spec.args = exec.args;
  if (task.run_as) {
    // The shim switches to the user, groups first, in the task's process
    // before the exec: nothing else runs as root with the task's environment.
    ProcessSpec::User user{task.run_as->uid, task.run_as->gid, {}};
    int count = 64;
    std::vector<gid_t> groups(static_cast<std::size_t>(count));
    if (getgrouplist(task.run_as->name.c_str(), task.run_as->gid, groups.data(), &count) < 0) {
      groups.resize(static_cast<std::size_t>(count));
      getgrouplist(task.run_as->name.c_str(), task.run_as->gid, groups.data(), &count);
    }
    groups.resize(static_cast<std::size_t>(std::max(count, 0)));
    user.groups = std::move(groups);
    spec.user = std::move(user);
    spec.env["USER"] = spec.env["LOGNAME"] = task.run_as->name;
  }
  return spec;
}

}  // namespace k8s4r::agent
