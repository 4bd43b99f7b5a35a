// The per-robot Secret as the manager and the bridge read it.
#include "k8s4r/crd/robot_secret.h"

#include <gtest/gtest.h>

namespace k8s4r::crd {
namespace {

using nlohmann::json;

json secret(const std::string& name, const std::string& label, const std::string& token_base64) {
  json made = {{"apiVersion", "v1"},
               {"kind", "Secret"},
               {"metadata", {{"name", name}, {"namespace", "fleet"}, {"annotations", {{"note", "x"}}}}},
               {"data", {{"token", token_base64}, {"ssh-key", "c2VjcmV0"}}}};
  if (!label.empty()) made["metadata"]["labels"][kRobotIdLabel] = label;
  return made;
}

TEST(RobotSecret, NamesItsRobotOnlyWhenNameAndLabelAgree) {
  EXPECT_EQ(robot_secret_name("robot-1"), "k8s4r-robot-robot-1");
  EXPECT_EQ(robot_of_secret(secret("k8s4r-robot-robot-1", "robot-1", "dG9rZW4=")), "robot-1");
  // Made for another robot, or by someone who could not label it: no robot's.
  EXPECT_EQ(robot_of_secret(secret("k8s4r-robot-robot-1", "robot-2", "dG9rZW4=")), "");
  EXPECT_EQ(robot_of_secret(secret("k8s4r-robot-robot-1", "", "dG9rZW4=")), "");
  EXPECT_EQ(robot_of_secret(json::array()), "");
}

TEST(RobotSecret, TheTokenIsDecodedAndNothingElseIsKept) {
  json kept = secret("k8s4r-robot-robot-1", "robot-1", "dG9rZW4=");
  keep_robot_secret_fields(kept);
  EXPECT_EQ(kept["data"], json({{"token", "dG9rZW4="}}));  // the SSH key never reaches memory
  EXPECT_FALSE(kept["metadata"].contains("annotations"));
  EXPECT_EQ(robot_secret_token(kept, "robot-1"), "token");
  EXPECT_FALSE(robot_secret_token(kept, "robot-2"));
  EXPECT_FALSE(robot_secret_token(secret("k8s4r-robot-robot-1", "robot-1", ""), "robot-1"));
  EXPECT_FALSE(robot_secret_token(secret("k8s4r-robot-robot-1", "robot-1", "!!not base64"), "robot-1"));
  for (json odd : {json(2), json::array(), json(nullptr)}) {  // found by fuzz_dynsec_responses: it threw
    EXPECT_NO_THROW(keep_robot_secret_fields(odd));
    EXPECT_EQ(robot_of_secret(odd), "");
  }
}

// `kubectl create secret generic --from-file=token=FILE` keeps the file's
// newline; the agent's --token-file drops it. The demo found a robot never
// approved this way.
TEST(RobotSecret, ATokenFromAFileIsTheSameTokenWithoutItsNewline) {
  EXPECT_EQ(robot_secret_token(secret("k8s4r-robot-robot-1", "robot-1", "dG9rZW4K"), "robot-1"), "token");  // "token\n"
  EXPECT_EQ(robot_secret_token(secret("k8s4r-robot-robot-1", "robot-1", "dG9rZW4NCg=="), "robot-1"),
            "token");                                                                             // "token\r\n"
  EXPECT_FALSE(robot_secret_token(secret("k8s4r-robot-robot-1", "robot-1", "Cg=="), "robot-1"));  // "\n"
}

}  // namespace
}  // namespace k8s4r::crd
