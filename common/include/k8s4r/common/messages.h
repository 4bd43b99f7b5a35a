// The MQTT messages of the k8s4r wire contract, as C++ values, and their
// codecs. docs/protocol.md describes each message; proto-schemas/ holds the
// JSON Schema of each and example payloads that the tests feed both to a JSON
// Schema validator and to these codecs, so the two agree.
//
// parse_* never throws: input that is not JSON, not an object, over
// kMaxPayloadBytes, with a missing field, a wrong type, a value outside its
// set, or an identifier that could break a topic gives an Error naming the
// field. Unknown fields are ignored, so newer senders stay readable. null
// reads as absent for optional fields, since Go's encoding/json writes nil
// maps and slices as null and Go K8s4r agents must stay readable.
//
// encode writes compact JSON with the field names of the contract and omits
// optional fields that are not set. It trusts its input: ids are validated
// where topics are built (topics.h).
//
// Thread-safety: pure functions over values.
#pragma once

#include "k8s4r/common/result.h"
#include "k8s4r/common/rfc3339.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace k8s4r {

// Larger payloads are refused before parsing.
inline constexpr std::size_t kMaxPayloadBytes = 256 * 1024;
// logsTail carries the last 4 KiB of a task's output.
inline constexpr std::size_t kMaxLogsTailCharacters = 4096;
// A task's declared outputs: at most 4 KiB written compactly (as Kubernetes
// bounds a container's termination message and Tekton a task's results).
inline constexpr std::size_t kMaxTaskOutputsBytes = 4096;
// ... and nest at most this deep, so the report that carries them (and the
// Task and the cache entry that keep them) stays within the protocol's depth.
inline constexpr std::size_t kMaxTaskOutputsDepth = 32;

using StringMap = std::map<std::string, std::string>;

// ---- Register, Heartbeat ---------------------------------------------------

struct PlatformInfo {
  std::string os, arch, platform, platform_family, platform_version, kernel_version, kernel_arch;
  bool operator==(const PlatformInfo&) const = default;
};

struct CpuInfo {
  std::optional<std::int64_t> physical_cores, logical_cores;
  std::string model_name, vendor;
  std::optional<double> mhz, usage_percent;
  bool operator==(const CpuInfo&) const = default;
};

// Bytes, except usage_percent.
struct MemoryInfo {
  std::optional<std::int64_t> total, available, used, free, buffers, cached;
  std::optional<double> usage_percent;
  bool operator==(const MemoryInfo&) const = default;
};

// What the bridge copies into Robot.status.deviceInfo. Further keys that Go
// agents send (swap, disks, networkInterfaces, ...) are read past.
struct DeviceInfo {
  std::string hostname;
  PlatformInfo platform;
  CpuInfo cpu;
  MemoryInfo memory;
  bool operator==(const DeviceInfo&) const = default;
};

enum class TaskRunState { running, completed, failed };
std::string_view to_string(TaskRunState state);

// A task the agent has, as it tells the bridge on (re-)registering, so the
// bridge can reconcile after either side restarted.
struct RunningTask {
  std::string task_uid;
  TaskRunState state = TaskRunState::running;
  std::optional<std::int64_t> seq;  // the seq of the last status report sent
  bool operator==(const RunningTask&) const = default;
};

// k8s4r/register, agent -> bridge, QoS 1.
// What a robot's register or heartbeat had seen when the robot made it, so
// the manager judges its list of tasks by what the robot knew then, not by
// when the bridge happened to write it (a heartbeat delayed in the broker or
// the bridge must not read as a newer one that leaves a task out). Absent
// from Go K8s4r agents.
struct RobotKnowledge {
  // The newest TaskStatus seq the agent had drawn: a running Task whose seq
  // is at most this, and which the list leaves out, is not on the robot.
  std::optional<std::int64_t> report_seq;
  // The timestamp of the newest dispatch the agent had taken: a dispatched
  // Task sent no later than this, and left out, is not on the robot.
  std::optional<Timestamp> newest_dispatch;
  bool operator==(const RobotKnowledge&) const = default;
};

// What the robot's artifact store holds (docs/agent.md#artifacts), in a
// heartbeat: its fingerprint, count and size on every beat; the checksums
// themselves (the kMaxArtifactsListed most recently used) only while no
// heartbeat that carried them has been acknowledged, or when the bridge
// asks (Ack::resend_artifacts). Absent from agents without a store.
// How fetching one artifact ahead of need (a Prefetch) stands on the robot.
struct PrefetchState {
  std::string checksum;
  std::string state;            // Downloading, Downloaded, Failed
  std::string reason, message;  // Failed: DownloadFailed, NoRoom, ...
  bool operator==(const PrefetchState&) const = default;
};
inline constexpr std::size_t kMaxPrefetched = 16;

