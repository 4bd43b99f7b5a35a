// The real TaskRunner: every run under k8s4r-task-shim (a spare kept ready so
// a start need not wait for the shim's own exec), in a cgroup of its own when
// task cgroups are on, watched by the one Monitor thread. The shim records how
// its task ended in WORK_DIR/exits/<uid>.<run>.json, so a run that ends while
// no agent watches it is still reported with its true exit code.
#include "k8s4r/agent/task_runner.h"

#include "k8s4r/agent/contact_lease.h"
#include "k8s4r/agent/spare_shims.h"
#include "k8s4r/agent/task_cgroups.h"
#include "k8s4r/common/files.h"
#include "k8s4r/shim/protocol.h"

#include <spdlog/spdlog.h>

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <thread>

namespace k8s4r::agent {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

class ShimRunner final : public TaskRunner {
 public:
  ShimRunner(const AgentConfig& config, RunnerEvents events) : work_dir_(config.work_dir), events_(std::move(events)) {
    set_up_containment(config);
    monitor_ =
        std::make_unique<Monitor>(MonitorCallbacks{[this](const TaskExit& exit) { on_exit(exit); }, events_.signalled});
    prepare_spare();  // so the first task need not start one
    for (std::size_t i = 0; i < kLaunchers; ++i) launchers_.emplace_back([this] { launch_loop(); });
  }
  ~ShimRunner() override {
    stop_launching();  // what is queued is never started: nobody would watch it
    for (auto& launcher : launchers_) launcher.join();
    monitor_.reset();
    // Empty once every task ended; what still runs keeps it for the next start.
    if (cgroups_) ::rmdir(cgroups_->parent().c_str());
  }

  // Queued for the launchers: the loop never waits for a shim's answer.
  void start(RunRequest request) override {
    {
      std::lock_guard lock(order_mutex_);
      starting_.insert(request.task_uid);
    }
    {
      std::lock_guard lock(queue_mutex_);
      queue_.push_back(std::move(request));
    }
    queue_wake_.notify_one();
  }

  void withdraw(const std::string& task_uid) override {
    bool queued = false;
    {
      std::lock_guard lock(queue_mutex_);
      for (auto it = queue_.begin(); it != queue_.end(); ++it) {
        if (it->task_uid != task_uid) continue;
        queue_.erase(it);
        queued = true;
        break;
      }
    }
    if (queued) {
      {
        std::lock_guard lock(order_mutex_);
        starting_.erase(task_uid);
      }
      events_.started(task_uid, Error{"Withdrawn", "stopped before it started"});
      return;
    }
    std::lock_guard lock(order_mutex_);
    if (starting_.count(task_uid)) withdrawn_.insert(task_uid);  // a launcher has it: checked before the handoff
  }

  Result<void> adopt(const std::string& task_uid, const TaskProcess& processes, SteadyTime started,
                     std::optional<std::chrono::nanoseconds> timeout, std::chrono::nanoseconds kill_timeout) override {
    return monitor_->adopt(task_uid, processes, started, timeout, kill_timeout);
  }

  bool still_runs(const TaskProcess& processes) override {
    return processes.pid > 0 && same_process_running(processes.pid, processes.start);
  }

