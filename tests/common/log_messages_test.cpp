// The log messages beyond the schema examples: bytes that are not UTF-8
// travel as base64 and come back the same; a chunk never claims bytes past
// its stream's end; the limits hold.
#include "k8s4r/common/log_messages.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace k8s4r {
namespace {

LogChunk chunk_of(std::string data, std::int64_t offset = 0) {
  LogChunk chunk;
  chunk.robot_id = "robot-a";
  chunk.follow_id = "f1";
  chunk.task_uid = "t1";
  chunk.offset = offset;
  chunk.size = offset + static_cast<std::int64_t>(data.size());
  chunk.data = std::move(data);
  return chunk;
}

TEST(LogMessages, TextTravelsAsTextAndOtherBytesAsBase64BothComingBackTheSame) {
  const std::string text = "grüße\n\ttab \"quoted\"\n";
  const std::string encoded = encode(chunk_of(text));
  EXPECT_EQ(nlohmann::json::parse(encoded)["text"], text);  // what an operator tailing MQTT reads
  EXPECT_EQ(parse_log_chunk(encoded).value().data, text);
  const std::string binary("\xff\x00\xfe half a \xe2\x82", 13);
  const std::string wrapped = encode(chunk_of(binary));
  EXPECT_TRUE(nlohmann::json::parse(wrapped).contains("base64"));
  EXPECT_EQ(parse_log_chunk(wrapped).value().data, binary);
}

TEST(LogMessages, AChunkCannotClaimBytesPastItsStreamsEnd) {
  LogChunk chunk = chunk_of("abcdef", 10);
  chunk.size = 12;  // 10 + 6 > 12
  const auto parsed = parse_log_chunk(encode(chunk));
  ASSERT_FALSE(parsed);
  EXPECT_EQ(parsed.error().field, "size");
}

TEST(LogMessages, TextInBase64IsRefusedSoEachChunkHasOneSpelling) {
  const auto parsed = parse_log_chunk(
      R"({"robotId":"r","followId":"f","seq":1,"taskUid":"t","stream":"stdout","offset":0,"base64":"aGk=","size":2})");
  ASSERT_FALSE(parsed);
  EXPECT_EQ(parsed.error().field, "base64");
}

TEST(LogMessages, ARequestKeepsItsLimits) {
  LogRequest asked;
  asked.robot_id = "robot-a";
  asked.follow_id = "f1";
  asked.reply_to = "k8s4r-bridge";
  asked.task_uid = "t1";
  asked.max_bytes = kMaxLogChunkBytes;
  asked.wait_ms = kMaxLogWaitMs;
  asked.tail_lines = 10;
  ASSERT_TRUE(parse_log_request(encode(asked)));
  EXPECT_EQ(parse_log_request(encode(asked)).value(), asked);
  asked.max_bytes = kMaxLogChunkBytes + 1;
  EXPECT_EQ(parse_log_request(encode(asked)).error().field, "maxBytes");
  asked.max_bytes = 1;
  asked.wait_ms = kMaxLogWaitMs + 1;
  EXPECT_EQ(parse_log_request(encode(asked)).error().field, "waitMs");
}

TEST(LogMessages, AChunkLargerThanItsLimitIsRefused) {
  const std::string big(static_cast<std::size_t>(kMaxLogChunkBytes) + 1, 'x');
  EXPECT_FALSE(parse_log_chunk(encode(chunk_of(big))));
  EXPECT_TRUE(parse_log_chunk(encode(chunk_of(big.substr(1)))));
}

}  // namespace
}  // namespace k8s4r
