#include "k8s4r/shim/cgroup.h"

#include "k8s4r/common/files.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>
#include <optional>
#include <sstream>
#include <thread>

namespace k8s4r::shim {

namespace {

Error system_error(const std::string& what, const std::string& path, int error) {
  return Error{"cgroup", what + " " + path + ": " + std::strerror(error)};
}

Result<void> write_small_file(const std::string& path, const std::string& text) {
  const int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return system_error("cannot open", path, errno);
  const ssize_t written = write(fd, text.data(), text.size());
  const int error = errno;
  close(fd);
  if (written != static_cast<ssize_t>(text.size())) return system_error("cannot write", path, error);
  return ok();
}

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape_octal(const std::string& field) {
  std::string out;
  for (std::size_t i = 0; i < field.size(); ++i) {
    if (field[i] == '\\' && i + 3 < field.size()) {
      const std::string digits = field.substr(i + 1, 3);
      if (digits.find_first_not_of("01234567") == std::string::npos) {
        out.push_back(static_cast<char>(std::stoi(digits, nullptr, 8)));
        i += 3;
        continue;
      }
    }
    out.push_back(field[i]);
  }
  return out;
}

struct Cgroup2Mount {
  std::string root;    // the part of the hierarchy mounted there ("/" unless in a cgroup namespace)
  std::string target;  // where
};

Result<Cgroup2Mount> find_mount() {
  auto text = read_file("/proc/self/mountinfo");
  if (!text) return text.error().within("cgroup");
  std::istringstream lines(text.value());
  for (std::string line; std::getline(lines, line);) {
    const auto separator = line.find(" - ");
    if (separator == std::string::npos) continue;
    std::istringstream after(line.substr(separator + 3));
    std::string type;
    after >> type;
    if (type != "cgroup2") continue;
    std::istringstream before(line.substr(0, separator));
    std::string id, parent, device, root, target;
    if (!(before >> id >> parent >> device >> root >> target)) continue;
    return Cgroup2Mount{unescape_octal(root), unescape_octal(target)};
  }
  return Error{"cgroup", "no cgroup2 filesystem is mounted (see /proc/self/mountinfo)"};
}

void collect_processes(const std::string& path, std::vector<pid_t>& out, int depth) {
  if (auto procs = read_file(path + "/cgroup.procs"); procs) {
    std::istringstream numbers(procs.value());
    for (long pid = 0; numbers >> pid;) {
      if (pid > 0) out.push_back(static_cast<pid_t>(pid));
    }
  }
  if (depth > 64) return;  // cgroup.max.depth would refuse deeper anyway
  DIR* dir = opendir(path.c_str());
  if (!dir) return;
  while (dirent* item = readdir(dir)) {
    if (item->d_type != DT_DIR || item->d_name[0] == '.') continue;
    collect_processes(path + "/" + item->d_name, out, depth + 1);
  }
  closedir(dir);
}

}  // namespace

Result<std::string> cgroup2_mount() {
  auto mount = find_mount();
  if (!mount) return mount.error();
  return mount.value().target;
}

Result<std::string> cgroup_of(pid_t pid) {
  auto mount = find_mount();
  if (!mount) return mount.error();
  const std::string file = pid == 0 ? "/proc/self/cgroup" : "/proc/" + std::to_string(pid) + "/cgroup";
  auto text = read_file(file);
  if (!text) return text.error().within("cgroup");
  std::istringstream lines(text.value());
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("0::", 0) != 0) continue;
    std::string path = line.substr(3);
    const std::string& root = mount.value().root;
    if (root != "/" && path.rfind(root, 0) == 0) path = path.substr(root.size());
    if (path.empty() || path.front() != '/') path.insert(path.begin(), '/');
    std::string target = mount.value().target;
    if (path != "/") target += path;
    return target;
  }
  return Error{"cgroup", "in no cgroup v2 (no 0:: line in " + file + ")"};
}

