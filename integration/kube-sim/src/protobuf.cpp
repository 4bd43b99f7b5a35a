#include "protobuf.h"

#include <cstdint>
#include <functional>

namespace k8s4r::kube_sim {

using nlohmann::json;

namespace {

// Calls `field(number, bytes)` for each length-delimited field of a message
// and skips the others; false when the message is malformed.
bool for_each_field(std::string_view message, const std::function<void(std::uint64_t, std::string_view)>& field) {
  std::size_t at = 0;
  const auto varint = [&](std::uint64_t& value) {
    value = 0;
    for (int shift = 0; shift < 64 && at < message.size(); shift += 7) {
      const auto byte = static_cast<unsigned char>(message[at++]);
      value |= static_cast<std::uint64_t>(byte & 0x7Fu) << shift;
      if ((byte & 0x80u) == 0) return true;
    }
    return false;
  };
  while (at < message.size()) {
    std::uint64_t key = 0;
    if (!varint(key)) return false;
    const std::uint64_t wire_type = key & 7u;
    if (wire_type == 0) {
      std::uint64_t ignored = 0;
      if (!varint(ignored)) return false;
    } else if (wire_type == 2) {
      std::uint64_t length = 0;
      if (!varint(length) || length > message.size() - at) return false;
      field(key >> 3, message.substr(at, static_cast<std::size_t>(length)));
      at += static_cast<std::size_t>(length);
    } else if (wire_type == 1) {
      at += 8;
    } else if (wire_type == 5) {
      at += 4;
    } else {
      return false;
    }
  }
  return at == message.size();
}

json string_map_entry(std::string_view entry) {
  json pair = {{"key", ""}, {"value", ""}};
  for_each_field(entry, [&](std::uint64_t number, std::string_view bytes) {
    if (number == 1) pair["key"] = std::string(bytes);
    if (number == 2) pair["value"] = std::string(bytes);
  });
  return pair;
}

json object_meta(std::string_view bytes) {
  json metadata = json::object();
  for_each_field(bytes, [&](std::uint64_t number, std::string_view value) {
    switch (number) {
      case 1:
        metadata["name"] = std::string(value);
        break;
      case 2:
        metadata["generateName"] = std::string(value);
        break;
      case 11:
      case 12: {
        const json pair = string_map_entry(value);
        metadata[number == 11 ? "labels" : "annotations"][pair["key"].get<std::string>()] = pair["value"];
        break;
      }
      case 14:
        metadata["finalizers"].push_back(std::string(value));
        break;
      default:
        break;
    }
  });
  return metadata;
}

}  // namespace

std::optional<json> decode_protobuf_namespace(std::string_view body) {
  constexpr std::string_view kMagic("k8s\0", 4);
  if (body.substr(0, 4) != kMagic) return std::nullopt;
  std::string kind, raw;
  const bool ok = for_each_field(body.substr(4), [&](std::uint64_t number, std::string_view bytes) {
    if (number == 1) {
      for_each_field(bytes, [&](std::uint64_t type_field, std::string_view text) {
        if (type_field == 2) kind = std::string(text);
      });
    }
    if (number == 2) raw = std::string(bytes);
  });
  if (!ok || kind != "Namespace") return std::nullopt;
  json object = {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", json::object()}};
  if (!for_each_field(raw, [&](std::uint64_t number, std::string_view bytes) {
        if (number == 1) object["metadata"] = object_meta(bytes);
      })) {
    return std::nullopt;
  }
  return object;
}

}  // namespace k8s4r::kube_sim
