// Task shims started ahead of their tasks (k8s4r-task-shim --spare-fd,
// shim/include/k8s4r/shim/shim.h), so a task's start does not wait for the
// shim's own exec: on a small robot, or one whose cores are busy, an exec
// costs milliseconds, and a task under a shim would otherwise pay for two.
// A spare waits on a socket for its task and exits when the socket closes,
// so one never outlives its agent.
//
// Threading: every method may be called from any thread (the runner's
// launchers take spares side by side). Ownership: SpareShims owns the spare
// it keeps ready; a spare taken is the taker's.
#pragma once

#include "k8s4r/common/result.h"

#include <mutex>
#include <optional>
#include <string>

#include <sys/types.h>

namespace k8s4r::agent {

struct SpareShim {
  pid_t pid = -1;
  int pidfd = -1;    // readable when it exits
  int channel = -1;  // the agent's end of its socket: the task goes in, the start report comes out
};

// Starts a spare of the shim at `path`. Its environment is PATH alone; its
// output is the agent's until it has a task.
Result<SpareShim> start_spare_shim(const std::string& path);

// A spare nobody will use: its socket closed (it exits), then reaped.
void discard(SpareShim& spare);

// Keeps one spare ready.
class SpareShims {
 public:
  explicit SpareShims(std::string path) : path_(std::move(path)) {}
  ~SpareShims();
  SpareShims(const SpareShims&) = delete;
  SpareShims& operator=(const SpareShims&) = delete;

  // The ready spare while it still lives (`was_ready` then true), else a new one.
  Result<SpareShim> take(bool& was_ready);
  // Starts a spare when none is ready.
  Result<void> prepare();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::mutex mutex_;
  std::optional<SpareShim> ready_;
};

}  // namespace k8s4r::agent
