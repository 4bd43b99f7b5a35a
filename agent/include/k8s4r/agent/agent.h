// The agent daemon: everything between the MQTT link and the task processes.
//
// It connects (reconnecting with backoff), announces presence, registers
// until the bridge answers, heartbeats, and turns dispatches into tasks: fetch
// artifacts, start the process under the Monitor, apply the restart policy,
// and report every state change with a seq that grows across restarts. The
// StateStore remembers every task and every report until the broker
// acknowledged it, so after a crash the agent adopts tasks still running and
// reports the rest failed with reason AgentRestarted; no task runs twice.
//
// Durability is group-committed: changes are staged as the loop handles a
// batch of messages, and one commit (one fdatasync) after the batch makes them
// durable. A task starts, and a report is published, only after the commit
// that holds it. When storage fails, no new task starts (each is reported
// failed, reason StorageFull or StorageError) and reports go out from memory,
// so the broker still gets everything while the disk cannot.
//
// Threading: one thread, the EventLoop's, runs all of this. MQTT callbacks,
// process exits and finished downloads arrive on other threads and are posted
// to the loop. Construct, start() and shutdown() on the loop's thread (or
// before run()).
// Ownership: the Agent owns the link, the monitor, the journal and the queue.
#pragma once

#include "k8s4r/agent/artifacts.h"
#include "k8s4r/agent/config.h"
#include "k8s4r/agent/monitor.h"
#include "k8s4r/agent/restart_tracker.h"
#include "k8s4r/agent/spare_shims.h"
#include "k8s4r/agent/state_store.h"
#include "k8s4r/agent/task_cgroups.h"
#include "k8s4r/common/messages.h"
#include "k8s4r/daemon/event_loop.h"
#include "k8s4r/daemon/inbox.h"
#include "k8s4r/mqtt/link.h"

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

namespace k8s4r::agent {

// What the agent needs from the world besides MQTT; main() fills it.
struct AgentHooks {
  // sd_notify(3) state strings: "READY=1", "WATCHDOG=1", "STOPPING=1", "STATUS=...".
  std::function<void(const std::string&)> notify;
  // Half the systemd watchdog timeout, or nullopt when the watchdog is off.
  std::optional<std::chrono::microseconds> watchdog_interval;
};

class Agent {
 public:
  using LinkFactory = std::function<std::unique_ptr<mqtt::Link>(mqtt::LinkEvents)>;

  // Opens the work dir, the journal and the report queue; throws
  // std::runtime_error naming what is unusable.
  Agent(AgentConfig config, daemon::EventLoop& loop, LinkFactory make_link, AgentHooks hooks = {});
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Restores the journal's tasks, then connects.
  void start();
  // Stops accepting tasks, stops the running ones (SIGTERM, then SIGKILL),
  // reports them, flushes the report queue (bounded wait), says offline and
  // disconnects; then stops the loop.
  void shutdown();

 private:
  // accepted: waiting for the commit that makes its acceptance durable.
  enum class Phase { accepted, fetching, running, waiting_restart, finished };
  struct RunAs {
    uid_t uid;
    gid_t gid;
    std::string name;
  };
  struct Task {
    std::string uid, name;
    TaskSpec spec;
    nlohmann::json dispatch;
    Phase phase = Phase::fetching;
    RestartTracker restarts{std::nullopt};
    std::int64_t earlier_restarts = 0;  // made before the agent restarted
    std::optional<RunAs> run_as;        // spec.user or task-user, resolved when accepted (agent running as root)
    TaskProcess process;                // process.pid is 0 while none runs
    // Set when the agent stopped it: an exit already on its way to the loop
    // must then not lead to a restart.
    std::optional<StopReason> stop_requested;
    daemon::EventLoop::TimerId restart_timer = 0;
    std::optional<Timestamp> started_at;
    std::optional<TaskStatus> last_report;
    std::int64_t last_seq = 0;
    std::uint64_t finished_order = 0;  // 0 until finished; then grows, across restarts
  };

  // Takes WORK_DIR/agent.lock (flock) or throws: one agent per work dir.
  void lock_work_dir();

  // Connection
  void feed_watchdog();
  void connect();
  void on_connected();
  void subscribe();
  void on_connect_failed(const std::string& cause);
  void on_connection_lost(const std::string& cause);
  void schedule_reconnect();
  void send_register();
  void send_heartbeat();
  // Why storage fails, for heartbeat and presence; none while it works.
  std::optional<StorageError> storage_error() const;
  void tell_storage_state();
  void on_message(const std::string& topic, const std::string& payload);
  void on_register_response(const std::string& payload);

