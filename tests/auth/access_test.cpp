// Who the k8s4r-auth plugin lets in and what each may touch
// (broker-plugin/access.h): docs/security.md's topic table, per user class.
#include "k8s4r/auth/access.h"

#include "k8s4r/common/slots.h"
#include "k8s4r/crd/resources.h"

#include <gtest/gtest.h>

namespace k8s4r::auth {
namespace {

const Users kUsers{{"k8s4r-bridge"}, {"k8s4r-operator"}};

// A table holding robot-1 with the digest the bridge computes from its
// Secret's token (crd::token_digest): the plugin must agree with it.
LoginTable table_with(const std::string& robot, const std::string& token) {
  LoginTable table;
  auto digest = logins::parse_digest(crd::token_digest(token));
  EXPECT_TRUE(digest);
  table.apply(logins::Batch{"c", {logins::Section{slot_of(robot), 1, false, {{robot, digest.value()}}}}});
  return table;
}

TEST(Access, ARobotLogsInWithItsTokenUnderItsOwnIdOnly) {
  const LoginTable table = table_with("robot-1", "token-1");
  EXPECT_EQ(decide_login(kUsers, table, "robot-1", "token-1", "robot-1"), Verdict::allow);
  EXPECT_EQ(decide_login(kUsers, table, "robot-1", "token-2", "robot-1"), Verdict::deny);
  EXPECT_EQ(decide_login(kUsers, table, "robot-1", "token-1", "robot-2"), Verdict::deny);  // takes robot-2's session
  EXPECT_EQ(decide_login(kUsers, table, "robot-1", nullptr, "robot-1"), Verdict::deny);
  EXPECT_EQ(decide_login(kUsers, table, "robot-2", "token-1", "robot-2"), Verdict::deny);  // no login
  EXPECT_EQ(decide_login(kUsers, table, "robot/1", "token-1", "robot/1"), Verdict::deny);
  EXPECT_EQ(decide_login(kUsers, table, "robot-1", "", "robot-1"), Verdict::deny);
}

TEST(Access, TheBridgeOperatorsAndAnonymousAreLeftToTheOtherChecks) {
  const LoginTable table = table_with("robot-1", "token-1");
  EXPECT_EQ(decide_login(kUsers, table, "k8s4r-bridge", "x", "anything"), Verdict::defer);
  EXPECT_EQ(decide_login(kUsers, table, "k8s4r-operator", "x", "anything"), Verdict::defer);
  EXPECT_EQ(decide_login(kUsers, table, nullptr, nullptr, "anything"), Verdict::defer);
}

TEST(Access, ARobotTouchesItsOwnTopicsOnlyAndEachOnlyOneWay) {
  const LoginTable table = table_with("robot-1", "token-1");
  const auto robot = [&](std::string_view topic, int access) {
    return decide_access(kUsers, table, "robot-1", "robot-1", topic, access);
  };
  for (const std::string_view topic :
       {"k8s4r/robots/robot-1/register", "k8s4r/robots/robot-1/heartbeat", "k8s4r/robots/robot-1/presence",
        "k8s4r/robots/robot-1/tasks/0b8e-7/status", "k8s4r/robots/robot-1/logs/chunks/k8s4r-bridge"}) {
    EXPECT_EQ(robot(topic, kWrite), Verdict::allow) << topic;
    EXPECT_EQ(robot(topic, kRead), Verdict::deny) << topic;
    EXPECT_EQ(robot(topic, kSubscribe), Verdict::deny) << topic;
  }
  for (const std::string_view topic :
       {"k8s4r/robots/robot-1/response", "k8s4r/robots/robot-1/tasks/dispatch", "k8s4r/robots/robot-1/acks",
        "k8s4r/robots/robot-1/artifacts", "k8s4r/robots/robot-1/logs/request"}) {
    EXPECT_EQ(robot(topic, kSubscribe), Verdict::allow) << topic;
    EXPECT_EQ(robot(topic, kRead), Verdict::allow) << topic;
    EXPECT_EQ(robot(topic, kUnsubscribe), Verdict::allow) << topic;
    EXPECT_EQ(robot(topic, kWrite), Verdict::deny) << topic;
  }
  for (const std::string_view topic :
       {"k8s4r/robots/robot-2/heartbeat", "k8s4r/robots/robot-2/tasks/dispatch", "k8s4r/robots/+/heartbeat", "k8s4r/#",
        "k8s4r/robots/robot-2/logs/chunks/k8s4r-bridge", "k8s4r/robots/robot-2/logs/request", "k8s4r/register",
        "k8s4r/heartbeat", "$CONTROL/k8s4r-logins/v1", "$CONTROL/k8s4r-logins/v1/response",
        "$CONTROL/dynamic-security/v1", "#", ""}) {
    for (const int access : {kRead, kWrite, kSubscribe})
      EXPECT_EQ(robot(topic, access), Verdict::deny) << topic << " " << access;
  }
  // Not in the table (revoked while connected), or under another client id:
  // nothing at all.
  EXPECT_EQ(decide_access(kUsers, table, "robot-2", "robot-2", "k8s4r/robots/robot-2/heartbeat", kWrite),
            Verdict::deny);
  EXPECT_EQ(decide_access(kUsers, table, "robot-1", "other", "k8s4r/robots/robot-1/heartbeat", kWrite), Verdict::deny);
  EXPECT_EQ(decide_access(kUsers, table, nullptr, "robot-1", "k8s4r/robots/robot-1/heartbeat", kWrite), Verdict::deny);
}

TEST(Access, OnlyTheBridgeSendsLoginBatchesAndReadsTheirAnswers) {
  const LoginTable table;
  const std::string_view control = logins::kControlTopic, answers = logins::kResponseTopic;
  EXPECT_EQ(decide_access(kUsers, table, "k8s4r-bridge", "b", control, kWrite), Verdict::allow);
  EXPECT_EQ(decide_access(kUsers, table, "k8s4r-bridge", "b", answers, kSubscribe), Verdict::allow);
  EXPECT_EQ(decide_access(kUsers, table, "k8s4r-bridge", "b", answers, kRead), Verdict::allow);
  EXPECT_EQ(decide_access(kUsers, table, "k8s4r-bridge", "b", answers, kWrite), Verdict::deny);  // no forged answers
  EXPECT_EQ(decide_access(kUsers, table, "k8s4r-bridge", "b", "k8s4r/robots/robot-1/heartbeat", kRead), Verdict::defer);
  for (const int access : {kRead, kWrite, kSubscribe}) {
    EXPECT_EQ(decide_access(kUsers, table, "k8s4r-operator", "o", control, access), Verdict::deny);
    EXPECT_EQ(decide_access(kUsers, table, "k8s4r-operator", "o", answers, access), Verdict::deny);
  }
  EXPECT_EQ(decide_access(kUsers, table, "k8s4r-operator", "o", "k8s4r/robots/robot-1/heartbeat", kRead),
            Verdict::defer);
}

TEST(Access, UserListsAreCommaSeparated) {
  EXPECT_EQ(parse_user_list(" a, b,,c ,"), (std::set<std::string, std::less<>>{"a", "b", "c"}));
  EXPECT_TRUE(parse_user_list("").empty());
}

}  // namespace
}  // namespace k8s4r::auth
