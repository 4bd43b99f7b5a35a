// The bridge's settings: its safe defaults and bools read as Kubernetes'
// daemons read theirs.
#include "k8s4r/bridge/config.h"

#include <gtest/gtest.h>

#include <map>

namespace k8s4r::bridge {
namespace {

BridgeConfigOutcome parse(std::vector<std::string> args) {
  args.insert(args.begin(), {"--broker-url", "tcp://broker:1883"});
  return parse_bridge_config(
      args, [](const std::string&) { return std::string(); }, "/nonexistent/bridge.yaml");
}

TEST(BridgeConfig, GoK8s4rsSharedTopicsAreOffUnlessAskedFor) {
  auto outcome = parse({});
  ASSERT_TRUE(outcome.config) << outcome.output;
  EXPECT_FALSE(outcome.config->legacy_topics);  // where any client can name any robot
  EXPECT_FALSE(outcome.config->dynamic_security);
  outcome = parse({"--legacy-topics"});
  ASSERT_TRUE(outcome.config) << outcome.output;
  EXPECT_TRUE(outcome.config->legacy_topics);
  outcome = parse({"--legacy-topics=false"});
  ASSERT_TRUE(outcome.config) << outcome.output;
  EXPECT_FALSE(outcome.config->legacy_topics);
}

TEST(BridgeConfig, LogsAreServedOnlyWhereAskedAndTokensOnlyOverTlsOffLoopback) {
  auto outcome = parse({});
  ASSERT_TRUE(outcome.config) << outcome.output;
  EXPECT_EQ(outcome.config->logs_bind_address, "");  // off by default
  outcome = parse({"--logs-bind-address", "127.0.0.1:10350"});
  ASSERT_TRUE(outcome.config) << outcome.output;
  outcome = parse({"--logs-bind-address", "0.0.0.0:10350"});
  ASSERT_FALSE(outcome.config);
  EXPECT_NE(outcome.output.find("carries bearer tokens"), std::string::npos) << outcome.output;
}

TEST(BridgeConfig, AnyClientIdGivesLogAnswersATopicLevelOfTheirOwn) {
  auto outcome = parse({"--client-id", "Bridge_Prod.1"});  // a valid MQTT client id, not a DNS label
  ASSERT_TRUE(outcome.config) << outcome.output;
  const std::string reply_to = outcome.config->log_reply_to();
  EXPECT_EQ(reply_to.rfind("bridge-", 0), 0u) << reply_to;
  EXPECT_EQ(reply_to.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-"), std::string::npos) << reply_to;
  outcome = parse({"--client-id", "Bridge_Prod.2"});
  EXPECT_NE(outcome.config->log_reply_to(), reply_to);
  outcome = parse({"--client-id", "k8s4r-bridge", "--replica-id", "bridge-0"});
  EXPECT_EQ(outcome.config->log_reply_to(), "k8s4r-bridge-bridge-0");  // the client id itself when it can be
}

TEST(BridgeConfig, HelpNamesTheProgramAndEachType) {
  const auto outcome = parse({"--help"});
  EXPECT_FALSE(outcome.config);
  EXPECT_EQ(outcome.exit_code, 0);
  for (const char* shown :
       {"Usage: k8s4r-bridge", "--broker-url url", "--legacy-topics bool", "--heartbeat-write-interval duration",
        "--metrics-bind-address host:port", "--mqtt-password-file path", "--kube-writers count"}) {
    EXPECT_NE(outcome.output.find(shown), std::string::npos) << shown << "\n" << outcome.output;
  }
}

TEST(BridgeConfig, AReplicaHasItsOwnSessionAndLeaseTimingsThatLetItStopBeforeAnotherTakesOver) {
  auto outcome = parse({});
  ASSERT_TRUE(outcome.config) << outcome.output;
  EXPECT_TRUE(outcome.config->replica_id.empty());  // one bridge, every robot
  EXPECT_EQ(outcome.config->mqtt_client_id(), "k8s4r-bridge");
  outcome = parse({"--replica-id", "bridge-1"});
  ASSERT_TRUE(outcome.config) << outcome.output;
  EXPECT_EQ(outcome.config->mqtt_client_id(), "k8s4r-bridge-bridge-1");

  for (const char* bad : {"Bridge-1", "a/b", "a+b", "a#b"}) {
    outcome = parse({"--replica-id", bad});
    EXPECT_FALSE(outcome.config) << bad;
    EXPECT_NE(outcome.output.find("replica-id"), std::string::npos) << outcome.output;
  }
  // Every error at once.
  outcome = parse({"--replica-id", "bridge-1", "--replica-lease-duration", "5s", "--replica-renew-deadline", "5s",
                   "--replica-retry-period", "5s", "--dynamic-security", "--mqtt-username", "bridge"});
  ASSERT_FALSE(outcome.config);
  for (const char* said :
       {"replica-lease-duration (5s, in whole seconds) must be longer than replica-renew-deadline (5s)",
        "replica-renew-deadline (5s) must be longer than 1.2 x replica-retry-period (5s)",
        "dynamic-security is for one bridge"}) {
    EXPECT_NE(outcome.output.find(said), std::string::npos) << said << "\n" << outcome.output;
  }
}

TEST(BridgeConfig, TheLoginPluginNeedsTheBridgesOwnUserAndExcludesDynamicSecurity) {
  auto outcome = parse({"--login-plugin"});
  ASSERT_FALSE(outcome.config);
  EXPECT_NE(outcome.output.find("login-plugin needs mqtt-username"), std::string::npos) << outcome.output;
  outcome = parse({"--login-plugin", "--dynamic-security", "--mqtt-username", "k8s4r-bridge"});
  ASSERT_FALSE(outcome.config);
  EXPECT_NE(outcome.output.find("both manage robots' broker logins: choose one"), std::string::npos) << outcome.output;
  // With replicas it is allowed: each sends its own slots under their epochs.
  outcome = parse({"--login-plugin", "--mqtt-username", "k8s4r-bridge", "--replica-id", "bridge-1"});
  ASSERT_TRUE(outcome.config) << outcome.output;
  EXPECT_TRUE(outcome.config->login_plugin);
  EXPECT_FALSE(parse({}).config->login_plugin);
}

}  // namespace
}  // namespace k8s4r::bridge