struct ArtifactsHeld {
  // 16 hex digits of the FNV-1a of the checksums held, sorted, one per
  // line, and of the prefetch states: the same, the same fingerprint.
  std::string fingerprint;
  std::int64_t count = 0, bytes = 0, max_bytes = 0;
  // "sha256:HEX" or "sha512:HEX", most recently used first; none: the
  // same as in the last beat acknowledged.
  std::optional<std::vector<std::string>> held;
  bool truncated = false;  // held lists fewer than count
  // Each artifact the robot was told to keep (Prefetch), sent with `held`
  // (and in its fingerprint), at most kMaxPrefetched.
  std::vector<PrefetchState> prefetch;
  bool operator==(const ArtifactsHeld&) const = default;
};
inline constexpr std::size_t kMaxArtifactsListed = 32;
// A content checksum as the store names it: "sha256:" and 64 lowercase hex
// digits, or "sha512:" and 128.
Result<void> check_artifact_digest(std::string_view text);

struct Register {
  std::string robot_id;
  std::string token;
  std::string agent_version;
  StringMap labels;
  std::optional<DeviceInfo> device_info;
  std::vector<RunningTask> running_tasks;
  // runningTasks was sent (our agent always sends it; Go K8s4r agents send
  // none): only then does a task missing from it mean the robot lost it.
  bool lists_running_tasks = true;
  std::optional<Timestamp> timestamp;  // absent from Go K8s4r agents
  RobotKnowledge knows;                // absent from Go K8s4r agents
  bool operator==(const Register&) const = default;
};

// k8s4r/heartbeat, agent -> bridge, QoS 1.
// Why the agent cannot store its state (storageError in heartbeat and
// presence); absent while it can.
struct StorageError {
  std::string reason;   // StorageFull or StorageError, as in the tasks it refuses meanwhile
  std::string message;  // the error, e.g. "cannot write /var/lib/k8s4r/state.log: No space left on device"
  bool operator==(const StorageError&) const = default;
};
inline constexpr std::size_t kMaxStorageErrorMessageCharacters = 1024;
// A heartbeat lists at most this many ended tasks (about 80 bytes each).
inline constexpr std::size_t kMaxEndedTasksListed = 1000;

struct Heartbeat {
  std::string robot_id;
  std::string token;
  std::optional<Timestamp> timestamp;      // absent from Go K8s4r agents
  std::vector<std::string> running_tasks;  // task uids
  bool lists_running_tasks = true;         // runningTasks was sent (Go K8s4r agents send null)
  // Tasks that ended on the robot whose final report the bridge has not
  // confirmed yet (their state and the seq of that report): the robot knows
  // how they ended, so none of them is lost.
  std::vector<RunningTask> ended_tasks;
  // More ended tasks wait for confirmation than a heartbeat lists
  // (kMaxEndedTasksListed): none of this robot's tasks is judged lost by its
  // absence meanwhile.
  bool ended_tasks_truncated = false;
  std::optional<DeviceInfo> device_info;  // Go K8s4r agents send it on every beat
  std::optional<StorageError> storage_error;
  RobotKnowledge knows;
  std::optional<ArtifactsHeld> artifacts;
  bool operator==(const Heartbeat&) const = default;
};

// ---- RegisterResponse --------------------------------------------------------

enum class RobotPhase { pending, online, offline, unknown };
std::string_view to_string(RobotPhase phase);  // "Pending", "Online", ...

// k8s4r/robots/{robotId}/response, bridge -> agent, QoS 1.
struct RegisterResponse {
  bool success = false;
  std::string robot_id;
  std::string message;
  std::optional<RobotPhase> phase;
  bool operator==(const RegisterResponse&) const = default;
};

// ---- Dispatch ------------------------------------------------------------------

enum class TaskDriver { exec, raw_exec, docker, java };
std::string_view to_string(TaskDriver driver);

struct ExecConfig {
  std::string command;
  std::vector<std::string> args;
  bool operator==(const ExecConfig&) const = default;
};

struct RestartPolicy {
  std::optional<std::int64_t> attempts;
  std::optional<std::chrono::nanoseconds> interval, delay;
  std::optional<std::string> mode;  // "fail" or "delay"
  bool operator==(const RestartPolicy&) const = default;
};

struct Artifact {
  std::string getter_source;
  StringMap getter_options;  // e.g. checksum: "sha256:HEX"
  std::string relative_dest;
  std::optional<std::string> getter_mode;  // "any", "file" or "dir"
  bool operator==(const Artifact&) const = default;
};

