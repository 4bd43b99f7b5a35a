// Codec behaviour beyond the schema examples: limits, hostile input, legacy
// Go K8s4r payloads, and what encode writes.
#include "k8s4r/common/messages.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>

namespace k8s4r {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

const std::string kUid = "5b0e7c1a-3f9d-4e21-9a77-0c2d4b6e8f10";

std::string status_with_logs(const std::string& logs) {
  return json{{"taskUid", kUid}, {"robotId", "robot-1"}, {"state", "completed"}, {"seq", 2}, {"logsTail", logs}}.dump();
}

TEST(Messages, RefusesOversizedPayloadsBeforeParsing) {
  std::string big = status_with_logs("");
  big.insert(big.size() - 1, std::string(kMaxPayloadBytes, ' '));  // whitespace keeps it valid JSON
  auto parsed = parse_task_status(big);
  ASSERT_FALSE(parsed);
  EXPECT_EQ(parsed.error().field, "");
  EXPECT_NE(parsed.error().message.find("over the limit of 262144"), std::string::npos) << parsed.error().message;

  const std::string ten_megabytes(10 * 1024 * 1024, 'x');
  EXPECT_FALSE(parse_dispatch(ten_megabytes));
}

TEST(Messages, AcceptsAPayloadJustUnderTheLimit) {
  std::string payload = status_with_logs("tail");
  payload.insert(payload.size() - 1, std::string(kMaxPayloadBytes - payload.size(), ' '));
  ASSERT_EQ(payload.size(), kMaxPayloadBytes);
  EXPECT_TRUE(parse_task_status(payload));
}

TEST(Messages, SurvivesHostileJson) {
  // Deep nesting, invalid UTF-8, truncated documents, numbers out of range.
  std::string deep = "{\"robotId\":" + std::string(100000, '[') + std::string(100000, ']') + "}";
  EXPECT_EQ(parse_presence(deep).error().message, "payload nests deeper than 64 levels");
  EXPECT_FALSE(parse_presence("{\"robotId\":\"r\xff\",\"online\":true,\"timestamp\":\"2026-01-01T00:00:00Z\"}"));
  EXPECT_FALSE(parse_presence("{\"robotId\":"));
  EXPECT_FALSE(parse_presence(""));
  EXPECT_FALSE(parse_presence("null"));
  EXPECT_EQ(parse_task_status(json{{"taskUid", kUid}, {"robotId", "r"}, {"state", "running"}, {"seq", 1e300}}.dump())
                .error()
                .field,
            "seq");
  EXPECT_EQ(
      parse_task_status(R"({"taskUid":"a","robotId":"r","state":"running","seq":18446744073709551615})").error().field,
      "seq");
}

TEST(Messages, ErrorsSayWhatIsWrong) {
  auto parsed = parse_heartbeat(R"({"robotId": 7})");
  ASSERT_FALSE(parsed);
  EXPECT_EQ(parsed.error().to_string(), "robotId: must be a string, got a number");

  parsed = parse_heartbeat(R"({"token": "t"})");
  EXPECT_EQ(parsed.error().to_string(), "robotId: is required");

  auto dispatch = parse_dispatch(R"({"action":"create","task":{"apiVersion":"v","kind":"Task",
      "metadata":{"name":"n","uid":"u1"},"spec":{"driver":"exec","config":{"execConfig":{"command":"x"}},
      "timeout":"5 minutes"}}})");
  ASSERT_FALSE(dispatch);
  EXPECT_EQ(dispatch.error().field, "task.spec.timeout");
  EXPECT_NE(dispatch.error().message.find("invalid Go duration '5 minutes'"), std::string::npos);

  // Each duration of a task, at Go's maximum: refused by name, not wrapped into "at once".
  for (const auto& [field, spec] : std::vector<std::pair<std::string, std::string>>{
           {"task.spec.timeout", R"("timeout":"2562047h47m16.854775807s")"},
           {"task.spec.killTimeout", R"("killTimeout":"2562047h")"},
           {"task.spec.restartPolicy.delay", R"("restartPolicy":{"delay":"9223372036854775807ns"})"},
           {"task.spec.restartPolicy.interval", R"("restartPolicy":{"interval":"100000h"})"}}) {
    dispatch = parse_dispatch(R"({"action":"create","task":{"apiVersion":"v","kind":"Task",
      "metadata":{"name":"n","uid":"u1"},"spec":{"driver":"exec","config":{"execConfig":{"command":"x"}},)" +
                              spec + "}}}");
    ASSERT_FALSE(dispatch) << spec;
    EXPECT_EQ(dispatch.error().field, field);
    EXPECT_NE(dispatch.error().message.find("longer than the maximum"), std::string::npos) << spec;
  }
}