  std::optional<TaskProcess> find_unrecorded(const std::string& task_uid, std::int64_t run) override {
    // The task's main process: it leads its own process group, carries this
    // work dir's mark and its uid, and its parent is a task shim.
    const std::string mark = "K8S4R_AGENT_WORK_DIR=" + work_dir_;
    const std::string uid_mark = "K8S4R_TASK_UID=" + task_uid;
    DIR* proc = opendir("/proc");
    if (!proc) return std::nullopt;
    std::optional<TaskProcess> found;
    while (dirent* item = readdir(proc)) {
      char* end = nullptr;
      const long pid = std::strtol(item->d_name, &end, 10);
      if (*end != '\0' || pid <= 0 || getpgid(static_cast<pid_t>(pid)) != pid) continue;
      const auto read = read_file("/proc/" + std::string(item->d_name) + "/environ");
      if (!read) continue;
      bool ours = false, its = false;
      for (std::size_t start = 0; start < read.value().size();) {
        std::size_t stop = read.value().find('\0', start);
        if (stop == std::string::npos) stop = read.value().size();
        const std::string_view variable(read.value().data() + start, stop - start);
        ours |= variable == mark;
        its |= variable == uid_mark;
        start = stop + 1;
      }
      if (!ours || !its) continue;
      const auto status = read_file("/proc/" + std::string(item->d_name) + "/status");
      if (!status) continue;
      const auto at = status.value().find("\nPPid:");
      if (at == std::string::npos) continue;
      const pid_t shim = static_cast<pid_t>(std::strtol(status.value().c_str() + at + 6, nullptr, 10));
      const auto comm = read_file("/proc/" + std::to_string(shim) + "/comm");
      if (shim <= 1 || !comm || comm.value().rfind("k8s4r-task-shim", 0) != 0) continue;
      TaskProcess process;
      process.pid = shim;
      process.start = process_start_time(shim).value_or(0);
      process.pgid = static_cast<pid_t>(pid);
      process.task_start = process_start_time(process.pgid).value_or(0);
      if (cgroups_ && ::access(cgroups_->path_of(task_uid).c_str(), F_OK) == 0)
        process.cgroup = cgroups_->path_of(task_uid);
      process.exit_file = exits_dir_ + "/" + task_uid + "." + std::to_string(run) + ".json";
      found = process;
      break;
    }
    closedir(proc);
    return found;
  }

  void kill_unwatched(const TaskProcess& processes) override {
    kill_remains(processes);
    if (!processes.exit_file.empty()) ::kill(processes.pid, SIGKILL);
  }

  TaskExit ended_unwatched(const std::string& task_uid, const TaskProcess& processes) override {
    TaskExit exit;
    exit.task_uid = task_uid;
    exit.exited_at = std::chrono::steady_clock::now();
    if (processes.exit_file.empty()) {
      // An agent before shims started it: not our child, its status is lost.
      exit.status_known = false;
      exit.unknown_why =
          "the agent restarted and the task's process (pid " + std::to_string(processes.pid) + ") had ended meanwhile";
      return exit;
    }
    const auto text = read_file(processes.exit_file);
    auto record = text ? shim::parse_exit_record(text.value()) : Result<shim::ExitRecord>(text.error());
    if (record) {
      exit.status = ExitStatus{record.value().exit_code, record.value().signal};
      exit.leftovers = record.value().leftovers;
      if (record.value().disconnected) exit.stopped_by = StopReason::disconnected;
      spdlog::info("task {}: ended while the agent was away ({})", task_uid, describe_exit(exit.status));
      return exit;
    }
    // The shim is gone and said nothing: killed, or the machine went down.
    kill_remains(processes);
    exit.status_known = false;
    exit.unknown_why = "its shim (pid " + std::to_string(processes.pid) + ") ended while the agent was away " +
                       "without recording it (" + processes.exit_file + ": " + record.error().to_string() + ")";
    return exit;
  }

  bool stop(const std::string& task_uid, StopReason reason) override { return monitor_->stop_task(task_uid, reason); }

  void sweep(const std::vector<TaskProcess>& keep) override {
    kill_orphans(keep);
    std::set<std::string> needed;
    for (const TaskProcess& process : keep) {
      if (!process.exit_file.empty()) needed.insert(process.exit_file);
    }
    std::error_code error;
    for (const auto& item : fs::directory_iterator(exits_dir_, error)) {
      if (!needed.count(item.path().string())) fs::remove(item.path(), error);
    }
  }

  void forget_record(const TaskProcess& processes) override {
    if (!processes.exit_file.empty()) ::unlink(processes.exit_file.c_str());
  }

  void release_all() override {
    stop_launching();  // what is queued is never started: the next agent finds it unstarted
    monitor_->release_all();
  }

 private:
  void stop_launching() {
    {
      std::lock_guard lock(queue_mutex_);
      stopping_ = true;
    }
    queue_wake_.notify_all();
  }

  // Starts that wait for their shim's answer at the same time: each costs a
  // fork and two execs (the shim's, when no spare is ready, and the task's),
  // which a loaded machine serves one scheduling slice at a time; starting
  // them side by side overlaps those waits.
  static constexpr std::size_t kLaunchers = 8;

  void launch_loop() {
    for (;;) {
      RunRequest request;
      {
        std::unique_lock lock(queue_mutex_);
        queue_wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        if (stopping_) return;
        request = std::move(queue_.front());
        queue_.pop_front();
      }
      launch(request);
    }
  }

