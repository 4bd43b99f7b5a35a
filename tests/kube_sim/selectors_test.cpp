#include "k8s4r/kube_sim/selectors.h"

#include <gtest/gtest.h>

namespace k8s4r::kube_sim {
namespace {

using nlohmann::json;

bool labels_match(const char* selector, const json& labels) {
  auto parsed = LabelSelector::parse(selector);
  EXPECT_TRUE(parsed) << selector;
  return parsed && parsed.value().matches(labels);
}

TEST(LabelSelector, EqualityInequalityAndExistence) {
  const json labels = {{"env", "dev"}, {"zone", "lab-a"}, {"app.kubernetes.io/name", "k8s4r"}};
  EXPECT_TRUE(labels_match("", labels));
  EXPECT_TRUE(labels_match("env=dev", labels));
  EXPECT_TRUE(labels_match("env==dev", labels));
  EXPECT_FALSE(labels_match("env=prod", labels));
  EXPECT_TRUE(labels_match("env!=prod", labels));
  EXPECT_TRUE(labels_match("tier!=web", labels));  // a missing key is "not equal"
  EXPECT_TRUE(labels_match("zone", labels));
  EXPECT_FALSE(labels_match("!zone", labels));
  EXPECT_TRUE(labels_match("!tier", labels));
  EXPECT_TRUE(labels_match("app.kubernetes.io/name=k8s4r", labels));
  EXPECT_TRUE(labels_match("env=dev, zone=lab-a", labels));
  EXPECT_FALSE(labels_match("env=dev,zone=lab-b", labels));
}

TEST(LabelSelector, SetBasedRequirements) {
  const json labels = {{"env", "dev"}, {"replicas", "3"}};
  EXPECT_TRUE(labels_match("env in (dev, prod)", labels));
  EXPECT_FALSE(labels_match("env in (prod)", labels));
  EXPECT_TRUE(labels_match("env notin (prod,staging)", labels));
  EXPECT_TRUE(labels_match("tier notin (web)", labels));  // a missing key is not in any set
  EXPECT_FALSE(labels_match("tier in (web)", labels));
  EXPECT_TRUE(labels_match("replicas>2", labels));
  EXPECT_FALSE(labels_match("replicas<2", labels));
  EXPECT_TRUE(labels_match("env in (dev),replicas>1", labels));
}

TEST(LabelSelector, RejectsMalformedSelectors) {
  for (const char* text : {"env in dev", "env in (dev", "=dev", "env=(x)", "a,,b", "env in (a b)", "x>y"}) {
    auto parsed = LabelSelector::parse(text);
    EXPECT_FALSE(parsed) << text;
  }
}

TEST(FieldSelector, MatchesPathsWithEscapes) {
  const json event = {{"metadata", {{"name", "e1"}, {"namespace", "default"}}},
                      {"involvedObject", {{"name", "a,b"}, {"uid", "u1"}}}};
  auto selector = FieldSelector::parse("metadata.name=e1,involvedObject.name=a\\,b");
  ASSERT_TRUE(selector);
  EXPECT_TRUE(selector.value().matches(event));
  EXPECT_FALSE(FieldSelector::parse("metadata.namespace!=default").value().matches(event));
  EXPECT_TRUE(FieldSelector::parse("involvedObject.uid==u1").value().matches(event));
  EXPECT_FALSE(FieldSelector::parse("metadata.name"));
}

}  // namespace
}  // namespace k8s4r::kube_sim
