// The Robot controller's decision from values: approval by token digest,
// liveness by heartbeat age and the Connected condition, and when to look
// again.
#include "k8s4r/manager/robot_lifecycle.h"

#include <gtest/gtest.h>

namespace k8s4r::manager {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

const Timestamp kNow = parse_rfc3339("2026-11-26T12:00:00Z").value();

std::string at(std::chrono::seconds before) { return format_rfc3339(kNow - before); }

json robot(const std::string& phase, std::optional<std::chrono::seconds> heartbeat_age = 5s,
           std::optional<std::string> token_digest = std::nullopt) {
  json resource = {{"metadata", {{"name", "r1"}}}, {"status", {{"phase", phase}}}};
  if (heartbeat_age) resource["status"]["lastHeartbeatTime"] = at(*heartbeat_age);
  if (token_digest) resource["status"]["tokenDigest"] = *token_digest;
  return resource;
}

void disconnect(json& resource, std::chrono::seconds ago) {
  resource["status"]["conditions"] = json::array(
      {{{"type", "Connected"}, {"status", "False"}, {"reason", "Disconnected"}, {"lastTransitionTime", at(ago)}}});
}

const RobotPolicy kOpen{false, 90s, 30s};
const RobotPolicy kLocked{};  // the default: approval by the Secret's token

TEST(RobotLifecycle, TheDefaultPolicyApprovesOnlyByTheSecretsToken) {
  EXPECT_TRUE(kLocked.require_token);
  EXPECT_EQ(judge_robot(robot("Pending", 5s, crd::token_digest("t")), std::nullopt, kLocked, kNow).phase,
            crd::RobotPhase::pending);
}

// The bridge creates a Robot, then writes its registration (token digest and
// first heartbeat) as its status: judged in between, it must not flap through
// Rejected, which under dynamic security would have cost it its login.
TEST(RobotLifecycle, ARobotWhoseRegistrationIsNotRecordedYetStaysPending) {
  json created = {{"metadata", {{"name", "r1"}}}, {"spec", {{"robotId", "r1"}}}};
  const RobotVerdict verdict = judge_robot(created, crd::token_digest("s3cret"), kLocked, kNow);
  EXPECT_EQ(verdict.phase, crd::RobotPhase::pending);
  EXPECT_EQ(verdict.message, "waiting for its agent to register");
  // Once recorded, a registration without a token is judged as such.
  EXPECT_EQ(judge_robot(robot("Pending", 5s), crd::token_digest("s3cret"), kLocked, kNow).phase,
            crd::RobotPhase::rejected);
}

TEST(RobotLifecycle, WithoutATokenCheckEveryRobotThatHeartbeatsIsOnline) {
  const RobotVerdict verdict = judge_robot(robot("Pending", 10s), std::nullopt, kOpen, kNow);
  EXPECT_EQ(verdict.phase, crd::RobotPhase::online);
  EXPECT_EQ(verdict.recheck_after, 80s);  // when its heartbeat would be 90 s old
}

TEST(RobotLifecycle, WithATokenCheckTheSecretDecides) {
  const std::string digest = crd::token_digest("s3cret");
  RobotVerdict verdict = judge_robot(robot("Pending", 5s, digest), std::nullopt, kLocked, kNow);
  EXPECT_EQ(verdict.phase, crd::RobotPhase::pending);
  EXPECT_NE(verdict.message.find("waiting for Secret k8s4r-robot-r1"), std::string::npos) << verdict.message;

  verdict = judge_robot(robot("Pending", 5s, digest), crd::token_digest("s3cret"), kLocked, kNow);
  EXPECT_EQ(verdict.phase, crd::RobotPhase::online);

  verdict = judge_robot(robot("Pending", 5s, digest), crd::token_digest("other"), kLocked, kNow);
  EXPECT_EQ(verdict.phase, crd::RobotPhase::rejected);
  EXPECT_NE(verdict.message.find("not the one in Secret k8s4r-robot-r1"), std::string::npos) << verdict.message;
  EXPECT_EQ(verdict.message.find("s3cret"), std::string::npos);  // no token in a message, ever

  verdict = judge_robot(robot("Pending", 5s), crd::token_digest("s3cret"), kLocked, kNow);
  EXPECT_EQ(verdict.phase, crd::RobotPhase::rejected);
  EXPECT_NE(verdict.message.find("without a token"), std::string::npos) << verdict.message;

  // Rejected is not for ever: a Secret rotated to the robot's token approves it.
  verdict = judge_robot(robot("Rejected", 5s, digest), crd::token_digest("s3cret"), kLocked, kNow);
  EXPECT_EQ(verdict.phase, crd::RobotPhase::online);
}

TEST(RobotLifecycle, AnOldHeartbeatMakesARobotOfflineAndANewOneOnlineAgain) {
  RobotVerdict verdict = judge_robot(robot("Online", 91s), std::nullopt, kOpen, kNow);
  EXPECT_EQ(verdict.phase, crd::RobotPhase::offline);
  EXPECT_NE(verdict.message.find("no heartbeat since 2026-11-26T11:58:29Z"), std::string::npos) << verdict.message;
  EXPECT_FALSE(verdict.recheck_after);  // only a heartbeat changes it
  EXPECT_EQ(judge_robot(robot("Offline", 1s), std::nullopt, kOpen, kNow).phase, crd::RobotPhase::online);
  // Registered and not yet heard from: Pending (no Offline Event on every registration), nothing placed on it.
  const RobotVerdict unheard = judge_robot(robot("Pending", std::nullopt), std::nullopt, kOpen, kNow);
  EXPECT_EQ(unheard.phase, crd::RobotPhase::pending);
  EXPECT_EQ(unheard.message, "approved; waiting for its first heartbeat");
}

TEST(RobotLifecycle, TimesCenturiesOffAreVeryOldNotAnOverflow) {
  // Found by the fuzzer: 2026 less 1706 does not fit in 64-bit nanoseconds.
  json resource = robot("Online", 5s);
  resource["status"]["conditions"] = json::array({{{"type", "Connected"},
                                                   {"status", "False"},
                                                   {"reason", "Disconnected"},
                                                   {"lastTransitionTime", "1706-11-26T10:59:40Z"}}});
  EXPECT_EQ(judge_robot(resource, std::nullopt, kOpen, kNow).phase, crd::RobotPhase::offline);
  resource = robot("Online", std::nullopt);
  resource["status"]["lastHeartbeatTime"] = "1690-01-01T00:00:00Z";
  EXPECT_EQ(judge_robot(resource, std::nullopt, kOpen, kNow).phase, crd::RobotPhase::offline);
}

TEST(RobotLifecycle, ADisconnectedRobotIsOfflineOnceItsGraceIsOver) {
  json resource = robot("Online", 5s);
  disconnect(resource, 10s);
  RobotVerdict verdict = judge_robot(resource, std::nullopt, kOpen, kNow);
  EXPECT_EQ(verdict.phase, crd::RobotPhase::online);
  EXPECT_EQ(verdict.recheck_after, 20s);  // when its 30 s of grace are over
  disconnect(resource, 31s);
  verdict = judge_robot(resource, std::nullopt, kOpen, kNow);
  EXPECT_EQ(verdict.phase, crd::RobotPhase::offline);
  EXPECT_NE(verdict.message.find("disconnected from the broker since 2026-11-26T11:59:29Z"), std::string::npos)
      << verdict.message;
}

// Judging again later writes nothing when nothing changed: the messages name
// times, not ages, so a controller that looks often does not write often.
TEST(RobotLifecycle, APatchOnlyWhenThePhaseOrItsReasonChanges) {
  json resource = robot("Online", 95s);
  const RobotVerdict first = judge_robot(resource, std::nullopt, kOpen, kNow);
  const json patch = robot_verdict_patch(resource, first);
  ASSERT_TRUE(patch.is_object());
  EXPECT_EQ(patch["status"]["phase"], "Offline");
  resource["status"].update(patch["status"]);
  const RobotVerdict later = judge_robot(resource, std::nullopt, kOpen, kNow + 60s);
  EXPECT_TRUE(robot_verdict_patch(resource, later).is_null());
}

}  // namespace
}  // namespace k8s4r::manager
