// Robot identities as dynamic-security commands, from values: what the
// bridge asks Mosquitto for, and what it reads back (the answers are those
// Mosquitto 2.0.11 gave in a real session, docs/security.md).
#include "k8s4r/bridge/dynsec_commands.h"

#include <gtest/gtest.h>

#include <set>

namespace k8s4r::bridge::dynsec {
namespace {

using nlohmann::json;

const Desired kToken{"s3cret-token", "sha256:aaaa"};

TEST(Dynsec, DecidesFromWhatShouldBeAndWhatIs) {
  EXPECT_EQ(decide(kToken, std::nullopt), Action::create);
  EXPECT_EQ(decide(std::nullopt, Managed{"sha256:aaaa"}), Action::remove);
  EXPECT_EQ(decide(kToken, Managed{"sha256:aaaa"}), Action::none);  // a restart changes nothing
  EXPECT_EQ(decide(kToken, Managed{"sha256:bbbb"}), Action::rotate);
  EXPECT_EQ(decide(kToken, Managed{""}), Action::rotate);  // a description someone edited
  EXPECT_EQ(decide(std::nullopt, std::nullopt), Action::none);
}

TEST(Dynsec, ARobotGetsARoleOfItsOwnTopicsAndALoginWithIt) {
  const json commands = commands_for(Action::create, "robot-1", kToken, "k8s4r-bridge-7-1");
  ASSERT_EQ(commands.size(), 2u);
  EXPECT_EQ(commands[0]["command"], "createRole");  // the role first: a client never exists without it
  EXPECT_EQ(commands[0]["rolename"], "k8s4r-robot-robot-1");
  std::multimap<std::string, std::string> acls;
  for (const json& acl : commands[0]["acls"]) {
    EXPECT_TRUE(acl["allow"].get<bool>());
    acls.emplace(acl["acltype"], acl["topic"]);
  }
  const std::multimap<std::string, std::string> expected{
      {"publishClientSend", "k8s4r/robots/robot-1/register"},
      {"publishClientSend", "k8s4r/robots/robot-1/heartbeat"},
      {"publishClientSend", "k8s4r/robots/robot-1/presence"},
      {"publishClientSend", "k8s4r/robots/robot-1/tasks/+/status"},
      {"publishClientSend", "k8s4r/robots/robot-1/logs/chunks/+"},
      {"subscribeLiteral", "k8s4r/robots/robot-1/response"},
      {"subscribeLiteral", "k8s4r/robots/robot-1/tasks/dispatch"},
      {"subscribeLiteral", "k8s4r/robots/robot-1/acks"},
      {"subscribeLiteral", "k8s4r/robots/robot-1/artifacts"},
      {"subscribeLiteral", "k8s4r/robots/robot-1/logs/request"},
      {"unsubscribeLiteral", "k8s4r/robots/robot-1/response"},
      {"unsubscribeLiteral", "k8s4r/robots/robot-1/tasks/dispatch"},
      {"unsubscribeLiteral", "k8s4r/robots/robot-1/acks"},
      {"unsubscribeLiteral", "k8s4r/robots/robot-1/artifacts"},
      {"unsubscribeLiteral", "k8s4r/robots/robot-1/logs/request"},
      {"publishClientReceive", "k8s4r/robots/robot-1/response"},
      {"publishClientReceive", "k8s4r/robots/robot-1/tasks/dispatch"},
      {"publishClientReceive", "k8s4r/robots/robot-1/acks"},
      {"publishClientReceive", "k8s4r/robots/robot-1/artifacts"},
      {"publishClientReceive", "k8s4r/robots/robot-1/logs/request"}};
  EXPECT_EQ(acls, expected);
  const json& client = commands[1];
  EXPECT_EQ(client["command"], "createClient");
  EXPECT_EQ(client["username"], "robot-1");
  EXPECT_EQ(client["password"], "s3cret-token");
  EXPECT_EQ(client["textname"], std::string(kManagedMark));
  EXPECT_EQ(client["textdescription"], "k8s4r token sha256:aaaa");  // the digest, so a restart can compare
  EXPECT_EQ(client["roles"], json::parse(R"([{"rolename":"k8s4r-robot-robot-1"}])"));
  for (const json& command : commands) EXPECT_EQ(command["correlationData"], "k8s4r-bridge-7-1");
}

TEST(Dynsec, RotationSetsThePasswordAndTheDigestAndRemovalDeletesBoth) {
  const json rotate =
      commands_for(Action::rotate, "robot-1", Desired{"new-token", "sha256:cccc"}, "c", Managed{"sha256:aaaa", ""});
  ASSERT_EQ(rotate.size(), 2u);
  EXPECT_EQ(rotate[0]["command"], "setClientPassword");
  EXPECT_EQ(rotate[0]["password"], "new-token");
  EXPECT_EQ(rotate[1]["command"], "modifyClient");
  // The digest it replaces too: a robot still registered with the old token is a rotation, not a stranger.
  EXPECT_EQ(rotate[1]["textdescription"], "k8s4r token sha256:cccc after sha256:aaaa");
  json listed =
      json::parse(R"j({"clients":[{"username":"robot-1","textname":"k8s4r robot (acks, artifacts, logs)"}]})j");
  listed["clients"][0]["textdescription"] = rotate[1]["textdescription"];
  EXPECT_EQ(managed_clients(listed).value().at("robot-1"), (Managed{"sha256:cccc", "sha256:aaaa"}));
  const json remove = commands_for(Action::remove, "robot-1", std::nullopt, "c");
  ASSERT_EQ(remove.size(), 2u);
  EXPECT_EQ(remove[0]["command"], "deleteClient");
  EXPECT_EQ(remove[0]["username"], "robot-1");
  EXPECT_EQ(remove[1]["command"], "deleteRole");
  EXPECT_EQ(remove[1]["rolename"], "k8s4r-robot-robot-1");
}

TEST(Dynsec, ARobotMadeBeforeATopicExistedHasItsRoleGivenWhatItLacksWithoutADisconnect) {
  const json listed = json::parse(R"j({"clients":[
      {"username":"robot-1","textname":"k8s4r robot","textdescription":"k8s4r token sha256:aaaa"},
      {"username":"robot-2","textname":"k8s4r robot (acks)","textdescription":"k8s4r token sha256:aaaa"},
      {"username":"robot-3","textname":"k8s4r robot (acks, artifacts, logs)","textdescription":"k8s4r token sha256:aaaa"},
      {"username":"robot-4","textname":"k8s4r robot (acks, artifacts)","textdescription":"k8s4r token sha256:aaaa"}]})j");
  const auto managed = managed_clients(listed).value();
  const Managed before = managed.at("robot-1"), before_artifacts = managed.at("robot-2"),
                before_logs = managed.at("robot-4");
  EXPECT_TRUE(before.lacks_acks && before.lacks_artifacts && !before.current);
  EXPECT_TRUE(!before_artifacts.lacks_acks && before_artifacts.lacks_artifacts && !before_artifacts.current);
  EXPECT_TRUE(!before_logs.lacks_acks && !before_logs.lacks_artifacts && !before_logs.current);
  EXPECT_EQ(decide(kToken, before_logs), Action::upgrade);
  EXPECT_TRUE(managed.at("robot-3").current);
  EXPECT_EQ(decide(kToken, before), Action::upgrade);
  EXPECT_EQ(decide(kToken, managed.at("robot-3")), Action::none);
  Managed rotated_before{"sha256:bbbb", ""};
  rotated_before.current = false;
  EXPECT_EQ(decide(kToken, rotated_before), Action::rotate);  // the token first; the upgrade follows
  const auto added_topics = [](const json& upgrade) {
    std::multimap<std::string, std::string> added;
    for (std::size_t i = 0; i + 1 < upgrade.size(); ++i) {
      EXPECT_EQ(upgrade[i]["command"], "addRoleACL");
      EXPECT_EQ(upgrade[i]["rolename"], "k8s4r-robot-robot-1");
      EXPECT_TRUE(upgrade[i]["allow"].get<bool>());
      added.emplace(upgrade[i]["topic"], upgrade[i]["acltype"]);
    }
    EXPECT_EQ(upgrade.back()["command"], "modifyClient");  // not setClientPassword or a role change: no disconnect
    EXPECT_EQ(upgrade.back()["textname"], std::string(kManagedMark));
    EXPECT_FALSE(upgrade.back().contains("password"));
    return added;
  };
  // Every older role lacks the logs topics: their requests to receive, their answers to send.
  const std::multimap<std::string, std::string> logs{{"k8s4r/robots/robot-1/logs/request", "subscribeLiteral"},
                                                     {"k8s4r/robots/robot-1/logs/request", "unsubscribeLiteral"},
                                                     {"k8s4r/robots/robot-1/logs/request", "publishClientReceive"},
                                                     {"k8s4r/robots/robot-1/logs/chunks/+", "publishClientSend"}};
  std::multimap<std::string, std::string> artifacts = logs;
  for (const char* type : {"subscribeLiteral", "unsubscribeLiteral", "publishClientReceive"})
    artifacts.emplace("k8s4r/robots/robot-1/artifacts", type);
  std::multimap<std::string, std::string> both = artifacts;
  for (const char* type : {"subscribeLiteral", "unsubscribeLiteral", "publishClientReceive"})
    both.emplace("k8s4r/robots/robot-1/acks", type);
  EXPECT_EQ(added_topics(commands_for(Action::upgrade, "robot-1", kToken, "c", before)), both);
  EXPECT_EQ(added_topics(commands_for(Action::upgrade, "robot-1", kToken, "c", before_artifacts)), artifacts);
  EXPECT_EQ(added_topics(commands_for(Action::upgrade, "robot-1", kToken, "c", before_logs)), logs);
}

