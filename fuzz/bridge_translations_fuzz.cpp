// The bridge's translations over arbitrary Task and Robot objects: whatever
// the API server hands the informers (any field of any type, any size), the
// typed reads, the status and dispatch decisions, the Robot patches, the
// conditions and the finalizer patches must give a value or a refusal, never
// crash, hang or leak. As a slot table's ConfigMap data, a table that parses
// must write back the same, and every decision on it must keep every epoch
// from going back. Inputs nested deeper than an API server stores are
// skipped: the informer never holds one.
#include "k8s4r/bridge/dispatch_message.h"
#include "k8s4r/bridge/robot_patches.h"
#include "k8s4r/bridge/slot_table.h"
#include "k8s4r/bridge/task_patches.h"
#include "k8s4r/crd/resources.h"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace {

using nlohmann::json;
using namespace k8s4r;

bool too_deep(std::string_view input) {
  int depth = 0;
  for (char c : input) {
    if (c == '[' || c == '{') {
      if (++depth > 1000) return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

void try_patch(const json& object, const json& operations) {
  if (operations.is_null()) return;
  try {
    (void)object.patch(operations);
  } catch (const json::exception&) {
    // A failed test op: the object changed under the patch. Expected.
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  if (too_deep(input)) return 0;
  const json object = json::parse(input, nullptr, false);
  if (object.is_discarded()) return 0;
  const Timestamp now{std::chrono::seconds(1'795'000'000)};

  // As a Task.
  const crd::TaskView task = crd::read_task(object);
  TaskStatus report;
  report.task_uid = task.uid.empty() ? "u" : task.uid;
  report.robot_id = task.target_robot.empty() ? "robot-1" : task.target_robot;
  report.state = TaskRunState::failed;
  report.seq = 7;
  report.reason = "Timeout";
  for (const TaskRunState state : {TaskRunState::failed, TaskRunState::completed}) {
    report.state = state;
    if (auto verdict = bridge::judge_report(report, object, {}); verdict.kind == bridge::ReportVerdict::Kind::write) {
      json patched = object;
      patched.merge_patch(verdict.write.status_patch);
      (void)crd::read_task(patched);
      for (const auto& event : verdict.write.events) (void)bridge::task_event(object, event, report, now);
    }
  }
  (void)bridge::judge_report(report, object, bridge::AppliedStatus{3, crd::TaskState::running});
  (void)bridge::dispatch_create_payload(object);
  (void)bridge::dispatch_delete_payload(object);
  try_patch(object, crd::add_finalizer_patch(object, crd::kBridgeFinalizer));
  try_patch(object, crd::remove_finalizer_patch(object, crd::kBridgeFinalizer));
  (void)crd::compose_merge_patches(object, object);

  // As a Robot.
  (void)crd::read_robot(object);
  (void)bridge::facts_of_robot(object);
  (void)bridge::last_heartbeat_of(object);
  Register registration;
  registration.robot_id = "robot-1";
  registration.token = "t";
  registration.labels = {{"zone", "a"}};
  (void)bridge::may_register(&object, registration);
  (void)bridge::register_robot_patch(registration, object);
  (void)bridge::register_status_patch(registration, &object, now);
  Heartbeat heartbeat;
  heartbeat.robot_id = "robot-1";
  heartbeat.running_tasks = {"b", "a"};
  (void)bridge::heartbeat_status_patch(heartbeat, object, now);
  (void)bridge::presence_status_patch(Presence{"robot-1", false, now}, object, now);
  (void)bridge::register_response("robot-1", true, "registered", &object);

  // As the slot table's data.
  if (auto table = bridge::parse_slot_table(object); table) {
    const auto again = bridge::parse_slot_table(bridge::slot_table_data(table.value()));
    if (!again || !(again.value().slots == table.value().slots) || again.value().epoch != table.value().epoch)
      __builtin_trap();
    const std::int64_t now_ms = 1'795'000'000'000;
    for (const auto& decided :
         {bridge::rebalance(table.value(), {"bridge-0", "bridge-1"}, now_ms),
          bridge::hand_over(table.value(), "bridge-0", now_ms), bridge::reclaim(table.value(), "bridge-1", 5),
          bridge::give_away(table.value(), "bridge-0", {"bridge-0", "bridge-2"}, now_ms)}) {
      if (decided.epoch < table.value().epoch) __builtin_trap();
      for (std::uint32_t slot = 0; slot < kSlots; ++slot) {
        if (decided.slots[slot].epoch < table.value().slots[slot].epoch) __builtin_trap();
      }
      (void)bridge::served_by(decided, "bridge-0");
    }
  }
  return 0;
}
