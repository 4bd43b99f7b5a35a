#include "k8s4r/agent/task_cgroups.h"

#include "k8s4r/common/hashing.h"
#include "k8s4r/shim/cgroup.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cerrno>
#include <csignal>
#include <cstring>

namespace k8s4r::agent {

namespace {

Error cgroup_error(const std::string& what, const std::string& path, int error) {
  return Error{"cgroup", what + " " + path + ": " + std::strerror(error)};
}

}  // namespace

Result<std::string> TaskCgroups::default_parent(const std::string& work_dir) {
  auto own = shim::own_cgroup();
  if (!own) return own.error();
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(Fnv1a64().update(work_dir).value()));
  return own.value() + "/k8s4r-tasks." + std::string(hash, 8);
}

Result<TaskCgroups> TaskCgroups::open(const std::string& parent) {
  if (parent.empty() || parent.front() != '/') return Error{"cgroup", "the parent must be an absolute path"};
  if (::mkdir(parent.c_str(), 0755) != 0 && errno != EEXIST) return cgroup_error("cannot create", parent, errno);
  if (access((parent + "/cgroup.procs").c_str(), W_OK) != 0) {
    return cgroup_error("not a writable cgroup v2 directory:", parent, errno);
  }
  TaskCgroups cgroups(parent);
  const std::string probe = parent + "/.probe-" + std::to_string(::getpid());
  if (::mkdir(probe.c_str(), 0755) != 0) return cgroup_error("cannot create a cgroup in", parent, errno);
  ::rmdir(probe.c_str());
  return cgroups;
}

Result<std::string> TaskCgroups::create(const std::string& uid) {
  const std::string path = path_of(uid);
  if (::mkdir(path.c_str(), 0755) == 0) return path;
  if (errno != EEXIST) return cgroup_error("cannot create", path, errno);
  if (auto destroyed = destroy(uid, std::chrono::seconds(2)); !destroyed) return destroyed.error();
  if (::mkdir(path.c_str(), 0755) != 0) return cgroup_error("cannot create", path, errno);
  return path;
}

std::vector<std::string> TaskCgroups::list() const {
  std::vector<std::string> names;
  DIR* dir = opendir(parent_.c_str());
  if (!dir) return names;
  while (dirent* item = readdir(dir)) {
    if (item->d_type == DT_DIR && item->d_name[0] != '.') names.emplace_back(item->d_name);
  }
  closedir(dir);
  return names;
}

Result<void> TaskCgroups::destroy(const std::string& uid, std::chrono::milliseconds wait) {
  return shim::remove_cgroup(path_of(uid), wait);
}

bool TaskCgroups::holds(int pid) const {
  auto path = shim::cgroup_of(pid);
  return path && path.value().rfind(parent_ + "/", 0) == 0;
}

}  // namespace k8s4r::agent
