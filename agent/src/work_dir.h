// The agent's work dir: WORK_DIR/agent.lock (one agent per work dir), and
// WORK_DIR/tasks/<uid>, each task's private directory with its output.
//
// Threading: not thread-safe; the agent's loop owns it.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

namespace k8s4r::agent {

class WorkDir {
 public:
  // Creates WORK_DIR/tasks and takes WORK_DIR/agent.lock (flock); throws
  // std::runtime_error naming what is unusable, or the agent that holds it.
  explicit WorkDir(std::string path);
  ~WorkDir();
  WorkDir(const WorkDir&) = delete;
  WorkDir& operator=(const WorkDir&) = delete;

  const std::string& path() const { return path_; }
  std::string task_dir(const std::string& uid) const;
  std::string task_file(const std::string& uid, const char* name) const;
  std::string stdout_of(const std::string& uid) const { return task_file(uid, "stdout.log"); }
  std::string stderr_of(const std::string& uid) const { return task_file(uid, "stderr.log"); }
  // The last kMaxLogsTailCharacters of what the task wrote.
  std::string logs_tail(const std::string& uid) const;

  // A new, empty, private (0700, root's) directory for the task; an Error
  // message says why not.
  std::optional<std::string> make_task_dir(const std::string& uid);
  void remove_task_dir(const std::string& uid);
  // Gives the task's directory and what the agent put in it to its user;
  // false when it cannot.
  bool hand_over(const std::string& uid, uid_t uid_of_user, gid_t gid);

 private:
  std::string path_;
  int lock_fd_ = -1;
};

}  // namespace k8s4r::agent
