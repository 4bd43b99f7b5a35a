// One task as the agent holds it, and the table of them all, shared by the
// parts of the agent (dispatch intake, lifecycle, retention, recovery) on
// the agent's loop thread.
#pragma once

#include "k8s4r/agent/kill_schedule.h"
#include "k8s4r/agent/process.h"
#include "k8s4r/agent/restart_tracker.h"
#include "k8s4r/common/messages.h"

#include <nlohmann/json.hpp>

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace k8s4r::agent {

// accepted:  waiting for the commit that makes its acceptance durable
// fetching:  its artifacts are being downloaded
// starting:  its run was handed to the runner, which has not answered yet
// running:   a run of it is alive
// waiting_restart: its run ended and the restart policy's delay runs
// finished:  its final report is made; only that is kept
enum class Phase { accepted, fetching, starting, running, waiting_restart, finished };

// Who a task runs as when the agent (root) switches to another user.
struct RunAs {
  uid_t uid;
  gid_t gid;
  std::string name;
};

struct AgentTask {
  std::string uid, name;
  TaskSpec spec;
  nlohmann::json dispatch;
  Phase phase = Phase::fetching;
  RestartTracker restarts{std::nullopt};
  std::int64_t earlier_restarts = 0;  // made before the agent restarted
  std::optional<RunAs> run_as;        // spec.user or task-user, resolved when accepted (agent running as root)
  TaskProcess process;                // process.pid is 0 while none runs
  // Set when the agent stopped it: an exit already on its way to the loop
  // (or a start not yet answered) must then not lead to a restart.
  std::optional<StopReason> stop_requested;
  std::uint64_t restart_timer = 0;
  // Held before a run (its first, or a restart): the robot had been out of
  // contact too long, so it waits for the bridge to answer a heartbeat
  // numbered this or later (TaskLifecycle::on_contact); failed, reason
  // Disconnected, if none is answered within its window.
  std::optional<std::uint64_t> held_for_beat;
  std::uint64_t hold_timer = 0;
  std::optional<Timestamp> started_at;
  std::optional<TaskStatus> last_report;
  std::int64_t last_seq = 0;
  std::uint64_t finished_order = 0;  // 0 until finished; then grows, across restarts

  bool active() const { return phase != Phase::finished; }
  std::int64_t restart_count() const { return earlier_restarts + restarts.restart_count(); }
};

using TaskTable = std::map<std::string, AgentTask>;

}  // namespace k8s4r::agent