Result<std::string> own_cgroup() { return cgroup_of(0); }

Result<std::vector<pid_t>> cgroup_processes(const std::string& path) {
  if (access((path + "/cgroup.procs").c_str(), R_OK) != 0) return system_error("cannot read", path, errno);
  std::vector<pid_t> pids;
  collect_processes(path, pids, 0);
  return pids;
}

Result<void> signal_cgroup(const std::string& path, int signal) {
  if (signal == SIGKILL) {
    auto killed = write_small_file(path + "/cgroup.kill", "1");
    if (killed || access((path + "/cgroup.kill").c_str(), F_OK) == 0) return killed;
    // Before 5.14: kill what is listed until nothing is (a fork may add one
    // between the read and the kill).
    for (int round = 0; round < 100; ++round) {
      auto pids = cgroup_processes(path);
      if (!pids) return pids.error();
      if (pids.value().empty()) return ok();
      for (pid_t pid : pids.value()) kill(pid, SIGKILL);
    }
    return ok();
  }
  auto pids = cgroup_processes(path);
  if (!pids) return pids.error();
  for (pid_t pid : pids.value()) kill(pid, signal);  // ESRCH: already gone, as wanted
  return ok();
}

Result<void> signal_task_processes(const std::string& path, pid_t pgid, int signal) {
  std::optional<Error> failed;
  // The cgroup's list is read before the group is signalled: a process
  // forked into the group meanwhile is then reached through the group.
  std::vector<pid_t> others;
  if (!path.empty() && signal != SIGKILL) {
    if (auto pids = cgroup_processes(path); pids) {
      others = std::move(pids).value();
    } else if (access(path.c_str(), F_OK) == 0) {  // a cgroup already gone is fine
      failed = pids.error();
    }
  }
  if (pgid <= 0) {
    failed = Error{"pgid", "must be positive, got " + std::to_string(pgid)};
  } else if (kill(-pgid, signal) != 0 && errno != ESRCH) {
    failed = system_error("cannot signal process group", std::to_string(pgid), errno);
  }
  if (!path.empty() && signal == SIGKILL) {
    if (auto killed = signal_cgroup(path, SIGKILL); !killed && access(path.c_str(), F_OK) == 0) failed = killed.error();
  }
  for (pid_t pid : others) {
    if (getpgid(pid) != pgid) kill(pid, signal);  // ESRCH: already gone, as wanted
  }
  if (failed) return *failed;
  return ok();
}

Result<void> remove_cgroup(const std::string& path, std::chrono::milliseconds wait) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  for (;;) {
    if (auto killed = signal_cgroup(path, SIGKILL); !killed) {
      if (access(path.c_str(), F_OK) != 0) return ok();  // already gone
      return killed.error();
    }
    // The cgroup and anything a root task made below it, deepest first.
    std::vector<std::string> order{path};
    for (std::size_t next = 0; next < order.size() && order.size() < 10'000; ++next) {
      if (DIR* dir = opendir(order[next].c_str())) {
        while (dirent* item = readdir(dir)) {
          if (item->d_type == DT_DIR && item->d_name[0] != '.') order.push_back(order[next] + "/" + item->d_name);
        }
        closedir(dir);
      }
    }
    int failure = 0;
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      if (::rmdir(it->c_str()) != 0 && errno != ENOENT) failure = errno;
    }
    if (failure == 0) return ok();
    if (std::chrono::steady_clock::now() >= deadline) return system_error("cannot remove", path, failure);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

Result<bool> cgroup_populated(const std::string& path) {
  auto events = read_file(path + "/cgroup.events");
  if (!events) return events.error().within("cgroup");
  std::istringstream lines(events.value());
  for (std::string key, value; lines >> key >> value;) {
    if (key == "populated") return value != "0";
  }
  return Error{"cgroup", path + "/cgroup.events has no populated line"};
}

}  // namespace k8s4r::shim
