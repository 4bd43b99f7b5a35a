// The robot-login lines between the bridge and the broker plugin
// (common/login_records.h): what parses, what is refused and why, and that
// formatting what was parsed gives the same bytes.
#include "k8s4r/common/login_records.h"

#include "k8s4r/common/identifiers.h"
#include "k8s4r/common/slots.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace k8s4r::logins {
namespace {

const std::string kDigestA = "sha256:" + std::string(64, 'a');
const std::string kDigestB = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

std::string slot_line(std::string_view robot, std::uint64_t epoch, bool replace = false) {
  return "slot " + std::to_string(slot_of(robot)) + " " + std::to_string(epoch) + (replace ? " replace\n" : "\n");
}

TEST(LoginRecords, ABatchParsesAndFormatsBackToTheSameBytes) {
  const std::string text = "k8s4r-logins 1 bridge-7.42\n" + slot_line("robot-1", 1700000000000) + "set robot-1 " +
                           kDigestA + "\n" + slot_line("robot-2", 5, true) + "set robot-2 " + kDigestB + "\n";
  auto batch = parse_batch(text);
  ASSERT_TRUE(batch) << batch.error().to_string();
  EXPECT_EQ(batch.value().correlation, "bridge-7.42");
  ASSERT_EQ(batch.value().sections.size(), 2u);
  EXPECT_EQ(batch.value().sections[0].epoch, 1700000000000u);
  EXPECT_FALSE(batch.value().sections[0].replace);
  EXPECT_TRUE(batch.value().sections[1].replace);
  EXPECT_EQ(format_digest(*batch.value().sections[1].changes[0].digest), kDigestB);
  EXPECT_EQ(format_batch(batch.value()), text);
}

TEST(LoginRecords, ADelLineRemovesAndAnEmptyBatchIsAPing) {
  auto batch = parse_batch("k8s4r-logins 1 c\n" + slot_line("robot-1", 3) + "del robot-1\n");
  ASSERT_TRUE(batch) << batch.error().to_string();
  EXPECT_FALSE(batch.value().sections[0].changes[0].digest.has_value());
  auto ping = parse_batch("k8s4r-logins 1 c");
  ASSERT_TRUE(ping);
  EXPECT_TRUE(ping.value().sections.empty());
}

// Each rule broken once: the error names the line, and nothing parses.
TEST(LoginRecords, EveryBrokenRuleIsRefusedNamingItsLine) {
  const std::string header = "k8s4r-logins 1 c\n";
  const std::string slot1 = slot_line("robot-1", 3);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "line 1"},
      {"k8s4r-logins 2 c\n", "version 2"},
      {"k8s4r-logins 1 a/b\n", "correlation"},
      {"k8s4r-logins 1 " + std::string(65, 'c') + "\n", "correlation"},
      {header + "set robot-1 " + kDigestA + "\n", "before any slot"},
      {header + "slot 1024 1\n", "below 1024"},
      {header + "slot 01 1\n", "below 1024"},
      {header + "slot 1 18446744073709551616\n", "epoch"},
      {header + "slot 1 -1\n", "epoch"},
      {header + "slot 1 2 keep\n", "replace"},
      {header + slot1 + slot1, "twice"},
      {header + slot1 + "set robot-2 " + kDigestA + "\n", "is in slot"},
      {header + slot1 + "set robot/1 " + kDigestA + "\n", "robot id"},
      {header + slot1 + "set robot-1 " + kDigestA + "\nset robot-1 " + kDigestB + "\n", "in its section twice"},
      {header + slot1 + "set robot-1 sha256:" + std::string(64, 'A') + "\n", "digest"},
      {header + slot1 + "set robot-1 " + kDigestA.substr(0, 70) + "\n", "digest"},
      {header + slot1 + "set robot-1\n", "must be 'set"},
      {header + slot_line("robot-1", 3, true) + "del robot-1\n", "set lines only"},
      {header + slot1 + "\nset robot-1 " + kDigestA + "\n", "must be a slot, set or del"},
      {header + slot1 + "set  robot-1 " + kDigestA + "\n", "must be 'set"},
      {header + slot1 + "set robot-1 " + kDigestA + "\r\n", "digest"},
  };
  for (const auto& [text, expected] : cases) {
    auto batch = parse_batch(text);
    ASSERT_FALSE(batch) << text;
    EXPECT_NE(batch.error().to_string().find(expected), std::string::npos)
        << text << " → " << batch.error().to_string();
  }
}

TEST(LoginRecords, ABatchHasAtMostFourThousandLines) {
  std::string text = "k8s4r-logins 1 c\n";
  for (std::uint32_t slot = 0; slot < kSlots; ++slot) text += "slot " + std::to_string(slot) + " 1\n";
  ASSERT_TRUE(parse_batch(text));  // 1,025 lines
  std::string too_long = "k8s4r-logins 1 c\n" + slot_line("robot-1", 1);
  for (std::size_t i = 0; i < kMaxBatchLines; ++i) too_long += "del robot-1\n";
  auto refused = parse_batch(too_long);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().to_string().find("at most 4000 lines"), std::string::npos);
}