TEST(Dynsec, NothingForAnIdThatCouldBreakATopic) {
  for (const char* id : {"robot/1", "#", "robot+1", "", "Robot"}) {
    EXPECT_TRUE(commands_for(Action::create, id, kToken, "c").empty()) << id;
    EXPECT_TRUE(commands_for(Action::remove, id, std::nullopt, "c").empty()) << id;
  }
}

TEST(Dynsec, ReadsAnswersAndKeepsOnlyTheClientsItMade) {
  const auto responses = parse_responses(
      R"({"responses":[{"command":"listClients","data":{"totalCount":4,"clients":[)"
      R"({"username":"admin","textname":"Dynsec admin user","roles":[{"rolename":"admin"}],"groups":[]},)"
      R"({"username":"k8s4r-bridge","roles":[{"rolename":"k8s4r-bridge"}],"groups":[]},)"
      R"({"username":"robot-1","textname":"k8s4r robot","textdescription":"k8s4r token sha256:aaaa","roles":[]},)"
      R"({"username":"Robot#2","textname":"k8s4r robot"}]},"correlationData":"k8s4r-bridge-7-1"}]})");
  ASSERT_TRUE(responses) << responses.error().to_string();
  ASSERT_EQ(responses.value().size(), 1u);
  EXPECT_EQ(responses.value()[0].correlation, "k8s4r-bridge-7-1");
  const auto managed = managed_clients(responses.value()[0].data);
  ASSERT_TRUE(managed);
  ASSERT_EQ(managed.value().size(), 1u);  // not the admin, not the bridge, not a name that is no robot id
  EXPECT_EQ(managed.value().at("robot-1").digest, "sha256:aaaa");
  EXPECT_FALSE(managed.value().at("robot-1").current);  // made before acks: its role lacks them

  const auto errors =
      parse_responses(R"({"responses":[{"command":"createRole","correlationData":"a"},)"
                      R"({"command":"createClient","error":"Client already exists","correlationData":"a"}]})");
  ASSERT_TRUE(errors);
  EXPECT_EQ(errors.value()[1].error, "Client already exists");
  // A terse listing (names only) is refused rather than read as "no clients".
  EXPECT_FALSE(managed_clients(json::parse(R"({"totalCount":1,"clients":["robot-1"]})")));
}

TEST(Dynsec, RefusesWhatIsNotAnAnswer) {
  for (const char* payload : {"", "not json", "[]", R"({"responses":{}})", R"({"responses":[1]})",
                              R"({"responses":[{"error":"x"}]})", R"({"responses":[{"command":"x","error":7}]})"}) {
    EXPECT_FALSE(parse_responses(payload)) << payload;
  }
  EXPECT_FALSE(parse_responses(std::string(100000, '[') + std::string(100000, ']')));
}

}  // namespace
}  // namespace k8s4r::bridge::dynsec
