// Feeds every example in proto-schemas/examples/ through the C++ codecs. The
// same files are checked against the JSON Schemas by tests/schema-check, so a
// payload is valid for the schema exactly when it is valid for the codec.
#include "example_codecs.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <set>

namespace k8s4r {
namespace {

namespace fs = std::filesystem;
using testing::example_codecs;
using testing::read_file;

const fs::path kExamples = fs::path(K8S4R_SCHEMA_DIR) / "examples";

struct Example {
  std::string message;  // folder: register, dispatch, ...
  fs::path path;
  std::string name() const { return message + "/" + path.filename().string(); }
  bool valid() const { return path.filename().string().rfind("valid-", 0) == 0; }
};

std::vector<Example> all_examples() {
  std::vector<Example> examples;
  for (const auto& folder : fs::directory_iterator(kExamples)) {
    if (!folder.is_directory()) continue;
    for (const auto& file : fs::directory_iterator(folder.path())) {
      examples.push_back({folder.path().filename().string(), file.path()});
    }
  }
  return examples;
}

TEST(SchemaExamples, EveryMessageHasValidAndInvalidExamples) {
  std::map<std::string, std::pair<int, int>> counts;
  for (const Example& example : all_examples()) {
    auto& [valid, invalid] = counts[example.message];
    ++(example.valid() ? valid : invalid);
  }
  for (const auto& [message, codec] : example_codecs()) {
    EXPECT_GE(counts[message].first, 1) << message;
    EXPECT_GE(counts[message].second, 3) << message;
  }
  EXPECT_EQ(counts.size(), example_codecs().size()) << "a folder in examples/ has no codec";
}

TEST(SchemaExamples, ValidExamplesParseAndRoundTrip) {
  for (const Example& example : all_examples()) {
    if (!example.valid()) continue;
    const auto& codec = example_codecs().at(example.message);
    const std::string payload = read_file(example.path);
    auto encoded = codec.parse_and_encode(payload);
    ASSERT_TRUE(encoded) << example.name() << ": " << encoded.error().to_string();
    EXPECT_TRUE(codec.round_trips(payload)) << example.name() << " encodes to " << encoded.value();
  }
}

TEST(SchemaExamples, InvalidExamplesAreRejectedNamingTheField) {
  const auto expected_fields = nlohmann::json::parse(read_file(kExamples / "invalid-fields.json"));
  std::set<std::string> seen;
  for (const Example& example : all_examples()) {
    if (example.valid()) continue;
    seen.insert(example.name());
    ASSERT_TRUE(expected_fields.contains(example.name())) << example.name() << " is not in invalid-fields.json";
    auto parsed = example_codecs().at(example.message).parse_and_encode(read_file(example.path));
    ASSERT_FALSE(parsed) << example.name() << " was accepted: " << parsed.value();
    EXPECT_EQ(parsed.error().field, expected_fields[example.name()].get<std::string>())
        << example.name() << ": " << parsed.error().to_string();
    EXPECT_FALSE(parsed.error().message.empty()) << example.name();
  }
  EXPECT_EQ(seen.size(), expected_fields.size()) << "invalid-fields.json lists files that do not exist";
}

}  // namespace
}  // namespace k8s4r
