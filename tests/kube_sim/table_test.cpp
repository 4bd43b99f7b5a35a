#include "k8s4r/kube_sim/table.h"

#include <gtest/gtest.h>

namespace k8s4r::kube_sim {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

TEST(Table, HumanDurationMatchesKubectl) {
  EXPECT_EQ(human_duration(0s), "0s");
  EXPECT_EQ(human_duration(-1s), "0s");
  EXPECT_EQ(human_duration(-5s), "<invalid>");
  EXPECT_EQ(human_duration(119s), "119s");
  EXPECT_EQ(human_duration(2min), "2m");
  EXPECT_EQ(human_duration(5min + 3s), "5m3s");
  EXPECT_EQ(human_duration(45min), "45m");
  EXPECT_EQ(human_duration(3h + 20min), "3h20m");
  EXPECT_EQ(human_duration(30h), "30h");
  EXPECT_EQ(human_duration(53h), "2d5h");
  EXPECT_EQ(human_duration(24h * 30), "30d");
  EXPECT_EQ(human_duration(24h * 365 * 3 + 24h * 10), "3y10d");
}

TEST(Table, JsonPathReadsNestedValues) {
  const json object = {{"status", {{"state", "running"}, {"conditions", {{{"type", "Ready"}}, {{"type", "Done"}}}}}}};
  EXPECT_EQ(json_path_value(object, ".status.state"), "running");
  EXPECT_EQ(json_path_value(object, "{.status.state}"), "running");
  EXPECT_EQ(json_path_value(object, ".status.conditions[1].type"), "Done");
  EXPECT_EQ(json_path_value(object, ".status.conditions[-1].type"), "Done");
  EXPECT_TRUE(json_path_value(object, ".status.exitCode").is_null());
}

TEST(Table, BuildsRowsFromPrinterColumns) {
  ResourceType type;
  type.columns = {{"State", "string", "", "", ".status.state", 0},
                  {"Exit Code", "integer", "", "", ".status.exitCode", 0},
                  {"Age", "date", "", "", ".metadata.creationTimestamp", 0}};
  const Timestamp now = parse_rfc3339("2026-11-22T01:10:00Z").value();
  const json task = {
      {"metadata", {{"name", "t1"}, {"namespace", "default"}, {"creationTimestamp", "2026-11-22T01:05:00Z"}}},
      {"status", {{"state", "completed"}, {"exitCode", 0}}}};
  const json fresh = {{"metadata", {{"name", "t2"}, {"creationTimestamp", "2026-11-22T01:09:30Z"}}}};
  const json table = to_table(type, {task, fresh}, "42", "", now, IncludeObject::metadata);
  EXPECT_EQ(table["kind"], "Table");
  EXPECT_EQ(table["columnDefinitions"][0]["format"], "name");
  EXPECT_EQ(table["rows"][0]["cells"], json({"t1", "completed", 0, "5m"}));
  EXPECT_EQ(table["rows"][1]["cells"], json({"t2", nullptr, nullptr, "30s"}));
  EXPECT_EQ(table["rows"][0]["object"]["kind"], "PartialObjectMetadata");
  EXPECT_EQ(table["rows"][0]["object"]["metadata"]["namespace"], "default");
  EXPECT_TRUE(to_table(type, {task}, "42", "", now, IncludeObject::none, false)["columnDefinitions"].is_null());
}

}  // namespace
}  // namespace k8s4r::kube_sim
