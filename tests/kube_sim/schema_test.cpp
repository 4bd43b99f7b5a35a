#include "k8s4r/kube_sim/schema.h"

#include <gtest/gtest.h>

namespace k8s4r::kube_sim {
namespace {

using nlohmann::json;

const json kSchema = json::parse(R"({
  "type": "object",
  "properties": {
    "spec": {
      "type": "object",
      "required": ["driver"],
      "properties": {
        "driver": {"type": "string", "enum": ["exec", "raw_exec"]},
        "count": {"type": "integer", "minimum": 1, "default": 1},
        "timeout": {"type": "string", "pattern": "^[0-9]+s$"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "cpu": {"x-kubernetes-int-or-string": true},
        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
        "note": {"type": "string", "nullable": true}
      }
    },
    "status": {"type": "object", "properties": {"state": {"type": "string"}}}
  }
})");

std::vector<FieldCause> check(json object) {
  std::vector<std::string> pruned;
  normalize(kSchema, object, "", pruned, true);
  std::vector<FieldCause> causes;
  object.erase("metadata");
  validate(kSchema, object, "", causes);
  return causes;
}

TEST(Schema, AcceptsAValidObjectAndAppliesDefaults) {
  json object = {{"apiVersion", "x/v1"},
                 {"kind", "X"},
                 {"metadata", {{"name", "a"}}},
                 {"spec", {{"driver", "exec"}, {"cpu", "500m"}, {"free", {{"anything", {1, 2}}}}}}};
  std::vector<std::string> pruned;
  normalize(kSchema, object, "", pruned, true);
  EXPECT_TRUE(pruned.empty());
  EXPECT_EQ(object["spec"]["count"], 1);
  EXPECT_EQ(object["spec"]["free"]["anything"], json({1, 2}));
  EXPECT_EQ(object["metadata"]["name"], "a");
  std::vector<FieldCause> causes;
  validate(kSchema, object, "", causes);
  EXPECT_TRUE(causes.empty());
}

TEST(Schema, PrunesUnknownFieldsAndNonNullableNulls) {
  json object = {{"spec", {{"driver", "exec"}, {"bogus", 1}, {"timeout", nullptr}, {"note", nullptr}}},
                 {"extra", true}};
  std::vector<std::string> pruned;
  normalize(kSchema, object, "", pruned, true);
  EXPECT_EQ(pruned, (std::vector<std::string>{"extra", "spec.bogus"}));  // keys in JSON object order
  EXPECT_FALSE(object["spec"].contains("timeout"));
  EXPECT_TRUE(object["spec"].contains("note"));
}

TEST(Schema, ReportsEachViolationAsKubeApiserverDoes) {
  auto causes = check({{"spec", {{"driver", "podman"}}}});
  ASSERT_EQ(causes.size(), 1u);
  EXPECT_EQ(causes[0].field, "spec.driver");
  EXPECT_EQ(causes[0].reason, "FieldValueNotSupported");
  EXPECT_EQ(causes[0].message, "Unsupported value: \"podman\": supported values: \"exec\", \"raw_exec\"");

  causes = check({{"spec", json::object()}});
  ASSERT_EQ(causes.size(), 1u);
  EXPECT_EQ(causes[0].field, "spec.driver");
  EXPECT_EQ(causes[0].message, "Required value");

  causes = check({{"spec", {{"driver", "exec"}, {"count", "three"}}}});
  ASSERT_EQ(causes.size(), 1u);
  EXPECT_EQ(causes[0].reason, "FieldValueTypeInvalid");
  EXPECT_EQ(causes[0].message, "Invalid value: \"string\": spec.count in body must be of type integer: \"string\"");

  causes =
      check({{"spec", {{"driver", "exec"}, {"count", 0}, {"timeout", "5m"}, {"labels", {{"a", 1}}}, {"cpu", true}}}});
  std::vector<std::string> fields;
  for (const auto& cause : causes) fields.push_back(cause.field);
  EXPECT_EQ(fields, (std::vector<std::string>{"spec.count", "spec.cpu", "spec.labels.a", "spec.timeout"}));
}

TEST(Schema, StructuralCheckFindsUntypedNodes) {
  EXPECT_TRUE(structural_errors(kSchema, "schema").empty());
  const json loose = {{"type", "object"}, {"properties", {{"spec", {{"properties", {{"a", {{"type", "string"}}}}}}}}}};
  EXPECT_EQ(structural_errors(loose, "schema").size(), 1u);
}

}  // namespace
}  // namespace k8s4r::kube_sim