// What a task does while its robot is out of contact (Nomad's disconnect
// block): the agent (the task's shim, in fact) stops it after
// stop_on_robot_after without word from the bridge (0: never); the manager
// takes it for lost lost_after after its robot's last heartbeat, and
// replaces it only when `replace`. Unset fields take the defaults of the
// agent's and the manager's disconnect-stop-after (2m) and of
// docs/manager.md#partitions.
struct Disconnect {
  std::optional<std::chrono::nanoseconds> stop_on_robot_after, lost_after;
  std::optional<bool> replace;
  bool operator==(const Disconnect&) const = default;
};

// The parts of Task.spec the agent acts on. `raw` keeps the whole spec as
// received, so nothing is lost when it is relayed (resources, constraints,
// docker and java configs).
struct TaskSpec {
  std::string job_name, task_group_name, name, target_robot, user;
  TaskDriver driver = TaskDriver::exec;
  std::optional<ExecConfig> exec_config;
  StringMap env;
  std::optional<std::chrono::nanoseconds> timeout, kill_timeout;
  std::optional<RestartPolicy> restart_policy;
  std::optional<Disconnect> disconnect;
  std::vector<Artifact> artifacts;
  nlohmann::json raw = nlohmann::json::object();
  bool operator==(const TaskSpec&) const = default;
};

struct TaskMetadata {
  std::string name, namespace_, uid;
  std::optional<std::int64_t> generation;
  bool operator==(const TaskMetadata&) const = default;
};

struct DispatchedTask {
  std::string api_version, kind;
  TaskMetadata metadata;
  std::optional<TaskSpec> spec;  // always set for create
  bool operator==(const DispatchedTask&) const = default;
};

enum class DispatchAction { create, remove };
std::string_view to_string(DispatchAction action);  // "create", "delete"

// k8s4r/robots/{robotId}/tasks/dispatch, bridge -> agent, QoS 1.
// create: the whole task, with a spec whose driver has its config.
// delete: only task.metadata.uid is needed.
struct Dispatch {
  DispatchAction action = DispatchAction::create;
  DispatchedTask task;
  // When the bridge sent it (the Task's status.dispatchedAt); the robot
  // echoes the newest it has taken as newestDispatch. Absent from a Go K8s4r
  // server.
  std::optional<Timestamp> timestamp;
  // The seq of the latest report from this robot the Task holds: sent with a
  // Task that already runs there (a resync after the robot registers). An
  // agent with no record of the task lost its state: it says so, and never
  // runs the task again.
  std::optional<std::int64_t> reported_seq;
  // The sending bridge replica's epoch for the robot's slot (docs/bridge.md
  // #replicas): an agent refuses a dispatch whose epoch is below the newest
  // it has seen, so a replica that lost the slot cannot act. Absent from a
  // single bridge and from Go K8s4r: never refused for that.
  std::optional<std::int64_t> epoch;
  bool operator==(const Dispatch&) const = default;
};

// ---- TaskStatus ------------------------------------------------------------------

// k8s4r/robots/{robotId}/tasks/{taskUid}/status, agent -> bridge, QoS 1.
struct TaskStatus {
  std::string task_uid;
  std::string robot_id;  // Go K8s4r agents send it as robotName
  TaskRunState state = TaskRunState::running;
  std::optional<std::int64_t> exit_code;  // 128+N when ended by signal N
  std::optional<std::int64_t> signal;     // the signal number that ended the process
  std::string reason;                     // machine-readable: Timeout, Cancelled, ...
  std::string message;                    // for people
  std::string event;                      // what just happened: Started, Restarting, ...
  std::optional<Timestamp> started_at, finished_at, updated_at;
  std::int64_t restart_count = 0;
  // Strictly increasing per task, across agent restarts; absent only from Go
  // K8s4r agents.
  std::optional<std::int64_t> seq;
  std::string logs_tail;  // at most kMaxLogsTailCharacters
  // What a completed task declared in its outputs file (an object; see
  // task_outputs_from); absent when it wrote none.
  std::optional<nlohmann::json> outputs;
  bool operator==(const TaskStatus&) const = default;
};

// A task's declared outputs from the value it wrote: a JSON object, its
// null members dropped at every level (a JSON merge patch of the Task's
// status would drop them, so the value the agent reports, the Task holds and
// the cache stores is the same), at most kMaxTaskOutputsBytes written
// compactly, at most kMaxTaskOutputsDepth deep. An error says why not.
Result<nlohmann::json> task_outputs_from(nlohmann::json value);
// The same from the text of the file a task wrote (itself at most
// kMaxTaskOutputsBytes).
Result<nlohmann::json> parse_task_outputs(std::string_view text);

