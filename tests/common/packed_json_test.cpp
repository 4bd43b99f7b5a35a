#include "k8s4r/common/packed_json.h"

#include <gtest/gtest.h>

namespace k8s4r {
namespace {

using nlohmann::json;

TEST(PackedJson, GivesBackTheDocumentItWasGivenAndIsSmaller) {
  const json patch = json::parse(R"({"status":{"state":"completed","exitCode":-1,"message":null,
      "progress":0.5,"total":18446744073709551615,"labels":{},"tasks":[],"note":"ünï ✓"}})");
  const PackedJson packed(patch);
  EXPECT_FALSE(packed.empty());
  EXPECT_EQ(packed.get(), patch);
  EXPECT_EQ(packed.get().dump(), patch.dump()) << "null members (merge-patch deletions) and number kinds survive";
  EXPECT_LT(packed.size(), patch.dump().size());
}

TEST(PackedJson, NullIsEmptyAndAnEmptyObjectIsNot) {
  EXPECT_TRUE(PackedJson(nullptr).empty());
  EXPECT_TRUE(PackedJson().get().is_null());
  const PackedJson nothing_to_change(json::object());
  EXPECT_FALSE(nothing_to_change.empty());
  EXPECT_EQ(nothing_to_change.get(), json::object());
  PackedJson cleared(json{{"a", 1}});
  cleared.clear();
  EXPECT_TRUE(cleared.empty());
}

}  // namespace
}  // namespace k8s4r