TEST(Messages, LogsTailLimitCountsCharactersNotBytes) {
  // 4096 three-byte characters: 12 KiB of UTF-8, but within the limit, as
  // JSON Schema's maxLength counts it.
  std::string logs;
  for (int i = 0; i < 4096; ++i) logs += "\xE2\x80\xA6";  // …
  EXPECT_TRUE(parse_task_status(status_with_logs(logs)));
  EXPECT_EQ(parse_task_status(status_with_logs(logs + "x")).error().field, "logsTail");
}

TEST(Messages, ReadsGoK8s4rTaskStatus) {
  auto exited_ok = parse_task_status(
      R"({"taskUid":"abc","robotName":"robot-2","state":"exited","exitCode":0,"updatedAt":"2026-01-01T08:00:00+08:00"})");
  ASSERT_TRUE(exited_ok);
  EXPECT_EQ(exited_ok.value().robot_id, "robot-2");
  EXPECT_EQ(exited_ok.value().state, TaskRunState::completed);
  EXPECT_FALSE(exited_ok.value().seq);
  EXPECT_EQ(format_rfc3339(*exited_ok.value().updated_at), "2026-01-01T00:00:00Z");

  auto exited_bad = parse_task_status(R"({"taskUid":"abc","robotName":"robot-2","state":"exited","exitCode":3})");
  ASSERT_TRUE(exited_bad);
  EXPECT_EQ(exited_bad.value().state, TaskRunState::failed);
  // Re-encoded in our form.
  const auto encoded = json::parse(encode(exited_bad.value()));
  EXPECT_EQ(encoded["robotId"], "robot-2");
  EXPECT_EQ(encoded["state"], "failed");
  EXPECT_FALSE(encoded.contains("robotName"));
}

TEST(Messages, NullReadsAsAbsentForOptionalFields) {
  auto heartbeat = parse_heartbeat(R"({"robotId":"r1","token":null,"runningTasks":null,"deviceInfo":null})");
  ASSERT_TRUE(heartbeat);
  EXPECT_TRUE(heartbeat.value().running_tasks.empty());
  EXPECT_EQ(parse_heartbeat(R"({"robotId":null})").error().to_string(), "robotId: is required and must not be null");
}

TEST(Messages, EncodesTaskStatusAsDocumented) {
  TaskStatus status;
  status.task_uid = kUid;
  status.robot_id = "robot-001";
  status.state = TaskRunState::failed;
  status.exit_code = 143;
  status.signal = 15;
  status.reason = "Timeout";
  status.started_at = Timestamp{} + 1'700'000'000s;
  status.finished_at = *status.started_at + 30s + 2ms;
  status.seq = 4;
  status.logs_tail = "bad byte \xff here";  // task output is not always UTF-8
  const auto encoded = json::parse(encode(status));
  EXPECT_EQ(encoded["state"], "failed");
  EXPECT_EQ(encoded["exitCode"], 143);
  EXPECT_EQ(encoded["signal"], 15);
  EXPECT_EQ(encoded["startedAt"], "2023-11-14T22:13:20Z");
  EXPECT_EQ(encoded["finishedAt"], "2023-11-14T22:13:50.002Z");
  EXPECT_EQ(encoded["restartCount"], 0);
  EXPECT_EQ(encoded["logsTail"], "bad byte \xEF\xBF\xBD here");
  EXPECT_FALSE(encoded.contains("message"));  // unset optional fields are left out
  EXPECT_TRUE(parse_task_status(encode(status)));
}

