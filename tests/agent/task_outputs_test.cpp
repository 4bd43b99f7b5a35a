#include "k8s4r/agent/task_outputs.h"

#include "k8s4r/testing/temp_dir.h"

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace k8s4r::agent {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

void write(const fs::path& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

TEST(TaskOutputs, AreWhatTheTaskWroteOrNoneWhenItWroteNothing) {
  testing::TempDir dir;
  const std::string path = (dir / "outputs.json").string();
  auto none = read_task_outputs(path);
  ASSERT_TRUE(none);
  EXPECT_FALSE(none.value());

  write(path, "{\n  \"mapDigest\": \"sha256:9f\",\n  \"cells\": 1412\n}\n");
  auto outputs = read_task_outputs(path);
  ASSERT_TRUE(outputs) << outputs.error().to_string();
  EXPECT_EQ(outputs.value(), json::parse(R"({"mapDigest":"sha256:9f","cells":1412})"));
}

TEST(TaskOutputs, WhatCannotBeUsedIsAnErrorThatSaysWhy) {
  testing::TempDir dir;
  const std::string path = (dir / "outputs.json").string();
  write(path, "[\"not\", \"an object\"]");
  EXPECT_EQ(read_task_outputs(path).error().message, "outputs.json must be a JSON object, got array");
  write(path, "{\"a\": ");
  EXPECT_EQ(read_task_outputs(path).error().message, "outputs.json is not valid JSON");
  write(path, "{\"a\": \"" + std::string(5000, 'x') + "\"}");
  EXPECT_EQ(read_task_outputs(path).error().message, "outputs.json holds more than 4096 bytes (5009)");
}

// The task's user owns its directory: what it put at the name is read only
// as a plain file of its own, never through a link (the agent is root).
TEST(TaskOutputs, AreReadOnlyFromAPlainFileOfTheTasksOwn) {
  testing::TempDir dir;
  const std::string path = (dir / "outputs.json").string();
  write(dir / "secret", "{\"root\": \"only\"}");
  fs::create_symlink(dir / "secret", path);
  EXPECT_EQ(read_task_outputs(path).error().message,
            "outputs.json is not a plain file of the task's own (a symbolic link)");
  fs::remove(path);
  fs::create_hard_link(dir / "secret", path);
  EXPECT_EQ(read_task_outputs(path).error().message,
            "outputs.json is not a plain file of the task's own (a link or a special file)");
  fs::remove(path);
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);  // would block a reader that waited for a writer
  EXPECT_EQ(read_task_outputs(path).error().message,
            "outputs.json is not a plain file of the task's own (a link or a special file)");
}

}  // namespace
}  // namespace k8s4r::agent
