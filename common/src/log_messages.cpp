#include "k8s4r/common/log_messages.h"

#include "json_reader.h"
#include "k8s4r/common/base64.h"
#include "k8s4r/common/identifiers.h"

namespace k8s4r {
namespace {

using detail::json;
using detail::ObjectReader;

Result<void> check_identifier(std::string_view value) { return validate_identifier(value); }

LogStream read_stream(ObjectReader& r) {
  return r.required_enum("stream", {"stdout", "stderr"}) == "stderr" ? LogStream::stderr_stream
                                                                     : LogStream::stdout_stream;
}

std::string dump(const json& value) { return value.dump(-1, ' ', false, json::error_handler_t::strict); }

}  // namespace

bool is_utf8(const std::string& bytes) {
  try {
    (void)json(bytes).dump();
    return true;
  } catch (const json::type_error&) {
    return false;
  }
}

std::string_view to_string(LogStream stream) { return stream == LogStream::stderr_stream ? "stderr" : "stdout"; }

Result<LogRequest> parse_log_request(std::string_view payload) {
  return detail::read_payload<LogRequest>(payload, 4096, [](ObjectReader& r) {
    LogRequest message;
    message.robot_id = r.required_string("robotId", check_identifier);
    message.follow_id = r.required_string("followId", check_identifier);
    message.seq = r.required_integer("seq", 1);
    message.reply_to = r.required_string("replyTo", check_identifier);
    message.task_uid = r.required_string("taskUid", check_identifier);
    message.stream = read_stream(r);
    message.offset = r.optional_integer("offset", 0);
    message.tail_lines = r.optional_integer("tailLines", 0, kMaxLogTailLines);
    message.since_seconds = r.optional_integer("sinceSeconds", 0, kMaxLogSinceSeconds);
    message.max_bytes = r.required_integer("maxBytes", 1, kMaxLogChunkBytes);
    message.wait_ms = r.optional_integer("waitMs", 0, kMaxLogWaitMs).value_or(0);
    return message;
  });
}

Result<LogChunk> parse_log_chunk(std::string_view payload) {
  return detail::read_payload<LogChunk>(payload, kMaxLogChunkPayloadBytes, [](ObjectReader& r) {
    LogChunk message;
    message.robot_id = r.required_string("robotId", check_identifier);
    message.follow_id = r.required_string("followId", check_identifier);
    message.seq = r.required_integer("seq", 1);
    message.task_uid = r.required_string("taskUid", check_identifier);
    message.stream = read_stream(r);
    message.offset = r.required_integer("offset", 0);
    auto text = r.optional_string("text", nullptr, static_cast<std::size_t>(kMaxLogChunkBytes));
    auto encoded = r.optional_string("base64", nullptr, static_cast<std::size_t>(kMaxLogChunkBytes) / 3 * 4 + 4);
    if (text && encoded) r.fail("base64", "a chunk has text or base64, not both");
    if (text) message.data = std::move(*text);
    if (encoded) {
      auto bytes = base64_decode(*encoded);
      if (!bytes) {
        r.fail("base64", "is not base64");
      } else if (bytes->empty() || is_utf8(*bytes)) {
        r.fail("base64", "carries text: it goes as \"text\"");  // one encoding for each chunk
      } else {
        message.data = std::move(*bytes);
      }
    }
    if (message.data.size() > static_cast<std::size_t>(kMaxLogChunkBytes))
      r.fail("text", "is longer than " + std::to_string(kMaxLogChunkBytes) + " bytes");
    message.size = r.required_integer("size", 0);
    // The bytes sent are bytes the stream holds.
    if (!r.failed() && (message.offset > message.size ||
                        static_cast<std::uint64_t>(message.size - message.offset) < message.data.size()))
      r.fail("size", "is less than offset plus the bytes carried");
    message.ended = r.optional_bool("ended").value_or(false);
    message.error = r.optional_enum("error", {"TaskNotFound", "InvalidRequest", "ReadFailed"}).value_or("");
    message.message = r.optional_string("message", nullptr, 1024).value_or("");
    return message;
  });
}

std::string encode(const LogRequest& message) {
  json j{{"robotId", message.robot_id}, {"followId", message.follow_id}, {"seq", message.seq},
         {"replyTo", message.reply_to}, {"taskUid", message.task_uid},   {"stream", to_string(message.stream)}};
  if (message.offset) j["offset"] = *message.offset;
  if (message.tail_lines) j["tailLines"] = *message.tail_lines;
  if (message.since_seconds) j["sinceSeconds"] = *message.since_seconds;
  j["maxBytes"] = message.max_bytes;
  if (message.wait_ms > 0) j["waitMs"] = message.wait_ms;
  return dump(j);
}

std::string encode(const LogChunk& message) {
  json j{{"robotId", message.robot_id}, {"followId", message.follow_id},       {"seq", message.seq},
         {"taskUid", message.task_uid}, {"stream", to_string(message.stream)}, {"offset", message.offset}};
  if (!message.data.empty()) {
    if (is_utf8(message.data)) {
      j["text"] = message.data;
    } else {
      j["base64"] = base64_encode(message.data);
    }
  }
  j["size"] = message.size;
  if (message.ended) j["ended"] = true;
  if (!message.error.empty()) j["error"] = message.error;
  if (!message.message.empty()) j["message"] = message.message;
  return dump(j);
}

}  // namespace k8s4r
