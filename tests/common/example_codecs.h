// Maps the message folders of proto-schemas/examples/ to the codecs, for the
// tests that feed those examples through them.
#pragma once

#include "k8s4r/common/log_messages.h"
#include "k8s4r/common/messages.h"

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>

namespace k8s4r::testing {

struct ExampleCodec {
  // Parses a payload; on success also returns it encoded again.
  std::function<Result<std::string>(std::string_view)> parse_and_encode;
  // parse(encode(parse(payload))) equals parse(payload).
  std::function<bool(std::string_view)> round_trips;
};

template <class Message>
ExampleCodec codec_for(Result<Message> (*parse)(std::string_view)) {
  return ExampleCodec{
      [parse](std::string_view payload) -> Result<std::string> {
        auto message = parse(payload);
        if (!message) return message.error();
        return encode(message.value());
      },
      [parse](std::string_view payload) {
        auto first = parse(payload);
        if (!first) return false;
        auto second = parse(encode(first.value()));
        return second && second.value() == first.value();
      },
  };
}

inline const std::map<std::string, ExampleCodec>& example_codecs() {
  static const std::map<std::string, ExampleCodec> codecs{
      {"register", codec_for(&parse_register)},
      {"heartbeat", codec_for(&parse_heartbeat)},
      {"register-response", codec_for(&parse_register_response)},
      {"dispatch", codec_for(&parse_dispatch)},
      {"task-status", codec_for(&parse_task_status)},
      {"presence", codec_for(&parse_presence)},
      {"ack", codec_for(&parse_ack)},
      {"artifacts", codec_for(&parse_prefetch)},
      {"log-request", codec_for(&parse_log_request)},
      {"log-chunk", codec_for(&parse_log_chunk)},
  };
  return codecs;
}

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream content;
  content << in.rdbuf();
  return content.str();
}

}  // namespace k8s4r::testing
