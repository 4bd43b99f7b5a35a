// The protobuf reader from bytes built by hand, as client-go encodes them.
#include "k8s4r/kube_sim/protobuf.h"

#include <gtest/gtest.h>

namespace k8s4r::kube_sim {
namespace {

using nlohmann::json;

void append_varint(std::string& out, std::size_t value) {
  for (;; value >>= 7) {
    out += static_cast<char>((value & 0x7Fu) | (value > 0x7F ? 0x80u : 0u));
    if (value <= 0x7F) return;
  }
}

std::string field(int number, const std::string& bytes) {
  std::string out;
  append_varint(out, static_cast<std::size_t>(number) << 3 | 2);
  append_varint(out, bytes.size());
  return out + bytes;
}

std::string varint_field(int number, unsigned value) {
  std::string out;
  out += static_cast<char>(number << 3);
  out += static_cast<char>(value);
  return out;
}

std::string envelope(const std::string& api_version, const std::string& kind, const std::string& raw) {
  return std::string("k8s\0", 4) + field(1, field(1, api_version) + field(2, kind)) + field(2, raw) + field(3, "") +
         field(4, "");
}

TEST(Protobuf, ReadsASecretAsKubectlSendsIt) {
  // metadata{name "robot-001", labels{app: k8s4r}, creationTimestamp (empty)},
  // data{token: raw bytes}, type "" (sent though empty), stringData{ca: x}, immutable false (a pointer: sent).
  const std::string metadata = field(1, "robot-001") + field(2, "") + varint_field(7, 0) + field(8, "") +
                               field(11, field(1, "app") + field(2, "k8s4r"));
  const std::string secret = field(1, metadata) + field(2, field(1, "token") + field(2, std::string("\x00\xff", 2))) +
                             field(3, "") + field(4, field(1, "ca") + field(2, "x")) + varint_field(5, 0);
  const ProtobufResult result = decode_protobuf(envelope("v1", "Secret", secret));
  ASSERT_TRUE(result.object) << result.error;
  EXPECT_EQ(*result.object, json::parse(R"({"apiVersion":"v1","kind":"Secret",
      "metadata":{"name":"robot-001","labels":{"app":"k8s4r"}},
      "data":{"token":"AP8="},"stringData":{"ca":"x"},"immutable":false})"));
}

TEST(Protobuf, InvalidUtf8BecomesTheReplacementCharacter) {
  const std::string metadata = field(1, std::string("a\xf5\xc0\xafz", 5));
  const ProtobufResult result = decode_protobuf(envelope("v1", "ConfigMap", field(1, metadata)));
  ASSERT_TRUE(result.object);
  EXPECT_EQ((*result.object)["metadata"]["name"], "a\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBDz");
  EXPECT_NO_THROW((void)result.object->dump());
}

TEST(Protobuf, RefusesManagedFieldsNestedPastTheJsonDepthLimit) {
  // metadata.managedFields[0].fieldsV1 carries raw JSON.
  const auto config_map = [](std::size_t depth) {
    const std::string nested = std::string(depth, '[') + std::string(depth, ']');
    return envelope("v1", "ConfigMap", field(1, field(1, "c") + field(17, field(7, field(1, nested)))));
  };
  const ProtobufResult shallow = decode_protobuf(config_map(100));
  ASSERT_TRUE(shallow.object) << shallow.error;
  EXPECT_TRUE((*shallow.object)["metadata"]["managedFields"][0]["fieldsV1"].is_array());
  EXPECT_FALSE(decode_protobuf(config_map(10001)).object);
}

TEST(Protobuf, RefusesMalformedBodiesAndUnknownKinds) {
  EXPECT_FALSE(decode_protobuf("{}").object);
  const std::string secret = field(1, field(1, "x"));
  std::string truncated = envelope("v1", "Secret", secret);
  truncated.resize(truncated.size() - 6);
  const ProtobufResult cut = decode_protobuf(truncated);
  EXPECT_FALSE(cut.object);
  EXPECT_FALSE(cut.unsupported_kind);
  const ProtobufResult pod = decode_protobuf(envelope("v1", "Pod", secret));
  EXPECT_FALSE(pod.object);
  EXPECT_TRUE(pod.unsupported_kind);
  // A string field sent with the varint wire type is malformed, not a value.
  EXPECT_FALSE(decode_protobuf(envelope("v1", "Secret", field(1, varint_field(1, 3)))).object);
}

}  // namespace
}  // namespace k8s4r::kube_sim
