// The manager's settings: defaults, flags and K8S4R_* variables, and every
// error at once (the leader election's timings checked as client-go does).
#include "k8s4r/manager/config.h"

#include <gtest/gtest.h>

#include <map>

namespace k8s4r::manager {
namespace {

using namespace std::chrono_literals;

ManagerConfigOutcome parse(const std::vector<std::string>& args, std::map<std::string, std::string> env = {}) {
  return parse_manager_config(
      args,
      [env](const std::string& name) {
        auto found = env.find(name);
        return found == env.end() ? std::string() : found->second;
      },
      "/nonexistent/manager.yaml");
}

TEST(ManagerConfig, DefaultsAreTheIssuesAndClientGos) {
  const auto outcome = parse({});
  ASSERT_TRUE(outcome.config) << outcome.output;
  const ManagerConfig& config = *outcome.config;
  EXPECT_TRUE(config.require_robot_token);  // safe by default: approval by the robot's Secret
  EXPECT_EQ(config.robot_offline_after, 90s);
  EXPECT_EQ(config.disconnect_grace, 30s);
  EXPECT_EQ(config.dispatch_timeout, 2min);
  EXPECT_TRUE(config.leader_elect);
  EXPECT_EQ(config.lease_duration, 15s);
  EXPECT_EQ(config.renew_deadline, 10s);
  EXPECT_EQ(config.retry_period, 2s);
  EXPECT_TRUE(config.namespace_.empty());  // every namespace
  EXPECT_EQ(config.cache_entry_max_age, 168h);
  EXPECT_EQ(config.cache_max_entries, 10000u);
}

TEST(ManagerConfig, TheResultCachesBounds) {
  auto outcome = parse({"--cache-entry-max-age", "1h"}, {{"K8S4R_CACHE_MAX_ENTRIES", "50"}});
  ASSERT_TRUE(outcome.config) << outcome.output;
  EXPECT_EQ(outcome.config->cache_entry_max_age, 1h);
  EXPECT_EQ(outcome.config->cache_max_entries, 50u);
  outcome = parse({"--cache-entry-max-age", "0s", "--cache-max-entries", "0"});
  ASSERT_FALSE(outcome.config);
  EXPECT_NE(outcome.output.find("cache-entry-max-age"), std::string::npos) << outcome.output;
  EXPECT_NE(outcome.output.find("cache-max-entries"), std::string::npos) << outcome.output;
}

TEST(ManagerConfig, FlagsOverTheEnvironment) {
  const auto outcome = parse({"--require-robot-token", "true", "--robot-offline-after", "2m", "--namespace", "fleet"},
                             {{"K8S4R_ROBOT_OFFLINE_AFTER", "5m"}, {"K8S4R_LEADER_ELECT", "false"}});
  ASSERT_TRUE(outcome.config) << outcome.output;
  EXPECT_TRUE(outcome.config->require_robot_token);
  EXPECT_EQ(outcome.config->robot_offline_after, 2min);
  EXPECT_FALSE(outcome.config->leader_elect);
  EXPECT_EQ(outcome.config->namespace_, "fleet");
}

// controller-runtime's convention: a bool flag alone is true, =false turns it off.
TEST(ManagerConfig, BoolsAreSwitchesAsInKubernetes) {
  auto outcome = parse({"--leader-elect", "--require-robot-token"});
  ASSERT_TRUE(outcome.config) << outcome.output;
  EXPECT_TRUE(outcome.config->leader_elect);
  EXPECT_TRUE(outcome.config->require_robot_token);
  outcome = parse({"--require-robot-token=false", "--leader-elect=false"});
  ASSERT_TRUE(outcome.config) << outcome.output;
  EXPECT_FALSE(outcome.config->leader_elect);
  EXPECT_FALSE(outcome.config->require_robot_token);
  outcome = parse({"--help"});
  EXPECT_NE(outcome.output.find("Usage: k8s4r-manager"), std::string::npos) << outcome.output;
  EXPECT_NE(outcome.output.find("--leader-elect bool"), std::string::npos) << outcome.output;
  EXPECT_NE(outcome.output.find("--robot-offline-after duration"), std::string::npos) << outcome.output;
  EXPECT_NE(outcome.output.find("--metrics-bind-address host:port"), std::string::npos) << outcome.output;
  EXPECT_NE(outcome.output.find("--kubeconfig path"), std::string::npos) << outcome.output;
}

TEST(ManagerConfig, EveryErrorAtOnce) {
  const auto outcome = parse({"--disconnect-grace", "soon", "--namespace", "Not/A/Namespace",
                              "--leader-election-lease-duration", "5s", "--leader-election-retry-period", "9s"});
  ASSERT_FALSE(outcome.config);
  EXPECT_EQ(outcome.exit_code, 2);
  for (const char* named : {"disconnect-grace", "namespace", "must be longer than leader-election-renew-deadline",
                            "must be longer than 1.2 x leader-election-retry-period"}) {
    EXPECT_NE(outcome.output.find(named), std::string::npos) << named << " missing from:\n" << outcome.output;
  }
}

TEST(ManagerConfig, HelpNamesEverySetting) {
  const auto outcome = parse({"--help"});
  EXPECT_FALSE(outcome.config);
  EXPECT_EQ(outcome.exit_code, 0);
  for (const char* flag : {"--require-robot-token", "--robot-offline-after", "--disconnect-grace", "--dispatch-timeout",
                           "--leader-elect", "--leader-election-identity", "--metrics-bind-address"}) {
    EXPECT_NE(outcome.output.find(flag), std::string::npos) << flag;
  }
}

}  // namespace
}  // namespace k8s4r::manager