TEST(LoginRecords, APayloadTooLargeIsRefusedByItsSizeBeforeItIsSplitIntoLines) {
  const std::string id(kMaxIdentifierLength, 'a');
  const std::string longest_line = "set " + id + " sha256:" + std::string(64, '0') + "\n";
  const std::string batch = "k8s4r-logins 1 c\n" + slot_line(id, 1) + longest_line;
  ASSERT_TRUE(parse_batch(batch)) << parse_batch(batch).error().to_string();
  // The byte cap never refuses what the line cap allows.
  EXPECT_LE(longest_line.size() * kMaxBatchLines, kMaxBatchBytes);
  auto refused = parse_batch(batch + std::string(kMaxBatchBytes, '\n'));
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().to_string().find("at most 560000 bytes"), std::string::npos) << refused.error().to_string();

  Response answer{"c", "", UINT64_MAX, UINT64_MAX, UINT64_MAX, true, {}};
  for (std::uint32_t slot = 0; slot < kSlots; ++slot) answer.stale.push_back({slot, UINT64_MAX});
  const std::string largest = format_response(answer);
  ASSERT_TRUE(parse_response(largest));
  auto refused_answer = parse_response(largest + std::string(kMaxResponseBytes, '\n'));
  ASSERT_FALSE(refused_answer);
  EXPECT_NE(refused_answer.error().to_string().find("at most 65536 bytes"), std::string::npos);
}

TEST(LoginRecords, AnswersRoundTrip) {
  const Response ok{"c-1", "", 100000, 12, 3, false, {{7, 99}, {1023, 5}}};
  auto parsed = parse_response(format_response(ok));
  ASSERT_TRUE(parsed) << parsed.error().to_string();
  EXPECT_EQ(parsed.value(), ok);
  const Response error{"c-2", "line 3: must be 'del <robot-id>'"};
  auto parsed_error = parse_response(format_response(error));
  ASSERT_TRUE(parsed_error) << parsed_error.error().to_string();
  EXPECT_EQ(parsed_error.value(), error);
  // A reason is one line, whatever it held.
  EXPECT_EQ(format_response(Response{"c", "a\nb\rc\td"}), "k8s4r-logins 1 c error a b c d\n");
  EXPECT_FALSE(parse_response("k8s4r-logins 1 c error a\rb\n"));
  for (const std::string bad : {"k8s4r-logins 1 c ok held=1 changed=1 kicked=1\n",
                                "k8s4r-logins 1 c ok held=x changed=1 kicked=1 durable=yes\n",
                                "k8s4r-logins 1 c ok held=1 changed=1 kicked=1 durable=yes\nstale 1024 1\n",
                                "k8s4r-logins 1 c error\n", "k8s4r-logins 1 c fine held=1\n"}) {
    EXPECT_FALSE(parse_response(bad)) << bad;
  }
}

TEST(LoginRecords, StateRecordsRoundTrip) {
  for (const std::string& line : std::vector<std::string>{"epoch 0 1", "epoch 1023 18446744073709551615",
                                                          "set robot-1 " + kDigestA, "del robot-1"}) {
    auto record = parse_state_record(line);
    ASSERT_TRUE(record) << line << ": " << record.error().to_string();
    EXPECT_EQ(format_state_record(record.value()), line);
  }
  for (const std::string bad : {"epoch 1024 1", "set robot-1", "del robot+1", "put robot-1", ""})
    EXPECT_FALSE(parse_state_record(bad)) << bad;
}

}  // namespace
}  // namespace k8s4r::logins

namespace k8s4r::logins {
namespace {

// docs/protocol.md's examples of these lines parse as what they claim to be.
TEST(LoginRecords, TheProtocolPagesExamplesParse) {
  std::ifstream in(std::string(K8S4R_SCHEMA_DIR) + "/../docs/protocol.md");
  std::stringstream page;
  page << in.rdbuf();
  const std::string text = page.str();
  int examples = 0;
  for (std::size_t at = text.find("```text\nk8s4r-logins 1 "); at != std::string::npos;
       at = text.find("```text\nk8s4r-logins 1 ", at + 1)) {
    const std::size_t start = at + 8, end = text.find("```", start);
    const std::string example = text.substr(start, end - start);
    const std::string first_line = example.substr(0, example.find('\n'));
    const bool answer =
        first_line.find(" ok held=") != std::string::npos || first_line.find(" error ") != std::string::npos;
    if (answer) {
      auto parsed = parse_response(example);
      EXPECT_TRUE(parsed) << example << parsed.error().to_string();
    } else {
      auto parsed = parse_batch(example);
      EXPECT_TRUE(parsed) << example << parsed.error().to_string();
    }
    ++examples;
  }
  EXPECT_EQ(examples, 3);
}

}  // namespace
}  // namespace k8s4r::logins
