// What the manager reads from resources anyone with rights on Jobs and
// Robots writes: resource quantities, constraints (operands, regular
// expressions, version ranges), a Robot's labels, device info, heartbeat
// time, conditions and token digest; a Job's task groups and tasks, and the
// statuses rolled up from them; a reschedule policy (its delay never
// negative, whatever the durations and the history); a rollout and a drain.
// Any bytes give a value or a refusal, never a crash or a hang; a quantity
// read back from its milli-units is the same; a constraint that was accepted
// is evaluated against the robot the same input describes; a Robot's verdict,
// once recorded, is not written again; every name made from a Job is a valid
// object name, every label a valid label value.
#include "k8s4r/common/messages.h"
#include "k8s4r/crd/quantity.h"
#include "k8s4r/crd/resources.h"
#include "k8s4r/manager/artifact_caches.h"
#include "k8s4r/manager/cache_key.h"
#include "k8s4r/manager/output_references.h"
#include "k8s4r/manager/placement.h"
#include "k8s4r/manager/plan_task.h"
#include "k8s4r/manager/reschedule.h"
#include "k8s4r/manager/result_cache.h"
#include "k8s4r/manager/robot_drain.h"
#include "k8s4r/manager/robot_lifecycle.h"
#include "k8s4r/manager/robot_load.h"
#include "k8s4r/manager/rollout.h"
#include "k8s4r/manager/status_rollup.h"
#include "k8s4r/manager/templates.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace k8s4r;
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  if (auto milli = crd::parse_quantity_milli(text); milli) {
    if (milli.value() < 0) __builtin_trap();
    auto again = crd::parse_quantity_milli(std::to_string(milli.value()) + "m");
    if (!again || again.value() != milli.value()) __builtin_trap();
  }

  const nlohmann::json value = nlohmann::json::parse(text, nullptr, false);
  if (value.is_discarded()) return 0;
  const manager::RobotFacts robot = manager::robot_facts(value);
  auto constraints =
      manager::read_constraints(value.is_object() && value.contains("constraints") ? value["constraints"] : value);
  if (constraints) {
    for (const manager::Constraint& constraint : constraints.value()) {
      static_cast<void>(constraint(robot.attributes));
      static_cast<void>(constraint.describe());
    }
    manager::TaskNeeds needs;
    needs.constraints = std::move(constraints).value();
    static_cast<void>(manager::place(needs, {robot, robot}));
  }
  // The result cache's key: any spec and robot, a key or a reason; the
  // same input, the same key.
  if (auto request = manager::cache_request(value); request && request.value()) {
    auto key = manager::cache_key(value, *request.value(), value);
    if (key && (key.value().size() != 71 || key.value() != manager::cache_key(value, *request.value(), value).value()))
      __builtin_trap();
  }
  // Its store and reuse: any Task or entry, an entry named after the key or
  // a reason; a reused result is always a success that says where it came from.
  {
    const std::string key = "sha256:" + std::string(64, 'c');
    if (auto entry = manager::cache_entry_for(value, key, parse_rfc3339("2026-11-27T10:00:00Z").value());
        entry && (entry.value()["spec"]["key"] != key || entry.value()["spec"]["exitCode"] != 0))
      __builtin_trap();
    using namespace std::chrono_literals;
    const manager::CacheRequest day{24h, "", {}};
    if (auto hit = manager::cache_hit_status(value, key, day, parse_rfc3339("2026-11-27T10:00:00Z").value());
        hit && ((*hit)["state"] != "completed" || (*hit)["exitCode"] != 0 || (*hit)["cachedFrom"]["key"] != key))
      __builtin_trap();
  }
  // Outputs used by a group: any group spec, Job or Task, references or a
  // reason; a Task without references is given back unchanged.
  if (auto references = manager::output_references(value); references) {
    std::map<std::string, manager::ProducerOutputs> producers;
    for (const manager::OutputReference& reference : references.value()) {
      manager::ProducerOutputs& producer = producers[reference.group];
      producer.state = manager::ProducerOutputs::State::completed;
      producer.outputs[reference.task][reference.key] = reference.key;
    }
    static_cast<void>(manager::checked_output_references(value, value, "g"));
    nlohmann::json task = {{"spec", {{"env", value.is_object() && value.contains("env") ? value["env"] : value}}}};
    if (auto whole = manager::with_outputs(task, producers);
        whole && references.value().empty() && whole.value() != task)
      __builtin_trap();
  }
  // ArtifactCaches: any cache and robot, a list of at most kMaxPrefetched
  // that the bridge would send as it is, and a status whose counts add up.
  {
    const nlohmann::json list = manager::prefetch_for_robot(value, {value, value});
    if (!list.is_array() || list.size() > kMaxPrefetched) __builtin_trap();
    const nlohmann::json status =
        manager::artifact_cache_status(value, {value}, parse_rfc3339("2026-11-27T10:00:00Z").value());
    if (status["total"].get<int>() !=
        status["available"].get<int>() + status["downloading"].get<int>() + status["failed"].get<int>())
      __builtin_trap();
  }
  if (auto needs = manager::replica_needs(value, value); needs) {
    if (needs.value().cpu_milli < 0 || needs.value().memory_bytes < 0) __builtin_trap();
    static_cast<void>(manager::place(needs.value(), {robot}));
  }
  auto valid_name = [](const std::string& name) {
    if (name.empty() || name.size() > 253 || name.front() == '-' || name.back() == '-') return false;
    for (char c : name) {
      if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.')) return false;
    }
    return true;
  };
  auto valid_labels = [](const nlohmann::json& labels) {
    for (const auto& [key, label] : labels.items()) {
      const std::string text = label.get<std::string>();
      if (text.size() > 63) return false;
      for (char c : text) {
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') return false;
      }
    }
    return true;
  };
  if (auto groups = manager::task_groups_of(value); groups) {
    for (nlohmann::json& group : groups.value()) {
      if (!valid_name(group["metadata"]["name"]) || !valid_labels(group["metadata"]["labels"])) __builtin_trap();
      group["spec"]["count"] = std::min<long long>(
          group["spec"]["count"].is_number_integer() ? group["spec"]["count"].get<long long>() : 1, 3);
      if (auto tasks = manager::tasks_of(group); tasks) {
        for (const nlohmann::json& task : tasks.value()) {
          if (!valid_name(task["metadata"]["name"]) || !valid_labels(task["metadata"]["labels"])) __builtin_trap();
        }
      }
      // A replacement, and a system job's replica named after a robot (any
      // name a Robot could have: the input's own).
      const std::string robot_name = value.is_object() ? value.value("robot", std::string("robot-1")) : "robot-1";
      for (const auto& replica :
           {manager::Replica::numbered(static_cast<long long>(size % 7)), manager::Replica::on_robot(robot_name)}) {
        if (auto tasks = manager::replica_tasks(group, replica, static_cast<int>(size % 4)); tasks) {
          for (const nlohmann::json& task : tasks.value()) {
            if (!valid_labels(task["metadata"]["labels"])) __builtin_trap();
            if (replica.name_part == robot_name) continue;  // a Robot's name is the API server's to check
            if (!valid_name(task["metadata"]["name"])) __builtin_trap();
          }
        }
      }
    }
  }

  {
    // A Task and its Robot, both the input: judged without a crash, and a
    // Task of its own whose plan was written is not written again.
    const auto at = k8s4r::parse_rfc3339("2026-11-26T12:00:00Z").value();
    manager::LivenessInputs inputs;
    inputs.robot = size % 2 ? &value : nullptr;
    inputs.now = at;
    inputs.dispatch_timeout = std::chrono::minutes(2);
    inputs.disconnect_grace = std::chrono::seconds(30);
    inputs.missing_since = at - std::chrono::minutes(size % 5);
    static_cast<void>(manager::judge_liveness(value, inputs));
    const manager::TaskPlan plan = manager::plan_task(value, inputs);
    if (plan.status && value.is_object() && !plan.liveness.lost) {
      nlohmann::json written = value;
      if (!written["status"].is_object()) written["status"] = nlohmann::json::object();
      written["status"].update(*plan.status);
      if (manager::plan_task(written, inputs).status && manager::plan_task(written, inputs).status != plan.status)
        __builtin_trap();
    }
  }

  if (auto resources = manager::task_resources(value); resources) {
    if (resources.value().cpu_milli < 0 || resources.value().memory_bytes < 0) __builtin_trap();
  }
  {
    // The scheduler's load cache, fed the same Task twice and then its end:
    // counted once, and nothing left.
    manager::RobotLoad load;
    load.observe(value);
    load.observe(value);
    if (load.claims() > 1) __builtin_trap();
    nlohmann::json ended = value.is_object() ? value : nlohmann::json::object();
    ended["status"] = {{"state", "completed"}};
    load.observe(ended);
    if (load.claims() != 0) __builtin_trap();
  }

  {
    // A rollout: any spec, a value or a refusal; never a negative number to
    // start, nor a rate under one.
    const auto at = k8s4r::parse_rfc3339("2026-11-26T12:00:00Z").value();
    if (auto rollout = manager::read_rollout(value.is_object() ? value.value("rollout", value) : value); rollout) {
      const manager::RolloutVerdict verdict =
          manager::judge_rollout(rollout.value(), {value, value}, at, static_cast<int>(size % 3), size % 2 == 1);
      if (verdict.may_start < 0 || (verdict.per_minute && *verdict.per_minute < 1) ||
          (verdict.aborted && verdict.may_start != 0))
        __builtin_trap();
    }
    // A drain: any Robot and Task; a status.drain once written is not
    // written again, and nothing is asked twice.
    manager::DrainView view;
    view.robot = value;
    view.now = at;
    view.tasks.push_back({&value, size % 3 == 0 ? "service" : size % 3 == 1 ? "system" : "batch"});
    const manager::DrainPlan plan = manager::plan_drain(view);
    if (plan.status && plan.status->is_object() && value.is_object()) {
      nlohmann::json stored = *plan.status;
      for (auto it = stored.begin(); it != stored.end();) it = it->is_null() ? stored.erase(it) : std::next(it);
      view.robot["status"] =
          value.contains("status") && value["status"].is_object() ? value["status"] : nlohmann::json::object();
      view.robot["status"]["drain"] = stored;
      if (manager::plan_drain(view).status) __builtin_trap();
    }
  }

  const nlohmann::json group_status = manager::task_group_status(value, {value, value});
  // A status just written is not written again.
  if (manager::status_differs(nlohmann::json{{"status", group_status}}, group_status)) __builtin_trap();
  nlohmann::json with_status = value.is_object() ? value : nlohmann::json::object();
  with_status["status"] = group_status;
  static_cast<void>(manager::job_status(value, {with_status, value}));

  for (const char* type : {"batch", "service"}) {
    if (auto policy =
            manager::read_reschedule_policy(value.is_object() ? value.value("reschedulePolicy", value) : value, type);
        policy) {
      const auto at = k8s4r::parse_rfc3339("2026-11-26T12:00:00Z").value();
      std::vector<k8s4r::Timestamp> earlier(size % 70, at - std::chrono::hours(1));
      const manager::RescheduleDecision decision = manager::decide_reschedule(policy.value(), earlier, at);
      if (decision.delay < std::chrono::nanoseconds(0)) __builtin_trap();
    }
  }

  const auto now = k8s4r::parse_rfc3339("2026-11-26T12:00:00Z").value();
  for (const bool locked : {false, true}) {
    manager::RobotPolicy policy;
    policy.require_token = locked;
    const manager::RobotVerdict verdict = manager::judge_robot(value, crd::token_digest("token"), policy, now);
    const nlohmann::json patch = manager::robot_verdict_patch(value, verdict);
    if (patch.is_null() || !value.is_object()) continue;
    nlohmann::json after = value;
    after.merge_patch(patch);
    const manager::RobotVerdict again = manager::judge_robot(after, crd::token_digest("token"), policy, now);
    if (!manager::robot_verdict_patch(after, again).is_null()) __builtin_trap();
  }
  return 0;
}
