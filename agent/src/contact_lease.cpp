#include "k8s4r/agent/contact_lease.h"

#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <unistd.h>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace k8s4r::agent {

std::string contact_file(const std::string& work_dir) { return (std::filesystem::path(work_dir) / "contact").string(); }

ContactLease::ContactLease(const std::string& work_dir) : path_(contact_file(work_dir)) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd_ < 0) spdlog::error("cannot open {}: {}; tasks stop at their disconnect window", path_, std::strerror(errno));
}

ContactLease::~ContactLease() {
  if (fd_ >= 0) ::close(fd_);
}

void ContactLease::heard(SteadyTime sent) {
  if (last_ && sent <= *last_) return;
  last_ = sent;
  if (fd_ < 0) return;
  char text[32];
  const long long ns = std::chrono::duration_cast<std::chrono::nanoseconds>(sent.time_since_epoch()).count();
  std::snprintf(text, sizeof text, "%020lld\n", ns);
  // One write of 21 bytes in place: a shim reading meanwhile sees the old
  // value or the new one, and checks again a second later.
  if (::pwrite(fd_, text, 21, 0) != 21) {
    if (!warned_)
      spdlog::error("cannot write {}: {}; tasks stop at their disconnect window", path_, std::strerror(errno));
    warned_ = true;
    return;
  }
  warned_ = false;
}

}  // namespace k8s4r::agent
