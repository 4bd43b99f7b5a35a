#include "k8s4r/common/messages.h"

#include "json_reader.h"

#include "k8s4r/common/duration.h"
#include "k8s4r/common/identifiers.h"
#include "k8s4r/common/json_depth.h"

#include <algorithm>
#include <array>
#include <utility>

namespace k8s4r {
namespace {

using detail::ObjectReader;
using nlohmann::json;

// ---- enum names ------------------------------------------------------------

template <class Enum, std::size_t N>
std::string_view name_of(const std::array<std::pair<Enum, std::string_view>, N>& names, Enum value) {
  for (const auto& [candidate, name] : names) {
    if (candidate == value) return name;
  }
  return "unknown";
}

template <class Enum, std::size_t N>
Enum value_of(const std::array<std::pair<Enum, std::string_view>, N>& names, std::string_view name) {
  for (const auto& [value, candidate] : names) {
    if (candidate == name) return value;
  }
  return names.front().first;  // unreachable: callers read names with required_enum
}

constexpr std::array<std::pair<TaskRunState, std::string_view>, 3> kTaskRunStates{{
    {TaskRunState::running, "running"},
    {TaskRunState::completed, "completed"},
    {TaskRunState::failed, "failed"},
}};
constexpr std::array<std::pair<RobotPhase, std::string_view>, 4> kRobotPhases{{
    {RobotPhase::pending, "Pending"},
    {RobotPhase::online, "Online"},
    {RobotPhase::offline, "Offline"},
    {RobotPhase::unknown, "Unknown"},
}};
constexpr std::array<std::pair<TaskDriver, std::string_view>, 4> kTaskDrivers{{
    {TaskDriver::exec, "exec"},
    {TaskDriver::raw_exec, "raw_exec"},
    {TaskDriver::docker, "docker"},
    {TaskDriver::java, "java"},
}};
constexpr std::array<std::pair<DispatchAction, std::string_view>, 2> kDispatchActions{{
    {DispatchAction::create, "create"},
    {DispatchAction::remove, "delete"},
}};
constexpr std::array<std::pair<ReportResult, std::string_view>, 2> kReportResults{{
    {ReportResult::recorded, "recorded"},
    {ReportResult::refused, "refused"},
}};

Result<void> check_identifier(std::string_view value) { return validate_identifier(value); }

bool is_lower_hex(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// An artifact's source a robot fetches on its own: http or https, no
// whitespace or control character (it is kept one per line).
Result<void> check_fetch_url(std::string_view value) {
  if (value.rfind("http://", 0) != 0 && value.rfind("https://", 0) != 0)
    return Error{"", "must be an http or https URL"};
  if (std::any_of(value.begin(), value.end(), [](char c) { return static_cast<unsigned char>(c) <= ' ' || c == 0x7f; }))
    return Error{"", "must hold no space or control character"};
  return ok();
}

Result<void> check_fingerprint(std::string_view value) {
  if (value.size() != 16 || !is_lower_hex(value)) return Error{"", "must be 16 lowercase hex digits"};
  return ok();
}

Result<void> check_not_empty(std::string_view value) {
  if (value.empty()) return Error{"", "must not be empty"};
  return ok();
}

// What reaches execve: a C string, which a NUL would cut short (the task
// would run something else than the spec says).
Result<void> check_no_nul(std::string_view value) {
  if (value.find('\0') != std::string_view::npos) return Error{"", "must not contain a NUL character"};
  return ok();
}

Result<void> check_command(std::string_view value) {
  if (auto checked = check_not_empty(value); !checked) return checked;
  return check_no_nul(value);
}

// An environment variable's name becomes NAME=value: a '=' in it would set
// another variable than the one named (FOO=BAR=x is FOO, with BAR=x).
Result<void> check_env_name(std::string_view name) {
  if (name.empty()) return Error{"", "names a variable with an empty name"};
  if (name.find('=') != std::string_view::npos)
    return Error{"", "name '" + std::string(name) + "' contains '=': it would set another variable"};
  if (name.find('\0') != std::string_view::npos) return Error{"", "a name contains a NUL character"};
  return ok();
}

std::string format_time(Timestamp time) { return format_rfc3339(time, TimePrecision::as_needed); }

json task_spec_json(const TaskSpec& spec);

// ---- readers -----------------------------------------------------------------

DeviceInfo read_device_info(ObjectReader& r) {
  DeviceInfo info;
  info.hostname = r.optional_string("hostname").value_or("");
  r.optional_object("platform", [&](ObjectReader& p) {
    info.platform.os = p.optional_string("os").value_or("");
    info.platform.arch = p.optional_string("arch").value_or("");
    info.platform.platform = p.optional_string("platform").value_or("");
    info.platform.platform_family = p.optional_string("platformFamily").value_or("");
    info.platform.platform_version = p.optional_string("platformVersion").value_or("");
    info.platform.kernel_version = p.optional_string("kernelVersion").value_or("");
    info.platform.kernel_arch = p.optional_string("kernelArch").value_or("");
  });
  r.optional_object("cpu", [&](ObjectReader& c) {
    info.cpu.physical_cores = c.optional_integer("physicalCores", 0);
    info.cpu.logical_cores = c.optional_integer("logicalCores", 0);
    info.cpu.model_name = c.optional_string("modelName").value_or("");
    info.cpu.vendor = c.optional_string("vendor").value_or("");
    info.cpu.mhz = c.optional_number("mhz");
    info.cpu.usage_percent = c.optional_number("usagePercent");
  });
  r.optional_object("memory", [&](ObjectReader& m) {
    info.memory.total = m.optional_integer("total", 0);
    info.memory.available = m.optional_integer("available", 0);
    info.memory.used = m.optional_integer("used", 0);
    info.memory.free = m.optional_integer("free", 0);
    info.memory.buffers = m.optional_integer("buffers", 0);
    info.memory.cached = m.optional_integer("cached", 0);
    info.memory.usage_percent = m.optional_number("usagePercent");
  });
  return info;
}

std::optional<DeviceInfo> read_optional_device_info(ObjectReader& r) {
  std::optional<DeviceInfo> info;
  r.optional_object("deviceInfo", [&](ObjectReader& d) { info = read_device_info(d); });
  return info;
}

std::optional<StorageError> read_optional_storage_error(ObjectReader& r) {
  std::optional<StorageError> error;
  r.optional_object("storageError", [&](ObjectReader& e) {
    error = StorageError{e.required_enum("reason", {"StorageFull", "StorageError"}),
                         e.required_string("message", nullptr, kMaxStorageErrorMessageCharacters)};
  });
  return error;
}

TaskRunState read_task_run_state(ObjectReader& r) {
  return value_of(kTaskRunStates, r.required_enum("state", {"running", "completed", "failed"}));
}

// {taskUid, state, seq}: a task a register or a heartbeat names.
RunningTask read_running_task(ObjectReader& t, bool seq_required) {
  RunningTask task;
  task.task_uid = t.required_string("taskUid", check_identifier);
  task.state = read_task_run_state(t);
  task.seq = seq_required ? std::optional(t.required_integer("seq", 1)) : t.optional_integer("seq", 1);
  return task;
}

TaskSpec read_task_spec(ObjectReader& r) {
  TaskSpec spec;
  spec.raw = r.object();
  spec.job_name = r.optional_string("jobName").value_or("");
  spec.task_group_name = r.optional_string("taskGroupName").value_or("");
  spec.name = r.optional_string("name").value_or("");
  spec.driver = value_of(kTaskDrivers, r.required_enum("driver", {"exec", "raw_exec", "docker", "java"}));
  r.optional_object("config", [&](ObjectReader& config) {
    config.optional_object("execConfig", [&](ObjectReader& exec) {
      ExecConfig exec_config;
      exec_config.command = exec.required_string("command", check_command);
      exec_config.args = exec.optional_string_array("args", check_no_nul);
      spec.exec_config = std::move(exec_config);
    });
  });
  if ((spec.driver == TaskDriver::exec || spec.driver == TaskDriver::raw_exec) && !spec.exec_config && !r.failed()) {
    r.fail("config.execConfig", "is required for driver " + std::string(to_string(spec.driver)));
  }
  spec.target_robot = r.optional_string("targetRobot").value_or("");
  spec.env = r.optional_string_map("env");
  for (const auto& [name, value] : spec.env) {
    if (auto checked = check_env_name(name); !checked) {
      r.fail("env", checked.error().message);
      break;
    }
    if (auto checked = check_no_nul(value); !checked) {
      r.fail("env." + name, checked.error().message);
      break;
    }
  }
  spec.user = r.optional_string("user").value_or("");
  spec.timeout = r.optional_duration("timeout");
  spec.kill_timeout = r.optional_duration("killTimeout");
  r.optional_object("restartPolicy", [&](ObjectReader& p) {
    RestartPolicy policy;
    policy.attempts = p.optional_integer("attempts", 0, 2147483647);  // an int32, as in the CRD
    policy.interval = p.optional_duration("interval");
    policy.delay = p.optional_duration("delay");
    policy.mode = p.optional_enum("mode", {"fail", "delay"});
    spec.restart_policy = std::move(policy);
  });
  r.optional_object("disconnect", [&](ObjectReader& d) {
    Disconnect disconnect;
    disconnect.stop_on_robot_after = d.optional_duration("stopOnRobotAfter");
    disconnect.lost_after = d.optional_duration("lostAfter");
    disconnect.replace = d.optional_bool("replace");
    spec.disconnect = std::move(disconnect);
  });
  r.optional_object_array("artifacts", [&](ObjectReader& a) {
    Artifact artifact;
    artifact.getter_source = a.required_string("getterSource", check_not_empty);
    artifact.getter_options = a.optional_string_map("getterOptions");
    artifact.relative_dest = a.optional_string("relativeDest").value_or("");
    artifact.getter_mode = a.optional_enum("getterMode", {"any", "file", "dir"});
    spec.artifacts.push_back(std::move(artifact));
  });
  r.optional_raw_object("resources");
  r.optional_raw_array("constraints");
  // Keep raw in the form encode writes ("1h30m" becomes "1h30m0s"), so a
  // spec reads the same before and after a relay.
  if (!r.failed()) spec.raw = task_spec_json(spec);
  return spec;
}

// ---- writers -------------------------------------------------------------------

void put_string(json& j, const char* key, const std::string& value) {
  if (!value.empty()) j[key] = value;
}

template <class T>
void put_optional(json& j, const char* key, const std::optional<T>& value) {
  if (value) j[key] = *value;
}

void put_time(json& j, const char* key, const std::optional<Timestamp>& value) {
  if (value) j[key] = format_time(*value);
}

void put_storage_error(json& j, const std::optional<StorageError>& error) {
  if (error) j["storageError"] = {{"reason", error->reason}, {"message", error->message}};
}

void put_duration(json& j, const char* key, const std::optional<std::chrono::nanoseconds>& value) {
  if (value) {
    j[key] = format_go_duration(*value);
  } else {
    j.erase(key);
  }
}

json device_info_json(const DeviceInfo& info) {
  json j = json::object();
  put_string(j, "hostname", info.hostname);
  json platform = json::object();
  put_string(platform, "os", info.platform.os);
  put_string(platform, "arch", info.platform.arch);
  put_string(platform, "platform", info.platform.platform);
  put_string(platform, "platformFamily", info.platform.platform_family);
  put_string(platform, "platformVersion", info.platform.platform_version);
  put_string(platform, "kernelVersion", info.platform.kernel_version);
  put_string(platform, "kernelArch", info.platform.kernel_arch);
  if (!platform.empty()) j["platform"] = platform;
  json cpu = json::object();
  put_optional(cpu, "physicalCores", info.cpu.physical_cores);
  put_optional(cpu, "logicalCores", info.cpu.logical_cores);
  put_string(cpu, "modelName", info.cpu.model_name);
  put_string(cpu, "vendor", info.cpu.vendor);
  put_optional(cpu, "mhz", info.cpu.mhz);
  put_optional(cpu, "usagePercent", info.cpu.usage_percent);
  if (!cpu.empty()) j["cpu"] = cpu;
  json memory = json::object();
  put_optional(memory, "total", info.memory.total);
  put_optional(memory, "available", info.memory.available);
  put_optional(memory, "used", info.memory.used);
  put_optional(memory, "free", info.memory.free);
  put_optional(memory, "buffers", info.memory.buffers);
  put_optional(memory, "cached", info.memory.cached);
  put_optional(memory, "usagePercent", info.memory.usage_percent);
  if (!memory.empty()) j["memory"] = memory;
  return j;
}

// Typed fields win over `raw`; fields the struct does not model pass through.
json task_spec_json(const TaskSpec& spec) {
  json j = spec.raw.is_object() ? spec.raw : json::object();
  const auto put_or_erase = [&j](const char* key, const std::string& value) {
    if (value.empty()) {
      j.erase(key);
    } else {
      j[key] = value;
    }
  };
  put_or_erase("jobName", spec.job_name);
  put_or_erase("taskGroupName", spec.task_group_name);
  put_or_erase("name", spec.name);
  j["driver"] = to_string(spec.driver);
  if (spec.exec_config) {
    json exec = {{"command", spec.exec_config->command}};
    if (!spec.exec_config->args.empty()) exec["args"] = spec.exec_config->args;
    if (!j["config"].is_object()) j["config"] = json::object();
    j["config"]["execConfig"] = exec;
  } else if (j.contains("config") && j["config"].is_object()) {
    j["config"].erase("execConfig");
  }
  put_or_erase("targetRobot", spec.target_robot);
  if (spec.env.empty()) {
    j.erase("env");
  } else {
    j["env"] = spec.env;
  }
  put_or_erase("user", spec.user);
  put_duration(j, "timeout", spec.timeout);
  put_duration(j, "killTimeout", spec.kill_timeout);
  if (spec.restart_policy) {
    json policy = json::object();
    put_optional(policy, "attempts", spec.restart_policy->attempts);
    put_duration(policy, "interval", spec.restart_policy->interval);
    put_duration(policy, "delay", spec.restart_policy->delay);
    put_optional(policy, "mode", spec.restart_policy->mode);
    j["restartPolicy"] = policy;
  } else {
    j.erase("restartPolicy");
  }
  if (spec.disconnect) {
    json disconnect = json::object();
    put_duration(disconnect, "stopOnRobotAfter", spec.disconnect->stop_on_robot_after);
    put_duration(disconnect, "lostAfter", spec.disconnect->lost_after);
    put_optional(disconnect, "replace", spec.disconnect->replace);
    j["disconnect"] = disconnect;
  } else {
    j.erase("disconnect");
  }
  if (spec.artifacts.empty()) {
    j.erase("artifacts");
  } else {
    json artifacts = json::array();
    for (const Artifact& artifact : spec.artifacts) {
      json a = {{"getterSource", artifact.getter_source}};
      if (!artifact.getter_options.empty()) a["getterOptions"] = artifact.getter_options;
      put_string(a, "relativeDest", artifact.relative_dest);
      put_optional(a, "getterMode", artifact.getter_mode);
      artifacts.push_back(std::move(a));
    }
    j["artifacts"] = std::move(artifacts);
  }
  return j;
}

}  // namespace

std::string_view to_string(TaskRunState state) { return name_of(kTaskRunStates, state); }
std::string_view to_string(RobotPhase phase) { return name_of(kRobotPhases, phase); }
std::string_view to_string(TaskDriver driver) { return name_of(kTaskDrivers, driver); }
std::string_view to_string(DispatchAction action) { return name_of(kDispatchActions, action); }
std::string_view to_string(ReportResult result) { return name_of(kReportResults, result); }

// ---- parse -------------------------------------------------------------------------

namespace {

std::optional<ArtifactsHeld> read_artifacts_held(ObjectReader& r) {
  ArtifactsHeld held;
  const bool present = r.optional_object("artifacts", [&](ObjectReader& a) {
    held.fingerprint = a.required_string("fingerprint", check_fingerprint);
    held.count = a.required_integer("count", 0);
    held.bytes = a.required_integer("bytes", 0);
    held.max_bytes = a.optional_integer("maxBytes", 0).value_or(0);
    if (a.object().contains("held") && !a.object().at("held").is_null())
      held.held = a.optional_string_array("held", check_artifact_digest, kMaxArtifactsListed);
    held.truncated = a.optional_bool("truncated").value_or(false);
    a.optional_object_array(
        "prefetch",
        [&](ObjectReader& p) {
          PrefetchState state;
          state.checksum = p.required_string("checksum", check_artifact_digest);
          state.state = p.required_enum("state", {"Downloading", "Downloaded", "Failed"});
          state.reason = p.optional_string("reason", nullptr, 64).value_or("");
          state.message = p.optional_string("message", nullptr, 1024).value_or("");
          held.prefetch.push_back(std::move(state));
        },
        kMaxPrefetched);
  });
  if (!present) return std::nullopt;
  return held;
}

void put_artifacts_held(json& j, const std::optional<ArtifactsHeld>& held) {
  if (!held) return;
  json a = {{"fingerprint", held->fingerprint}, {"count", held->count}, {"bytes", held->bytes}};
  if (held->max_bytes) a["maxBytes"] = held->max_bytes;
  if (held->held) a["held"] = *held->held;
  if (held->truncated) a["truncated"] = true;
  if (!held->prefetch.empty()) {
    json states = json::array();
    for (const PrefetchState& state : held->prefetch) {
      json entry = {{"checksum", state.checksum}, {"state", state.state}};
      put_string(entry, "reason", state.reason);
      put_string(entry, "message", state.message);
      states.push_back(std::move(entry));
    }
    a["prefetch"] = std::move(states);
  }
  j["artifacts"] = std::move(a);
}

RobotKnowledge read_robot_knowledge(ObjectReader& r) {
  RobotKnowledge knows;
  knows.report_seq = r.optional_integer("reportSeq", 0);
  knows.newest_dispatch = r.optional_time("newestDispatch");
  return knows;
}

}  // namespace

Result<Register> parse_register(std::string_view payload) {
  return detail::read_payload<Register>(payload, kMaxPayloadBytes, [](ObjectReader& r) {
    Register message;
    message.robot_id = r.required_string("robotId", check_identifier);
    message.token = r.optional_string("token").value_or("");
    message.agent_version = r.optional_string("agentVersion").value_or("");
    message.labels = r.optional_string_map("labels");
    message.device_info = read_optional_device_info(r);
    message.lists_running_tasks = r.object().contains("runningTasks") && !r.object()["runningTasks"].is_null();
    r.optional_object_array("runningTasks",
                            [&](ObjectReader& t) { message.running_tasks.push_back(read_running_task(t, false)); });
    message.timestamp = r.optional_time("timestamp");
    message.knows = read_robot_knowledge(r);
    return message;
  });
}

Result<Heartbeat> parse_heartbeat(std::string_view payload) {
  return detail::read_payload<Heartbeat>(payload, kMaxPayloadBytes, [](ObjectReader& r) {
    Heartbeat message;
    message.robot_id = r.required_string("robotId", check_identifier);
    message.token = r.optional_string("token").value_or("");
    message.timestamp = r.optional_time("timestamp");
    message.lists_running_tasks = r.object().contains("runningTasks") && !r.object()["runningTasks"].is_null();
    message.running_tasks = r.optional_string_array("runningTasks", check_identifier);
    r.optional_object_array(
        "endedTasks", [&](ObjectReader& t) { message.ended_tasks.push_back(read_running_task(t, true)); },
        kMaxEndedTasksListed);
    message.ended_tasks_truncated = r.optional_bool("endedTasksTruncated").value_or(false);
    message.device_info = read_optional_device_info(r);
    message.storage_error = read_optional_storage_error(r);
    message.knows = read_robot_knowledge(r);
    message.artifacts = read_artifacts_held(r);
    return message;
  });
}

Result<RegisterResponse> parse_register_response(std::string_view payload) {
  return detail::read_payload<RegisterResponse>(payload, kMaxPayloadBytes, [](ObjectReader& r) {
    RegisterResponse message;
    message.success = r.required_bool("success");
    message.robot_id = r.optional_string("robotId", check_identifier).value_or("");
    message.message = r.optional_string("message").value_or("");
    if (auto phase = r.optional_enum("phase", {"Pending", "Online", "Offline", "Unknown"})) {
      message.phase = value_of(kRobotPhases, *phase);
    }
    return message;
  });
}

Result<Dispatch> parse_dispatch(std::string_view payload) {
  return detail::read_payload<Dispatch>(payload, kMaxPayloadBytes, [](ObjectReader& r) {
    Dispatch message;
    message.action = value_of(kDispatchActions, r.required_enum("action", {"create", "delete"}));
    const bool create = message.action == DispatchAction::create;
    r.required_object("task", [&](ObjectReader& task) {
      // A delete needs only the uid; a create needs the whole task.
      auto optional_or_required = [&](std::string_view key) {
        return create ? task.required_string(key, check_not_empty) : task.optional_string(key).value_or("");
      };
      message.task.api_version = optional_or_required("apiVersion");
      message.task.kind = optional_or_required("kind");
      task.required_object("metadata", [&](ObjectReader& metadata) {
        message.task.metadata.name =
            create ? metadata.required_string("name", check_not_empty) : metadata.optional_string("name").value_or("");
        message.task.metadata.namespace_ = metadata.optional_string("namespace").value_or("");
        message.task.metadata.uid = metadata.required_string("uid", check_identifier);
        message.task.metadata.generation = metadata.optional_integer("generation", 0);
      });
      const auto read_spec = [&](ObjectReader& spec) { message.task.spec = read_task_spec(spec); };
      if (create) {
        task.required_object("spec", read_spec);
      } else {
        task.optional_object("spec", read_spec);
      }
    });
    message.timestamp = r.optional_time("timestamp");
    message.reported_seq = r.optional_integer("reportedSeq", 1);
    message.epoch = r.optional_integer("epoch", 1, kMaxEpochValue);
    return message;
  });
}

namespace {

// What a JSON merge patch of `value` leaves: members that are null are
// removed, in nested objects too; arrays are taken whole, as they are.
void drop_null_members(json& value) {
  if (!value.is_object()) return;
  for (auto member = value.begin(); member != value.end();) {
    if (member->is_null()) {
      member = value.erase(member);
    } else {
      drop_null_members(*member);
      ++member;
    }
  }
}

// Arrays and objects open at once in `value`, as json_nested_deeper_than
// counts them in text; counted no further than `limit` + 1.
std::size_t depth_of(const json& value, std::size_t limit) {
  if (!value.is_structured()) return 0;
  if (limit == 0) return 1;
  std::size_t deepest = 0;
  for (const json& item : value) deepest = std::max(deepest, depth_of(item, limit - 1));
  return deepest + 1;
}

}  // namespace

Result<void> check_artifact_digest(std::string_view text) {
  const bool sha256 = text.rfind("sha256:", 0) == 0 && text.size() == 7 + 64;
  const bool sha512 = text.rfind("sha512:", 0) == 0 && text.size() == 7 + 128;
  if ((!sha256 && !sha512) || !is_lower_hex(text.substr(7)))
    return Error{"", "must be sha256: and 64 lowercase hex digits or sha512: and 128"};
  return ok();
}

Result<json> task_outputs_from(json value) {
  if (!value.is_object()) return Error{"outputs", "must be a JSON object, got " + std::string(value.type_name())};
  if (depth_of(value, kMaxTaskOutputsDepth) > kMaxTaskOutputsDepth) {
    return Error{"outputs", "nests deeper than " + std::to_string(kMaxTaskOutputsDepth) + " levels"};
  }
  drop_null_members(value);
  const std::size_t size = value.dump().size();
  if (size > kMaxTaskOutputsBytes) {
    return Error{"outputs", "is " + std::to_string(size) + " bytes written compactly, over the limit of " +
                                std::to_string(kMaxTaskOutputsBytes)};
  }
  return value;
}

Result<json> parse_task_outputs(std::string_view text) {
  if (text.size() > kMaxTaskOutputsBytes) {
    return Error{"outputs", "is " + std::to_string(text.size()) + " bytes, over the limit of " +
                                std::to_string(kMaxTaskOutputsBytes)};
  }
  if (json_nested_deeper_than(text, kMaxTaskOutputsDepth)) {
    return Error{"outputs", "nests deeper than " + std::to_string(kMaxTaskOutputsDepth) + " levels"};
  }
  json parsed = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return Error{"outputs", "is not valid JSON"};
  return task_outputs_from(std::move(parsed));
}

Result<TaskStatus> parse_task_status(std::string_view payload) {
  return detail::read_payload<TaskStatus>(payload, kMaxPayloadBytes, [](ObjectReader& r) {
    TaskStatus message;
    message.task_uid = r.required_string("taskUid", check_identifier);
    // Go K8s4r agents name the robot robotName.
    if (auto robot_id = r.optional_string("robotId", check_identifier)) {
      message.robot_id = *robot_id;
    } else if (auto robot_name = r.optional_string("robotName", check_identifier)) {
      message.robot_id = *robot_name;
    } else {
      r.fail("robotId", "is required");
    }
    // Go K8s4r agents report "exited" and leave the outcome to the exit code.
    const std::string state = r.required_enum("state", {"running", "completed", "failed", "exited"});
    message.exit_code = r.optional_integer("exitCode", -2147483648LL, 2147483647LL);
    if (state == "exited") {
      message.state = message.exit_code.value_or(-1) == 0 ? TaskRunState::completed : TaskRunState::failed;
    } else if (!state.empty()) {
      message.state = value_of(kTaskRunStates, state);
    }
    message.signal = r.optional_integer("signal", 0, 128);
    message.reason = r.optional_string("reason").value_or("");
    message.message = r.optional_string("message").value_or("");
    message.event = r.optional_string("event").value_or("");
    message.started_at = r.optional_time("startedAt");
    message.finished_at = r.optional_time("finishedAt");
    message.updated_at = r.optional_time("updatedAt");
    message.restart_count = r.optional_integer("restartCount", 0, 2147483647LL).value_or(0);
    message.seq = r.optional_integer("seq", 1);
    message.logs_tail = r.optional_string("logsTail", nullptr, kMaxLogsTailCharacters).value_or("");
    if (json outputs = r.optional_raw_object("outputs"); !outputs.is_null()) {
      auto checked = task_outputs_from(std::move(outputs));
      if (checked) {
        message.outputs = std::move(checked.value());
      } else {
        r.fail("outputs", checked.error().message);
      }
    }
    return message;
  });
}

Result<Ack> parse_ack(std::string_view payload) {
  return detail::read_payload<Ack>(payload, kMaxPayloadBytes, [](ObjectReader& r) {
    Ack message;
    message.robot_id = r.required_string("robotId", check_identifier);
    r.optional_object_array(
        "reports",
        [&](ObjectReader& a) {
          ReportAck ack;
          ack.task_uid = a.required_string("taskUid", check_identifier);
          ack.seq = a.required_integer("seq", 1);
          ack.result = value_of(kReportResults, a.required_enum("result", {"recorded", "refused"}));
          ack.reason = a.optional_string("reason", nullptr, 256).value_or("");
          ack.message = a.optional_string("message", nullptr, 1024).value_or("");
          message.reports.push_back(std::move(ack));
        },
        kMaxAcksPerMessage);
    message.heartbeat = r.optional_time("heartbeat");
    message.timestamp = r.optional_time("timestamp");
    message.resend_artifacts = r.optional_bool("resendArtifacts").value_or(false);
    message.epoch = r.optional_integer("epoch", 1, kMaxEpochValue);
    return message;
  });
}

Result<Prefetch> parse_prefetch(std::string_view payload) {
  return detail::read_payload<Prefetch>(payload, kMaxPayloadBytes, [](ObjectReader& r) {
    Prefetch message;
    message.robot_id = r.required_string("robotId", check_identifier);
    r.optional_object_array(
        "artifacts",
        [&](ObjectReader& a) {
          PrefetchArtifact artifact;
          artifact.source = a.required_string("source", check_fetch_url, 2048);
          artifact.checksum = a.required_string("checksum", check_artifact_digest);
          artifact.size = a.optional_integer("size", 0);
          message.artifacts.push_back(std::move(artifact));
        },
        kMaxPrefetched);
    message.timestamp = r.optional_time("timestamp");
    return message;
  });
}

Result<Presence> parse_presence(std::string_view payload) {
  return detail::read_payload<Presence>(payload, kMaxPayloadBytes, [](ObjectReader& r) {
    Presence message;
    message.robot_id = r.required_string("robotId", check_identifier);
    message.online = r.required_bool("online");
    message.timestamp = r.required_time("timestamp");
    message.storage_error = read_optional_storage_error(r);
    return message;
  });
}

// ---- encode ------------------------------------------------------------------------

namespace {

// Bytes that are not UTF-8 (a task's output can hold any) become U+FFFD
// instead of an exception; non-ASCII text stays readable.
std::string dump(const json& value) { return value.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace

namespace {

void put_robot_knowledge(json& j, const RobotKnowledge& knows) {
  put_optional(j, "reportSeq", knows.report_seq);
  put_time(j, "newestDispatch", knows.newest_dispatch);
}

json running_tasks_json(const std::vector<RunningTask>& tasks) {
  json out = json::array();
  for (const RunningTask& task : tasks) {
    json t = {{"taskUid", task.task_uid}, {"state", to_string(task.state)}};
    put_optional(t, "seq", task.seq);
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace

json to_json_value(const DeviceInfo& info) { return device_info_json(info); }

json to_json_value(const Register& message) {
  json j = {{"robotId", message.robot_id}};
  put_string(j, "token", message.token);
  put_string(j, "agentVersion", message.agent_version);
  if (!message.labels.empty()) j["labels"] = message.labels;
  if (message.device_info) j["deviceInfo"] = device_info_json(*message.device_info);
  // Always present from our agent: "holds no tasks" must not read as a Go
  // agent's silence.
  if (message.lists_running_tasks || !message.running_tasks.empty()) {
    j["runningTasks"] = running_tasks_json(message.running_tasks);
  }
  put_time(j, "timestamp", message.timestamp);
  put_robot_knowledge(j, message.knows);
  return j;
}

json to_json_value(const Heartbeat& message) {
  json j = {{"robotId", message.robot_id}};
  put_string(j, "token", message.token);
  put_time(j, "timestamp", message.timestamp);
  // Always present from our agent, so an operator sees "no tasks" rather than
  // a missing field, and the manager can tell a lost task.
  if (message.lists_running_tasks || !message.running_tasks.empty()) j["runningTasks"] = message.running_tasks;
  if (!message.ended_tasks.empty()) j["endedTasks"] = running_tasks_json(message.ended_tasks);
  if (message.ended_tasks_truncated) j["endedTasksTruncated"] = true;
  if (message.device_info) j["deviceInfo"] = device_info_json(*message.device_info);
  put_storage_error(j, message.storage_error);
  put_robot_knowledge(j, message.knows);
  put_artifacts_held(j, message.artifacts);
  return j;
}

json to_json_value(const RegisterResponse& message) {
  json j = {{"success", message.success}};
  put_string(j, "robotId", message.robot_id);
  put_string(j, "message", message.message);
  if (message.phase) j["phase"] = to_string(*message.phase);
  return j;
}

json to_json_value(const Dispatch& message) {
  json metadata = {{"uid", message.task.metadata.uid}};
  put_string(metadata, "name", message.task.metadata.name);
  put_string(metadata, "namespace", message.task.metadata.namespace_);
  put_optional(metadata, "generation", message.task.metadata.generation);
  json task = json::object();
  put_string(task, "apiVersion", message.task.api_version);
  put_string(task, "kind", message.task.kind);
  task["metadata"] = std::move(metadata);
  if (message.task.spec) task["spec"] = task_spec_json(*message.task.spec);
  json j = {{"action", to_string(message.action)}, {"task", std::move(task)}};
  put_time(j, "timestamp", message.timestamp);
  put_optional(j, "reportedSeq", message.reported_seq);
  put_optional(j, "epoch", message.epoch);
  return j;
}

json to_json_value(const TaskStatus& message) {
  json j = {{"taskUid", message.task_uid}, {"robotId", message.robot_id}, {"state", to_string(message.state)}};
  put_optional(j, "exitCode", message.exit_code);
  put_optional(j, "signal", message.signal);
  put_string(j, "reason", message.reason);
  put_string(j, "message", message.message);
  put_string(j, "event", message.event);
  put_time(j, "startedAt", message.started_at);
  put_time(j, "finishedAt", message.finished_at);
  put_time(j, "updatedAt", message.updated_at);
  j["restartCount"] = message.restart_count;
  put_optional(j, "seq", message.seq);
  put_string(j, "logsTail", message.logs_tail);
  if (message.outputs) j["outputs"] = *message.outputs;
  return j;
}

json to_json_value(const Ack& message) {
  json j = {{"robotId", message.robot_id}};
  if (!message.reports.empty()) {
    json reports = json::array();
    for (const ReportAck& ack : message.reports) {
      json a = {{"taskUid", ack.task_uid}, {"seq", ack.seq}, {"result", to_string(ack.result)}};
      put_string(a, "reason", ack.reason);
      put_string(a, "message", ack.message);
      reports.push_back(std::move(a));
    }
    j["reports"] = std::move(reports);
  }
  put_time(j, "heartbeat", message.heartbeat);
  put_time(j, "timestamp", message.timestamp);
  if (message.resend_artifacts) j["resendArtifacts"] = true;
  put_optional(j, "epoch", message.epoch);
  return j;
}

json to_json_value(const Prefetch& message) {
  json artifacts = json::array();
  for (const PrefetchArtifact& artifact : message.artifacts) {
    json a = {{"source", artifact.source}, {"checksum", artifact.checksum}};
    put_optional(a, "size", artifact.size);
    artifacts.push_back(std::move(a));
  }
  json j = {{"robotId", message.robot_id}, {"artifacts", std::move(artifacts)}};
  put_time(j, "timestamp", message.timestamp);
  return j;
}

json to_json_value(const Presence& message) {
  json j = {{"robotId", message.robot_id}, {"online", message.online}, {"timestamp", format_time(message.timestamp)}};
  put_storage_error(j, message.storage_error);
  return j;
}

std::string encode(const Register& message) { return dump(to_json_value(message)); }
std::string encode(const Heartbeat& message) { return dump(to_json_value(message)); }
std::string encode(const RegisterResponse& message) { return dump(to_json_value(message)); }
std::string encode(const Dispatch& message) { return dump(to_json_value(message)); }
std::string encode(const TaskStatus& message) { return dump(to_json_value(message)); }
std::string encode(const Presence& message) { return dump(to_json_value(message)); }
std::string encode(const Ack& message) { return dump(to_json_value(message)); }
std::string encode(const Prefetch& message) { return dump(to_json_value(message)); }

}  // namespace k8s4r