  void launch(const RunRequest& request) {
    ShimSpec shim;
    shim.path = shim_path_;
    shim.spares = spares_.get();
    // One record per run: a run's record may still wait for the commit that
    // makes its end durable when the next run starts.
    shim.exit_file = exits_dir_ + "/" + request.task_uid + "." + std::to_string(request.run) + ".json";
    shim.contact_file = contact_file(work_dir_);
    shim.stop_after = request.stop_after_disconnect;
    shim.kill_after = request.kill_timeout;
    ::unlink(shim.exit_file.c_str());
    Result<TaskProcess> process = Error{"command", "not started"};
    if (cgroups_) {
      auto cgroup = cgroups_->create(request.task_uid);
      if (!cgroup) {
        process = cgroup.error();
      } else {
        shim.cgroup = cgroup.value();
      }
    }
    bool withdrawn = false;
    {
      std::lock_guard lock(order_mutex_);
      withdrawn = withdrawn_.erase(request.task_uid) > 0;
    }
    if (withdrawn) {
      process = Error{"Withdrawn", "stopped before it started"};
      if (cgroups_ && !shim.cgroup.empty()) static_cast<void>(cgroups_->destroy(request.task_uid, 1s));
    } else if (!cgroups_ || !shim.cgroup.empty()) {
      process = monitor_->launch(request.task_uid, request.process, shim, request.timeout, request.kill_timeout);
      if (!process && cgroups_) static_cast<void>(cgroups_->destroy(request.task_uid, 1s));
    }
    events_.started(request.task_uid, std::move(process));
    std::optional<TaskExit> early;
    {
      std::lock_guard lock(order_mutex_);
      starting_.erase(request.task_uid);
      withdrawn_.erase(request.task_uid);  // too late: the shim had it
      if (auto found = early_exits_.find(request.task_uid); found != early_exits_.end()) {
        early = std::move(found->second);
        early_exits_.erase(found);
      }
    }
    if (early) events_.exited(*early);
    prepare_spare();  // the next task's shim
  }

  // From the monitor thread. A run that ends before start() has said it
  // started (a task that exits at once) is held back until it has.
  void on_exit(const TaskExit& exit) {
    {
      std::lock_guard lock(order_mutex_);
      if (starting_.count(exit.task_uid)) {
        early_exits_[exit.task_uid] = exit;
        return;
      }
    }
    events_.exited(exit);
  }

  void prepare_spare() {
    if (auto ready = spares_->prepare(); !ready) {
      // The next task starts one itself, and says so if that fails too.
      spdlog::warn("cannot keep a task shim ready: {}", ready.error().message);
    }
  }

  void set_up_containment(const AgentConfig& config) {
    exits_dir_ = (fs::path(work_dir_) / "exits").string();
    std::error_code error;
    fs::create_directories(exits_dir_, error);
    if (error || ::chmod(exits_dir_.c_str(), 0700) != 0) {
      throw std::runtime_error("cannot make " + exits_dir_ + ": " + (error ? error.message() : std::strerror(errno)));
    }
    shim_path_ = config.task_shim;
    if (shim_path_.empty()) {
      shim_path_ = (fs::read_symlink("/proc/self/exe", error).parent_path() / "k8s4r-task-shim").string();
    }
    if (::access(shim_path_.c_str(), X_OK) != 0) {
      throw std::runtime_error("the task shim " + shim_path_ + " is missing or not executable (" +
                               std::strerror(errno) +
                               "): install k8s4r-task-shim next to k8s4r-agent, or set task-shim");
    }
    spares_ = std::make_unique<SpareShims>(shim_path_);
    if (config.task_cgroups == "off") {
      spdlog::info("task-cgroups is off: tasks are contained by process group and their shim only");
      return;
    }
    auto parent = config.cgroup_parent.empty() ? TaskCgroups::default_parent(config.work_dir)
                                               : Result<std::string>(config.cgroup_parent);
    auto cgroups = parent ? TaskCgroups::open(parent.value()) : Result<TaskCgroups>(parent.error());
    if (!cgroups) {
      if (config.task_cgroups == "on") throw std::runtime_error("task-cgroups is on, but " + cgroups.error().message);
      spdlog::warn(
          "tasks get no cgroup ({}); a process a task starts in a new session outlives the task unless it "
          "stays below the task's shim. Under systemd, give the unit Delegate=yes",
          cgroups.error().message);
      return;
    }
    cgroups_.emplace(std::move(cgroups).value());
    spdlog::info("each task runs in a cgroup of its own in {}", cgroups_->parent());
  }