  // Tasks
  void on_dispatch(const std::string& payload);
  void refuse_dispatch(const std::string& payload, const Error& error);
  void create_task(const Dispatch& dispatch);
  // Gives the task's directory to its user once the agent has put its
  // artifacts there; false (and the task finished) when it cannot.
  bool hand_over(Task& task);
  void remove_task_dir(const std::string& uid);
  // Who a task runs as: `run_as` when the agent (root) switches to another
  // user, and that user's uid (else the agent's own). An Error says why the
  // task's user cannot be had.
  struct TaskUser {
    std::optional<RunAs> run_as;
    uid_t uid;
  };
  Result<TaskUser> user_of(const TaskSpec& spec) const;
  void begin(Task& task);
  void start_process(Task& task);
  void on_artifacts(const std::string& uid, Result<void> outcome);
  void on_exit(const TaskExit& exit);
  void stop(Task& task, StopReason reason);
  void finish(Task& task, TaskStatus status);
  void restore();
  // A task that was running when the agent last stopped and whose shim has
  // ended since: how it ended, from the shim's exit record.
  void restore_ended(Task& task, const StoredTask& entry);
  void kill_orphans();
  void prepare_spare_shim();
  // Task cgroups and the task shim, as configured; throws when task-cgroups
  // is on and cgroups cannot be used, or the shim is missing.
  void set_up_containment();
  // The shim a new run of `task` starts under (its cgroup made), or an Error.
  Result<ShimSpec> shim_for(const Task& task);
  // Exit records of runs whose end is recorded in state.log: removed after
  // each commit; at start, every record no task needs.
  void remove_exit_records(bool at_start);
  std::string task_dir(const std::string& uid) const;
  std::string task_file(const std::string& uid, const char* name) const;
  std::string final_logs_tail(const std::string& uid) const;
  std::chrono::nanoseconds kill_timeout_of(const Task& task) const;
  ProcessSpec process_spec(const Task& task) const;

  // Reports
  void report(Task& task, TaskStatus status);
  void drain();
  void publish_presence(bool online, mqtt::Completion done);
  void check_shutdown_progress();
  void finish_shutdown();
  // Durability: a commit after the current batch (urgent), or within a
  // short delay (acknowledgements, which only save a resend after a crash).
  void request_commit(bool urgent = true);
  void commit();
  // Finished tasks: the most recent stay whole (in tasks_, with their
  // directories); older ones only in the store, until the retention ends.
  void prune_finished();
  void schedule_retention();
  void forget_expired();
  std::chrono::nanoseconds run_clock() const;
  Task* recall_finished(const std::string& uid);

  AgentConfig config_;
  daemon::EventLoop& loop_;
  AgentHooks hooks_;
  int lock_fd_ = -1;  // WORK_DIR/agent.lock, held while the agent lives
  std::unique_ptr<StateStore> store_;
  bool commit_posted_ = false;
  daemon::EventLoop::TimerId lazy_commit_timer_ = 0;
  std::vector<std::string> awaiting_commit_;    // accepted tasks, to start once durable
  std::optional<std::string> storage_failure_;  // why the last commit failed; unset while commits succeed
  std::map<std::string, Task> tasks_;
  std::unique_ptr<ArtifactWorker> artifacts_;
  std::unique_ptr<Monitor> monitor_;
  std::optional<TaskCgroups> cgroups_;  // unset: tasks are contained by process group and the shim only
  std::string shim_path_;
  std::unique_ptr<SpareShims> spares_;          // one shim kept ready, so a task's start need not wait for its exec
  std::string exits_dir_;                       // WORK_DIR/exits (0700): the shims' exit records
  std::vector<std::string> exit_records_done_;  // read; removable once the next commit holds the end
  std::unique_ptr<mqtt::Link> link_;
  // Backpressure on received messages: a burst waits in the broker, not here.
  daemon::Inbox inbox_;

  bool connected_ = false;
  bool ready_notified_ = false;
  bool registered_ = false;
  std::uint64_t generation_ = 0;  // counts connections; stale completions are ignored
  std::chrono::milliseconds reconnect_backoff_{0}, register_backoff_{0};
  daemon::EventLoop::TimerId reconnect_timer_ = 0, register_timer_ = 0, heartbeat_timer_ = 0, retry_drain_timer_ = 0;
  std::set<std::uint64_t> in_flight_;
  std::uint64_t last_finished_order_ = 0;
  // The run clock (see StateStore::clock) is the store's at start plus the
  // steady time since.
  std::chrono::nanoseconds run_clock_at_start_{0};
  std::chrono::steady_clock::time_point started_at_ = std::chrono::steady_clock::now();
  daemon::EventLoop::TimerId retention_timer_ = 0;
  Timestamp connected_at_{};

  bool shutting_down_ = false;
  bool shutdown_finished_ = false;
  std::optional<daemon::EventLoop::Clock::time_point> flush_deadline_;
};

}  // namespace k8s4r::agent
