#include "k8s4r/common/json_depth.h"

#include <gtest/gtest.h>

#include <string>

namespace k8s4r {
namespace {

TEST(JsonDepth, CountsOpenArraysAndObjects) {
  EXPECT_FALSE(json_nested_deeper_than(R"({"a":[{"b":1}]})", 3));
  EXPECT_TRUE(json_nested_deeper_than(R"({"a":[{"b":[1]}]})", 3));
  EXPECT_FALSE(json_nested_deeper_than("[][][][]", 1));  // siblings, not nesting
  EXPECT_FALSE(json_nested_deeper_than("", 0));
}

TEST(JsonDepth, BracketsInStringsDoNotCount) {
  EXPECT_FALSE(json_nested_deeper_than(R"({"a":"[[[[{{{{"})", 1));
  EXPECT_FALSE(json_nested_deeper_than(R"({"a":"\"[[[["})", 1));  // an escaped quote does not end the string
  EXPECT_TRUE(json_nested_deeper_than(R"({"a":"\\",[[]})", 2));   // an escaped backslash does
}

TEST(JsonDepth, AHundredThousandLevelsAreFoundWithoutRecursion) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_TRUE(json_nested_deeper_than(deep));
  EXPECT_FALSE(json_nested_deeper_than(deep, 100000));
}

}  // namespace
}  // namespace k8s4r
