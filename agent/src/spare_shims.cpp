#include "k8s4r/agent/spare_shims.h"

#include "k8s4r/agent/process.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace k8s4r::agent {

Result<SpareShim> start_spare_shim(const std::string& path) {
  int ends[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ends) != 0) {
    return Error{"command", std::string("socketpair: ") + std::strerror(errno)};
  }
  // Above the descriptors a child gets (spawn_process dup2s to 3 upwards).
  const int theirs = fcntl(ends[1], F_DUPFD_CLOEXEC, 10);
  const int error = errno;
  close(ends[1]);
  if (theirs < 0) {
    close(ends[0]);
    return Error{"command", std::string("fcntl: ") + std::strerror(error)};
  }
  // A handoff the shim never reads (stopped, say) must not hold the agent's loop.
  const timeval limit{10, 0};
  setsockopt(ends[0], SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
  ProcessSpec spec;
  spec.command = path;
  spec.args = {"--spare-fd", "3"};
  const char* search = std::getenv("PATH");
  spec.env["PATH"] = search ? search : "/usr/local/bin:/usr/bin:/bin";
  spec.pass_fds = {theirs};
  auto spawned = spawn_process(spec);
  close(theirs);
  if (!spawned) {
    close(ends[0]);
    return Error{"command", "cannot start the task shim " + path + ": " + spawned.error().message};
  }
  return SpareShim{spawned.value().pid, spawned.value().pidfd, ends[0]};
}

void discard(SpareShim& spare) {
  if (spare.channel >= 0) close(spare.channel);
  if (spare.pidfd >= 0) {
    siginfo_t info{};
    waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(spare.pidfd), &info, WEXITED);
    close(spare.pidfd);
  }
  spare = SpareShim{};
}

SpareShims::~SpareShims() {
  if (ready_) discard(*ready_);
}

Result<SpareShim> SpareShims::take(bool& was_ready) {
  was_ready = false;
  std::optional<SpareShim> ready;
  {
    std::lock_guard lock(mutex_);
    ready.swap(ready_);
  }
  if (ready) {
    SpareShim spare = *ready;
    pollfd ended{spare.pidfd, POLLIN, 0};
    if (poll(&ended, 1, 0) == 0) {
      was_ready = true;
      return spare;
    }
    discard(spare);  // it died waiting (killed by someone): start another
  }
  return start_spare_shim(path_);
}

Result<void> SpareShims::prepare() {
  {
    std::lock_guard lock(mutex_);
    if (ready_) return ok();
  }
  auto spare = start_spare_shim(path_);
  if (!spare) return spare.error();
  std::lock_guard lock(mutex_);
  if (ready_) {
    discard(spare.value());  // another launcher made one meanwhile
    return ok();
  }
  ready_ = spare.value();
  return ok();
}

}  // namespace k8s4r::agent
