#include "k8s4r/manager/output_references.h"

#include <gtest/gtest.h>

namespace k8s4r::manager {
namespace {

using nlohmann::json;

json group_using(const json& env) {
  return {{"name", "publish"}, {"tasks", json::array({{{"name", "upload"}, {"driver", "exec"}, {"env", env}}})}};
}

json job_of(const json& groups, const std::string& type = "batch") {
  return {{"metadata", {{"name", "maps"}, {"namespace", "default"}}},
          {"spec", {{"type", type}, {"taskGroups", groups}}}};
}

json producer(const std::string& name, const json& env = json::object()) {
  return {{"name", name}, {"tasks", json::array({{{"name", "map"}, {"env", env}}})}};
}

TEST(OutputReferences, AreFoundInEnvValuesEachOnce) {
  auto found = output_references(group_using({{"A", "$(groups.build.tasks.map.outputs.digest)"},
                                              {"B", "x $(groups.build.tasks.map.outputs.digest) $(HOME)"},
                                              {"C", "$(groups.test.tasks.run.outputs.a.b)"}}));
  ASSERT_TRUE(found) << found.error().to_string();
  const std::vector<OutputReference> expected = {{"build", "map", "digest"}, {"test", "run", "a.b"}};
  EXPECT_EQ(found.value(), expected);
}

TEST(OutputReferences, AMalformedOneIsRefusedNamingItsField) {
  EXPECT_EQ(output_references(group_using({{"A", "$(groups.build.map.digest)"}})).error().to_string(),
            "tasks[0].env.A: '$(groups.build.map.digest)' is not a reference to an output; write "
            "$(groups.GROUP.tasks.TASK.outputs.KEY)");
  EXPECT_EQ(output_references(group_using({{"A", "$(groups.build.tasks.map.outputs.digest"}})).error().to_string(),
            "tasks[0].env.A: '$(groups.build.tasks.map.outputs.digest' has no closing parenthesis; write "
            "$(groups.GROUP.tasks.TASK.outputs.KEY)");
  EXPECT_FALSE(output_references(group_using({{"A", "$(groups..tasks.map.outputs.digest)"}})));
}

TEST(OutputReferences, AreCheckedAgainstTheJob) {
  const json uses = group_using({{"A", "$(groups.build.tasks.map.outputs.digest)"}});
  EXPECT_TRUE(checked_output_references(job_of(json::array({uses, producer("build")})), uses, "publish"));
  EXPECT_EQ(checked_output_references(job_of(json::array({uses, producer("build")}), "service"), uses, "publish")
                .error()
                .message,
            "$(groups.build.tasks.map.outputs.digest): only a batch Job's tasks can use outputs, this Job is service");
  EXPECT_EQ(checked_output_references(job_of(json::array({uses})), uses, "publish").error().message,
            "$(groups.build.tasks.map.outputs.digest): the Job has no group build");
  json other_task = producer("build");
  other_task["tasks"][0]["name"] = "lint";
  EXPECT_EQ(checked_output_references(job_of(json::array({uses, other_task})), uses, "publish").error().message,
            "$(groups.build.tasks.map.outputs.digest): group build has no task map");
  json own = group_using({{"A", "$(groups.publish.tasks.upload.outputs.x)"}});
  EXPECT_EQ(checked_output_references(job_of(json::array({own})), own, "publish").error().message,
            "$(groups.publish.tasks.upload.outputs.x): a group cannot use its own outputs");
  // build uses publish's outputs and publish uses build's: both would wait forever.
  const json cycle = producer("build", {{"B", "$(groups.publish.tasks.upload.outputs.y)"}});
  EXPECT_EQ(checked_output_references(job_of(json::array({uses, cycle})), uses, "publish").error().message,
            "its outputs references form a cycle back to group publish");
  // A group that uses none is not checked at all.
  EXPECT_TRUE(
      checked_output_references(job_of(json::array({producer("build")}), "service"), producer("build"), "build"));
}

TEST(OutputReferences, AreBoundedInNumberAndInWhatTheyFillIn) {
  json env = json::object();
  for (int i = 0; i <= 64; ++i)
    env["V" + std::to_string(i)] = "$(groups.build.tasks.map.outputs.k" + std::to_string(i) + ")";
  EXPECT_EQ(output_references(group_using(env)).error().message, "the group's tasks use more than 64 outputs");
  env.erase("V64");
  EXPECT_TRUE(output_references(group_using(env)));

  ProducerOutputs build;
  build.state = ProducerOutputs::State::completed;
  build.outputs["map"] = {{"big", std::string(4000, 'x')}, {"nul", std::string("a\0b", 3)}};
  json task = {{"spec", {{"env", json::object()}}}};
  for (int i = 0; i < 17; ++i) task["spec"]["env"]["V" + std::to_string(i)] = "$(groups.build.tasks.map.outputs.big)";
  EXPECT_EQ(with_outputs(task, {{"build", build}}).error().field, "spec.env");
  task["spec"]["env"] = {{"N", "$(groups.build.tasks.map.outputs.nul)"}};
  EXPECT_EQ(with_outputs(task, {{"build", build}}).error().message,
            "output nul of task map of group build holds a NUL character, which no environment can");
}

TEST(OutputReferences, AreReplacedByWhatTheTaskDeclared) {
  json task = {{"metadata", {{"name", "maps-publish-r0-upload"}}},
               {"spec",
                {{"env",
                  {{"DIGEST", "$(groups.build.tasks.map.outputs.digest)"},
                   {"CELLS", "n=$(groups.build.tasks.map.outputs.cells)"},
                   {"PLAIN", "as is"}}}}}};
  ProducerOutputs build;
  build.state = ProducerOutputs::State::completed;
  build.outputs["map"] = {{"digest", "sha256:9f"}, {"cells", 1412}};
  auto whole = with_outputs(task, {{"build", build}});
  ASSERT_TRUE(whole) << whole.error().to_string();
  EXPECT_EQ(whole.value()["spec"]["env"], json({{"DIGEST", "sha256:9f"}, {"CELLS", "n=1412"}, {"PLAIN", "as is"}}));

  build.outputs["map"].erase("cells");
  EXPECT_EQ(with_outputs(task, {{"build", build}}).error().to_string(),
            "spec.env.CELLS: task map of group build declared no output cells");
  build.state = ProducerOutputs::State::waiting;
  EXPECT_FALSE(with_outputs(task, {{"build", build}}));
  EXPECT_FALSE(with_outputs(task, {}));
}

}  // namespace
}  // namespace k8s4r::manager