  void kill_orphans(const std::vector<TaskProcess>& keep) {
    // What an earlier run of the agent left and no task it holds accounts for
    // (a leader that died, a task spawned just before a crash, a process that
    // left its task's process group) must not run on.
    std::set<std::string> running_cgroups;
    std::set<pid_t> ours;
    for (const TaskProcess& process : keep) {
      if (process.pid <= 0) continue;
      ours.insert(process.pid);
      ours.insert(process.pgid);
      if (!process.cgroup.empty()) running_cgroups.insert(process.cgroup);
    }
    if (cgroups_) {
      // Found by cgroup: nothing a task does to itself hides it from this.
      for (const std::string& name : cgroups_->list()) {
        if (running_cgroups.count(cgroups_->path_of(name))) continue;
        spdlog::warn("killing what is left in cgroup {} (task {}): left behind by an earlier run of the agent",
                     cgroups_->path_of(name), name);
        if (auto destroyed = cgroups_->destroy(name, 2s); !destroyed) spdlog::error("{}", destroyed.error().message);
      }
    }
    // Found by the mark in the environment: tasks of an agent that ran without
    // cgroups. (Shims carry no mark: started as spares, before their task was
    // known. A shim whose task is killed here records its end and exits.)
    const std::string mark = "K8S4R_AGENT_WORK_DIR=" + work_dir_;
    DIR* proc = opendir("/proc");
    if (!proc) return;
    while (dirent* item = readdir(proc)) {
      char* end = nullptr;
      const long pid = std::strtol(item->d_name, &end, 10);
      if (*end != '\0' || pid <= 0 || pid == getpid()) continue;
      const auto read = read_file("/proc/" + std::string(item->d_name) + "/environ");
      const std::string variables = read ? read.value() : std::string();
      bool marked = false;
      std::string task_uid;
      for (std::size_t start = 0; start < variables.size();) {
        std::size_t stop = variables.find('\0', start);
        if (stop == std::string::npos) stop = variables.size();
        const std::string_view variable(variables.data() + start, stop - start);
        if (variable == mark) marked = true;
        if (variable.rfind("K8S4R_TASK_UID=", 0) == 0) task_uid = std::string(variable.substr(15));
        start = stop + 1;
      }
      if (!marked) continue;
      const pid_t group = getpgid(static_cast<pid_t>(pid));
      if (ours.count(group) || ours.count(static_cast<pid_t>(pid))) continue;  // part of a task we watch again
      if (cgroups_ && cgroups_->holds(static_cast<int>(pid))) continue;        // the sweep above decided
      spdlog::warn("killing pid {} (task {}): left behind by an earlier run of the agent", pid, task_uid);
      ::kill(static_cast<pid_t>(pid), SIGKILL);
    }
    closedir(proc);
  }

  std::string work_dir_;
  RunnerEvents events_;
  std::string shim_path_;
  std::string exits_dir_;               // WORK_DIR/exits (0700): the shims' exit records
  std::optional<TaskCgroups> cgroups_;  // unset: tasks are contained by process group and their shim only
  std::unique_ptr<SpareShims> spares_;  // one shim kept ready
  std::mutex queue_mutex_;
  std::condition_variable queue_wake_;
  std::deque<RunRequest> queue_;
  bool stopping_ = false;
  std::vector<std::thread> launchers_;
  std::mutex order_mutex_;
  std::set<std::string> starting_;               // runs whose start has not been told yet
  std::set<std::string> withdrawn_;              // of those, taken back before their handoff to a shim
  std::map<std::string, TaskExit> early_exits_;  // and their exits, if they ended meanwhile
  std::unique_ptr<Monitor> monitor_;
};

}  // namespace

std::unique_ptr<TaskRunner> make_shim_runner(const AgentConfig& config, RunnerEvents events) {
  return std::make_unique<ShimRunner>(config, std::move(events));
}

}  // namespace k8s4r::agent