// ---- Presence ----------------------------------------------------------------------

// k8s4r/robots/{robotId}/presence, agent (and the broker, as the agent's last
// will) -> bridge, QoS 1, retained.
struct Presence {
  std::string robot_id;
  bool online = false;
  Timestamp timestamp;
  std::optional<StorageError> storage_error;  // for whoever tails MQTT; the bridge reads it from heartbeats
  bool operator==(const Presence&) const = default;
};

// ---- Ack ----------------------------------------------------------------------------

// What became of one status report: recorded in its Task (or a report of
// the same task with a seq as high is), or refused for good (reason says
// why: UnknownTask, WrongRobot, TaskFinished, Invalid).
enum class ReportResult { recorded, refused };
std::string_view to_string(ReportResult result);

struct ReportAck {
  std::string task_uid;
  std::int64_t seq = 0;
  ReportResult result = ReportResult::recorded;
  std::string reason;   // refused only
  std::string message;  // refused only, for people
  bool operator==(const ReportAck&) const = default;
};

// k8s4r/robots/{robotId}/acks, bridge -> agent, QoS 0: the end-to-end
// acknowledgement of what a robot sent. `reports` answers status reports
// once the bridge has recorded them in Kubernetes (or will never);
// `heartbeat` echoes the timestamp of a heartbeat the bridge received, so
// the robot knows the bridge hears it.
struct Ack {
  std::string robot_id;
  std::vector<ReportAck> reports;
  std::optional<Timestamp> heartbeat;
  std::optional<Timestamp> timestamp;
  // The Robot does not hold the artifacts fingerprint the robot's heartbeat
  // says (the bridge lost the list it carried): send the list again.
  bool resend_artifacts = false;
  // The epoch of the replica that owns the robot's slot (Dispatch::epoch):
  // how a robot learns of a new owner before its first dispatch.
  std::optional<std::int64_t> epoch;
  bool operator==(const Ack&) const = default;
};
// Epochs are JSON-safe integers from 1 to 2^53.
inline constexpr std::int64_t kMaxEpochValue = std::int64_t{1} << 53;
// At most this many reports in one Ack (about 100 bytes each).
inline constexpr std::size_t kMaxAcksPerMessage = 1000;

// ---- Prefetch ---------------------------------------------------------------------------

// k8s4r/robots/{robotId}/artifacts, bridge -> agent, QoS 1, retained: every
// artifact the robot is to keep in its store ahead of need (ArtifactCache
// resources that match it), the whole list each time; an empty list lets go
// of them all. The robot fetches what it does not hold and keeps these from
// eviction; how each stands goes in its heartbeats (ArtifactsHeld::prefetch).
struct PrefetchArtifact {
  std::string source;    // http or https URL
  std::string checksum;  // check_artifact_digest
  std::optional<std::int64_t> size;
  bool operator==(const PrefetchArtifact&) const = default;
};
struct Prefetch {
  std::string robot_id;
  std::vector<PrefetchArtifact> artifacts;  // at most kMaxPrefetched
  std::optional<Timestamp> timestamp;
  bool operator==(const Prefetch&) const = default;
};

// ---- Codecs ----------------------------------------------------------------------------

Result<Register> parse_register(std::string_view payload);
Result<Heartbeat> parse_heartbeat(std::string_view payload);
Result<RegisterResponse> parse_register_response(std::string_view payload);
Result<Dispatch> parse_dispatch(std::string_view payload);
Result<TaskStatus> parse_task_status(std::string_view payload);
Result<Presence> parse_presence(std::string_view payload);
Result<Ack> parse_ack(std::string_view payload);
Result<Prefetch> parse_prefetch(std::string_view payload);

std::string encode(const Register& message);
std::string encode(const Heartbeat& message);
std::string encode(const RegisterResponse& message);
std::string encode(const Dispatch& message);
std::string encode(const TaskStatus& message);
std::string encode(const Presence& message);
std::string encode(const Ack& message);
std::string encode(const Prefetch& message);

// The same as encode, as a JSON value (to embed or compare).
nlohmann::json to_json_value(const Register& message);
nlohmann::json to_json_value(const Heartbeat& message);
// The deviceInfo object of a Register or Heartbeat, as to_json_value writes it there.
nlohmann::json to_json_value(const DeviceInfo& info);
nlohmann::json to_json_value(const RegisterResponse& message);
nlohmann::json to_json_value(const Dispatch& message);
nlohmann::json to_json_value(const TaskStatus& message);
nlohmann::json to_json_value(const Presence& message);
nlohmann::json to_json_value(const Ack& message);
nlohmann::json to_json_value(const Prefetch& message);

}  // namespace k8s4r