TEST(TaskOutputs, AreAnObjectWithoutNullsOfAtMost4KiBWrittenCompactly) {
  auto outputs =
      parse_task_outputs(R"({"digest":"sha256:ab","cells":1412,"gone":null,"nested":{"x":null,"y":[null,1]}})");
  ASSERT_TRUE(outputs) << outputs.error().to_string();
  // Null members go at every level of objects (as a merge patch would drop
  // them), never inside an array (a merge patch takes an array whole).
  EXPECT_EQ(outputs.value(), json::parse(R"({"digest":"sha256:ab","cells":1412,"nested":{"y":[null,1]}})"));

  EXPECT_EQ(parse_task_outputs("[1,2]").error().to_string(), "outputs: must be a JSON object, got array");
  EXPECT_EQ(parse_task_outputs("{\"a\":").error().to_string(), "outputs: is not valid JSON");
  EXPECT_EQ(parse_task_outputs("{\"a\":1e400}").error().to_string(), "outputs: is not valid JSON");
  EXPECT_EQ(parse_task_outputs(std::string(200, '[') + std::string(200, ']')).error().to_string(),
            "outputs: nests deeper than 32 levels");
  // Deep enough to pass the protocol's own limit alone, not inside the report
  // that carries it: refused where it is read, and where it arrives.
  std::string deep = "1";
  for (int level = 0; level < 33; ++level) deep = "{\"a\":" + deep + "}";
  EXPECT_EQ(parse_task_outputs(deep).error().to_string(), "outputs: nests deeper than 32 levels");
  EXPECT_EQ(task_outputs_from(json::parse(deep)).error().to_string(), "outputs: nests deeper than 32 levels");
  std::string fits_deep = "1";
  for (int level = 0; level < 32; ++level) fits_deep = "{\"a\":" + fits_deep + "}";
  EXPECT_TRUE(parse_task_outputs(fits_deep));
  EXPECT_TRUE(task_outputs_from(json::parse(fits_deep)));
  const std::string big = json{{"a", std::string(4090, 'x')}}.dump();
  EXPECT_EQ(parse_task_outputs(big).error().to_string(), "outputs: is 4098 bytes, over the limit of 4096");
  // The limit is on what travels: whitespace in the file is not counted twice.
  const std::string fits = json{{"a", std::string(4088, 'x')}}.dump();
  EXPECT_EQ(fits.size(), 4096u);
  EXPECT_TRUE(parse_task_outputs(fits));
  EXPECT_FALSE(task_outputs_from(json{{"a", std::string(4089, 'x')}}));
}

TEST(TaskOutputs, TravelInACompletedReportAndAreCheckedWhereTheyArrive) {
  TaskStatus status;
  status.task_uid = kUid;
  status.robot_id = "robot-1";
  status.state = TaskRunState::completed;
  status.exit_code = 0;
  status.seq = 2;
  status.outputs = json{{"digest", "sha256:ab"}};
  auto parsed = parse_task_status(encode(status));
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed.value().outputs, status.outputs);
  EXPECT_FALSE(parse_task_status(status_with_logs("")).value().outputs);

  json payload = json::parse(encode(status));
  payload["outputs"] = json{{"a", std::string(5000, 'x')}};
  EXPECT_EQ(parse_task_status(payload.dump()).error().field, "outputs");
  payload["outputs"] = "text";
  EXPECT_EQ(parse_task_status(payload.dump()).error().to_string(), "outputs: must be an object, got a string");
}

