#include "work_dir.h"

#include "k8s4r/agent/task_logs.h"
#include "k8s4r/common/files.h"
#include "k8s4r/common/messages.h"

#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace k8s4r::agent {

namespace fs = std::filesystem;

WorkDir::WorkDir(std::string path) : path_(std::move(path)) {
  std::error_code error;
  fs::create_directories(fs::path(path_) / "tasks", error);
  if (error) throw std::runtime_error("work dir " + path_ + ": " + error.message());
  // Traversable, not listable: a task's user reaches its own directory (0700)
  // and no other user learns which tasks ran.
  fs::permissions(fs::path(path_) / "tasks", fs::perms::owner_all | fs::perms::group_exec | fs::perms::others_exec,
                  error);
  if (error) throw std::runtime_error("work dir " + path_ + "/tasks: " + error.message());

  // Two agents on one work dir would both run its tasks and both write
  // state.log. flock: released by the kernel when the agent dies, however it
  // dies; close-on-exec, so no task inherits it and outlives the agent with it.
  const std::string lock = (fs::path(path_) / "agent.lock").string();
  lock_fd_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd_ < 0) throw std::runtime_error("cannot open " + lock + ": " + std::strerror(errno));
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    const int why = errno;
    const auto read = read_file(lock);
    const std::string holder = read ? read.value() : std::string();
    ::close(lock_fd_);
    lock_fd_ = -1;
    if (why == EWOULDBLOCK) {
      throw std::runtime_error("work dir " + path_ + " is in use by another agent" +
                               (holder.empty() ? "" : " (pid " + holder.substr(0, holder.find('\n')) + ")") +
                               "; two agents on one work dir would run its tasks twice");
    }
    throw std::runtime_error("cannot lock " + lock + ": " + std::strerror(why));
  }
  // Who holds it, for the next one's message; the lock itself is the flock.
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(lock_fd_, 0) != 0 || ::pwrite(lock_fd_, pid.data(), pid.size(), 0) < 0) {
    spdlog::warn("cannot write this agent's pid into {}: {}", lock, std::strerror(errno));
  }
}

WorkDir::~WorkDir() {
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

std::string WorkDir::task_dir(const std::string& uid) const { return (fs::path(path_) / "tasks" / uid).string(); }

std::string WorkDir::task_file(const std::string& uid, const char* name) const {
  return (fs::path(task_dir(uid)) / name).string();
}

std::string WorkDir::logs_tail(const std::string& uid) const {
  return k8s4r::agent::logs_tail(stdout_of(uid), stderr_of(uid), kMaxLogsTailCharacters);
}

std::optional<std::string> WorkDir::make_task_dir(const std::string& uid) {
  // Made afresh, never reused: what could not be removed of an earlier one
  // (a process of the task's user holding on to it) may hold links.
  remove_task_dir(uid);
  const std::string dir = task_dir(uid);
  if (::mkdir(dir.c_str(), 0700) != 0) {
    return "cannot create the task directory " + dir + ": " + std::strerror(errno) +
           (errno == EEXIST ? " (an earlier one could not be removed)" : "");
  }
  // Private, and root's until the task starts (hand_over): nothing of the
  // task's user (another of its tasks, say) can put a link where the agent
  // writes its artifacts.
  if (::chmod(dir.c_str(), 0700) != 0) {
    return "cannot make the task directory private: " + std::string(std::strerror(errno));
  }
  return std::nullopt;
}

void WorkDir::remove_task_dir(const std::string& uid) {
  // Taken back from the task's user first, so nothing of that user (a
  // process that outlived its task, another of its tasks) can swap a
  // directory for a link while root removes what is inside.
  const std::string dir = task_dir(uid);
  if (::lchown(dir.c_str(), geteuid(), getegid()) == 0) ::chmod(dir.c_str(), 0700);
  std::error_code error;
  fs::remove_all(dir, error);
}

bool WorkDir::hand_over(const std::string& uid, uid_t uid_of_user, gid_t gid) {
  // lchown: a link is never followed. The directory itself last: until then
  // no process of the user can enter it, so none can swap one of its
  // directories for a link while root walks them by path.
  std::error_code error;
  bool given = true;
  for (auto item = fs::recursive_directory_iterator(task_dir(uid), error);
       given && !error && item != fs::recursive_directory_iterator(); item.increment(error)) {
    given = ::lchown(item->path().c_str(), uid_of_user, gid) == 0;
  }
  return given && !error && ::lchown(task_dir(uid).c_str(), uid_of_user, gid) == 0;
}

}  // namespace k8s4r::agent
