// Every MQTT payload codec, topic, Go duration, RFC 3339 time and base64 text
// (kubeconfig data, continue tokens) on arbitrary bytes: none may crash, hang or leak; every answer is a value or an
// Error. What parses is encoded again (the agent keeps a dispatch and re-serialises it; the bridge re-encodes what it
// relays), and that encoding must parse and encode to the same text: a codec never writes what it would refuse.
#include "k8s4r/common/base64.h"
#include "k8s4r/common/duration.h"
#include "k8s4r/common/identifiers.h"
#include "k8s4r/common/log_messages.h"
#include "k8s4r/common/messages.h"
#include "k8s4r/common/rfc3339.h"
#include "k8s4r/common/topics.h"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace {

template <class Parse>
void round_trip(std::string_view input, Parse parse) {
  auto parsed = parse(input);
  if (!parsed) return;
  const std::string once = k8s4r::encode(parsed.value());
  auto again = parse(once);
  if (!again) {
    std::fprintf(stderr, "encoded text refused: %s: %s\n%s\n", again.error().field.c_str(),
                 again.error().message.c_str(), once.c_str());
    std::abort();
  }
  if (k8s4r::encode(again.value()) != once) {
    std::fprintf(stderr, "encoding not stable:\n%s\n%s\n", once.c_str(), k8s4r::encode(again.value()).c_str());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  round_trip(input, k8s4r::parse_register);
  round_trip(input, k8s4r::parse_heartbeat);
  round_trip(input, k8s4r::parse_register_response);
  round_trip(input, k8s4r::parse_dispatch);
  round_trip(input, k8s4r::parse_task_status);
  round_trip(input, k8s4r::parse_presence);
  round_trip(input, k8s4r::parse_ack);
  round_trip(input, k8s4r::parse_prefetch);
  round_trip(input, k8s4r::parse_log_request);
  round_trip(input, k8s4r::parse_log_chunk);
  // A task's outputs file: what is accepted travels within its bound and reads back the same.
  if (auto outputs = k8s4r::parse_task_outputs(input); outputs) {
    const std::string written = outputs.value().dump();
    auto again = k8s4r::parse_task_outputs(written);
    if (written.size() > k8s4r::kMaxTaskOutputsBytes || !again || again.value() != outputs.value()) std::abort();
  }
  if (auto duration = k8s4r::parse_go_duration(input); duration) {
    if (k8s4r::parse_go_duration(k8s4r::format_go_duration(duration.value())).value() != duration.value()) std::abort();
  }
  if (auto time = k8s4r::parse_rfc3339(input); time) {
    const auto written = k8s4r::format_rfc3339(time.value(), k8s4r::TimePrecision::as_needed);
    if (k8s4r::parse_rfc3339(written).value() != time.value()) std::abort();
  }
  (void)k8s4r::validate_identifier(input);
  // Every topic a broker delivers: what parses is what the builders make.
  if (auto parsed = k8s4r::topics::parse_topic(input); parsed && !parsed.value().legacy) {
    namespace topics = k8s4r::topics;
    const topics::ParsedTopic& where = parsed.value();
    k8s4r::Result<std::string> rebuilt = std::string();
    switch (where.kind) {
      case topics::TopicKind::register_robot:
        rebuilt = topics::robot_register(where.robot_id);
        break;
      case topics::TopicKind::heartbeat:
        rebuilt = topics::robot_heartbeat(where.robot_id);
        break;
      case topics::TopicKind::response:
        rebuilt = topics::response(where.robot_id);
        break;
      case topics::TopicKind::dispatch:
        rebuilt = topics::dispatch(where.robot_id);
        break;
      case topics::TopicKind::task_status:
        rebuilt = topics::task_status(where.robot_id, where.task_uid);
        break;
      case topics::TopicKind::presence:
        rebuilt = topics::presence(where.robot_id);
        break;
      case topics::TopicKind::acks:
        rebuilt = topics::acks(where.robot_id);
        break;
      case topics::TopicKind::artifacts:
        rebuilt = topics::artifacts(where.robot_id);
        break;
      case topics::TopicKind::log_request:
        rebuilt = topics::log_request(where.robot_id);
        break;
      case topics::TopicKind::log_chunk:
        rebuilt = topics::log_chunk(where.robot_id, where.reply_to);
        break;
    }
    if (!rebuilt || rebuilt.value() != input) std::abort();
  }
  if (auto bytes = k8s4r::base64_decode(input); bytes) {
    if (k8s4r::base64_decode(k8s4r::base64_encode(*bytes)) != bytes) std::abort();
  }
  return 0;
}