TEST(Messages, DispatchRelaysWhatItDoesNotModel) {
  const std::string payload = R"({"action":"create","task":{"apiVersion":"robot.k8s4r.io/v1alpha1","kind":"Task",
      "metadata":{"name":"t","namespace":"default","uid":"u1","generation":2},
      "spec":{"driver":"exec","config":{"execConfig":{"command":"/bin/true"},"dockerConfig":{"image":"x"}},
              "resources":{"cpu":"500m"},"timeout":"90s","futureField":{"a":1}}}})";
  auto dispatch = parse_dispatch(payload);
  ASSERT_TRUE(dispatch);
  const TaskSpec& spec = *dispatch.value().task.spec;
  EXPECT_EQ(spec.timeout, 90s);
  EXPECT_EQ(spec.exec_config->command, "/bin/true");

  Dispatch changed = dispatch.value();
  changed.task.spec->timeout = 2min;
  changed.task.spec->exec_config->args = {"-v"};
  const auto encoded = json::parse(encode(changed));
  EXPECT_EQ(encoded["task"]["spec"]["timeout"], "2m0s");  // typed fields win
  EXPECT_EQ(encoded["task"]["spec"]["config"]["execConfig"]["args"], json::array({"-v"}));
  EXPECT_EQ(encoded["task"]["spec"]["resources"]["cpu"], "500m");  // the rest passes through
  EXPECT_EQ(encoded["task"]["spec"]["config"]["dockerConfig"]["image"], "x");
  EXPECT_EQ(encoded["task"]["spec"]["futureField"]["a"], 1);
  EXPECT_EQ(encoded["task"]["metadata"]["generation"], 2);
}

TEST(Messages, ADispatchNestedDeepInsideWhatItRelaysIsRefusedNotKept) {
  // The adversarial run's crash: about 200 KB of nesting inside the spec,
  // under the size limit, kept as an unmodelled field and re-serialised.
  const std::string payload = R"({"action":"create","task":{"apiVersion":"robot.k8s4r.io/v1alpha1","kind":"Task",
      "metadata":{"name":"t","uid":"u1"},"spec":{"driver":"exec",
      "config":{"execConfig":{"command":"/bin/true"}},"futureField":)" +
                              std::string(100000, '[') + std::string(100000, ']') + "}}}";
  ASSERT_LT(payload.size(), kMaxPayloadBytes);
  const auto dispatch = parse_dispatch(payload);
  ASSERT_FALSE(dispatch);
  EXPECT_EQ(dispatch.error().message, "payload nests deeper than 64 levels");
  // As deep as a real Task gets is fine.
  std::string nested = "1";
  for (int i = 0; i < 50; ++i) nested = "[" + nested + "]";
  const auto shallow =
      parse_dispatch(R"({"action":"create","task":{"apiVersion":"robot.k8s4r.io/v1alpha1","kind":"Task",
      "metadata":{"name":"t","uid":"u1"},"spec":{"driver":"exec",
      "config":{"execConfig":{"command":"/bin/true"}},"futureField":)" +
                     nested + "}}}");
  EXPECT_TRUE(shallow) << shallow.error().field << ": " << shallow.error().message;
}

TEST(Messages, DeleteNeedsOnlyTheUid) {
  auto dispatch = parse_dispatch(R"({"action":"delete","task":{"metadata":{"uid":"u1"}}})");
  ASSERT_TRUE(dispatch);
  EXPECT_EQ(dispatch.value().action, DispatchAction::remove);
  EXPECT_FALSE(dispatch.value().task.spec);
  EXPECT_EQ(json::parse(encode(dispatch.value())),
            json::parse(R"({"action":"delete","task":{"metadata":{"uid":"u1"}}})"));
}

TEST(Messages, HeartbeatAlwaysListsRunningTasks) {
  Heartbeat heartbeat;
  heartbeat.robot_id = "robot-1";
  heartbeat.timestamp = Timestamp{} + 1s;
  EXPECT_EQ(encode(heartbeat), R"({"robotId":"robot-1","runningTasks":[],"timestamp":"1970-01-01T00:00:01Z"})");
}

TEST(Messages, PresenceAndResponseEncodeCompactly) {
  EXPECT_EQ(encode(Presence{"robot-1", false, Timestamp{} + 1500ms}),
            R"({"online":false,"robotId":"robot-1","timestamp":"1970-01-01T00:00:01.5Z"})");
  EXPECT_EQ(encode(RegisterResponse{true, "robot-1", "registered", RobotPhase::online}),
            R"({"message":"registered","phase":"Online","robotId":"robot-1","success":true})");
}

}  // namespace
}  // namespace k8s4r
