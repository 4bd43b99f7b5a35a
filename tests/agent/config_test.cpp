#include "k8s4r/agent/config.h"

#include "k8s4r/testing/temp_dir.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace k8s4r::agent {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

class AgentConfigTest : public ::testing::Test {
 protected:
  std::string file(const std::string& text) {
    const fs::path path = dir_ / "agent.yaml";
    std::ofstream(path) << text;
    return path.string();
  }
  AgentConfigOutcome parse(std::vector<std::string> args, std::map<std::string, std::string> env = {}) {
    return parse_agent_config(
        args,
        [env](const std::string& name) {
          auto it = env.find(name);
          return it == env.end() ? std::string() : it->second;
        },
        (dir_ / "absent.yaml").string());
  }

  testing::TempDir dir_;
};

TEST_F(AgentConfigTest, DefaultsThenFileThenEnvironmentThenFlags) {
  const std::string path = file(
      "broker-url: tcp://file:1883\nrobot-id: robot-file\nheartbeat-interval: 10s\nwork-dir: /srv/k8s4r\n"
      "labels:\n  zone: lab-a\n  env: dev\n");
  auto outcome = parse({"--config", path, "--robot-id", "robot-flag"},
                       {{"K8S4R_ROBOT_ID", "robot-env"}, {"K8S4R_HEARTBEAT_INTERVAL", "1m30s"}});
  ASSERT_TRUE(outcome.config) << outcome.output;
  const AgentConfig& config = *outcome.config;
  EXPECT_EQ(config.broker_url, "tcp://file:1883");  // file
  EXPECT_EQ(config.heartbeat_interval, 90s);        // environment over file
  EXPECT_EQ(config.robot_id, "robot-flag");         // flag over environment
  EXPECT_EQ(config.work_dir, "/srv/k8s4r");
  EXPECT_EQ(config.labels, (std::map<std::string, std::string>{{"env", "dev"}, {"zone", "lab-a"}}));
  EXPECT_EQ(config.default_kill_timeout, 5s);  // default
  EXPECT_EQ(config.config_file, path);
}

TEST_F(AgentConfigTest, ReportsEveryErrorTogether) {
  const std::string path = file("robot-id: Robot_1\nheartbeat: 5s\n");
  auto outcome = parse({"--config", path, "--heartbeat-interval", "soon", "--labels", "novalue"});
  ASSERT_FALSE(outcome.config);
  EXPECT_EQ(outcome.exit_code, 2);
  for (const char* expected : {"robot-id: must be a DNS-1123 label", "unknown setting 'heartbeat'",
                               "--heartbeat-interval: heartbeat-interval: invalid Go duration 'soon'",
                               "labels: must be k=v pairs", "broker-url is required"}) {
    EXPECT_NE(outcome.output.find(expected), std::string::npos) << expected << "\n" << outcome.output;
  }
}

TEST_F(AgentConfigTest, WhoTasksRunAsAndWhetherRootIsAllowed) {
  const std::vector<std::string> base = {"--broker-url", "tcp://b:1883", "--robot-id", "r"};
  auto defaults = parse(base);
  ASSERT_TRUE(defaults.config) << defaults.output;
  EXPECT_EQ(defaults.config->task_user, "");  // the agent's own user
  EXPECT_TRUE(defaults.config->allow_root_tasks);
  auto args = base;
  args.insert(args.end(), {"--task-user", "nobody", "--allow-root-tasks", "false"});
  auto locked = parse(args);
  ASSERT_TRUE(locked.config) << locked.output;
  EXPECT_EQ(locked.config->task_user, "nobody");
  EXPECT_FALSE(locked.config->allow_root_tasks);
  args = base;
  args.insert(args.end(), {"--task-user", "no-such-user-here", "--allow-root-tasks", "no"});
  auto bad = parse(args);
  ASSERT_FALSE(bad.config);
  EXPECT_NE(bad.output.find("no user 'no-such-user-here'"), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("must be true or false, got 'no'"), std::string::npos) << bad.output;
}

TEST_F(AgentConfigTest, TheTokenFromAFileAndTheTopicsItSpeaksOn) {
  const fs::path token = dir_ / "token";
  std::ofstream(token) << "robot-secret\n";
  auto outcome = parse({"--broker-url", "tcp://b:1883", "--robot-id", "r1", "--token-file", token.string()});
  ASSERT_TRUE(outcome.config) << outcome.output;
  EXPECT_EQ(outcome.config->token, "robot-secret");
  EXPECT_FALSE(outcome.config->legacy_topics);  // its own topics, which the broker can confine it to
  outcome = parse({"--broker-url", "tcp://b:1883", "--robot-id", "r1", "--legacy-topics", "true"});
  ASSERT_TRUE(outcome.config) << outcome.output;
  EXPECT_TRUE(outcome.config->legacy_topics);
  outcome = parse({"--broker-url", "tcp://b:1883", "--robot-id", "r1", "--token-file", (dir_ / "none").string()});
  ASSERT_FALSE(outcome.config);
  EXPECT_NE(outcome.output.find("token-file: no such file"), std::string::npos) << outcome.output;
}

TEST_F(AgentConfigTest, HelpAndVersion) {
  auto help = parse({"--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.output.find("--heartbeat-interval"), std::string::npos);
  EXPECT_NE(help.output.find("K8S4R_HEARTBEAT_INTERVAL"), std::string::npos);
  auto version = parse({"--version"});
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_EQ(version.output.rfind("k8s4r-agent ", 0), 0u);
  EXPECT_EQ(parse({"--no-such-flag"}).exit_code, 2);
}

TEST_F(AgentConfigTest, EnvironmentAloneIsEnough) {
  auto outcome = parse(
      {},
      {{"K8S4R_BROKER_URL", "tcp://127.0.0.1:1883"}, {"K8S4R_ROBOT_ID", "robot-001"}, {"K8S4R_LABELS", "zone=lab-a"}});
  ASSERT_TRUE(outcome.config) << outcome.output;
  EXPECT_EQ(outcome.config->labels.at("zone"), "lab-a");
}

}  // namespace
}  // namespace k8s4r::agent
