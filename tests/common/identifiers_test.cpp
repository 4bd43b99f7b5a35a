#include "k8s4r/common/identifiers.h"

#include <gtest/gtest.h>

#include <string>

namespace k8s4r {
namespace {

TEST(Identifiers, AcceptsDnsLabelsAndKubernetesUids) {
  for (const char* id : {"a", "robot-001", "r2d2", "0", "3f6c2b1e-9d7a-4c1b-8e2f-5a6b7c8d9e0f"}) {
    EXPECT_TRUE(validate_identifier(id)) << id;
  }
  EXPECT_TRUE(validate_identifier(std::string(63, 'a')));
}

TEST(Identifiers, RejectsWhatCouldBreakATopic) {
  for (const char* id : {"robot/1", "robot+", "#", "a/b/c", "+"}) {
    auto checked = validate_identifier(id);
    ASSERT_FALSE(checked) << id;
    EXPECT_NE(checked.error().message.find("'+', '#' or '/'"), std::string::npos) << id;
  }
}

TEST(Identifiers, RejectsWhatIsNotADnsLabel) {
  EXPECT_EQ(validate_identifier("").error().message, "must not be empty");
  EXPECT_EQ(validate_identifier(std::string(64, 'a')).error().message, "must be at most 63 characters, got 64");
  for (const char* id : {"Robot", "-robot", "robot-", "robot_1", "robot.1", "robot 1", "röbot"}) {
    auto checked = validate_identifier(id);
    ASSERT_FALSE(checked) << id;
    EXPECT_NE(checked.error().message.find("DNS-1123"), std::string::npos) << id;
  }
}

TEST(Identifiers, NamesTheField) {
  auto checked = validate_identifier("a+b", "robotId");
  ASSERT_FALSE(checked);
  EXPECT_EQ(checked.error().field, "robotId");
  EXPECT_EQ(checked.error().to_string().rfind("robotId: ", 0), 0u);
}

}  // namespace
}  // namespace k8s4r
