#include "json_reader.h"

#include "k8s4r/common/json_depth.h"

#include <algorithm>
#include <cmath>

namespace k8s4r::detail {
namespace {

std::string type_name(const json& value) {
  switch (value.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
    case json::value_t::number_float:
      return "a number";
    case json::value_t::string:
      return "a string";
    case json::value_t::array:
      return "an array";
    case json::value_t::object:
      return "an object";
    default:
      return "an unsupported value";
  }
}

std::string must_be(std::string_view what, const json& value) {
  return "must be " + std::string(what) + ", got " + type_name(value);
}

}  // namespace

std::size_t utf8_length(std::string_view text) {
  // Continuation bytes are 10xxxxxx; every other byte starts a code point.
  return static_cast<std::size_t>(
      std::count_if(text.begin(), text.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

Result<json> parse_json_object(std::string_view payload, std::size_t max_bytes) {
  if (payload.size() > max_bytes) {
    return Error{
        "", "payload is " + std::to_string(payload.size()) + " bytes, over the limit of " + std::to_string(max_bytes)};
  }
  // Refused before parsing: keeping, comparing or re-serialising a value
  // recurses once per level, and a deep enough one would end the process.
  if (json_nested_deeper_than(payload)) {
    return Error{"", "payload nests deeper than " + std::to_string(kMaxProtocolJsonDepth) + " levels"};
  }
  // No exceptions: a parse failure gives a discarded value. nlohmann rejects
  // invalid UTF-8 inside strings, so every string we read is valid UTF-8.
  json parsed = json::parse(payload.begin(), payload.end(), nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return Error{"", "payload is not valid JSON"};
  if (!parsed.is_object()) return Error{"", "payload must be a JSON object, got " + type_name(parsed)};
  return parsed;
}

ObjectReader::ObjectReader(const json& object, std::string path, std::optional<Error>& first_error)
    : object_(object), path_(std::move(path)), first_error_(first_error) {}

std::string ObjectReader::field_path(std::string_view key) const {
  if (path_.empty()) return std::string(key);
  return path_ + "." + std::string(key);
}

void ObjectReader::fail(std::string_view key, std::string message) {
  if (!first_error_) first_error_ = Error{field_path(key), std::move(message)};
}

const json* ObjectReader::find(std::string_view key, bool required) {
  if (failed()) return nullptr;
  auto it = object_.find(key);
  // null stands for absent, as Go's encoding/json writes nil maps, slices and
  // pointers; a required field must have a value.
  if (it == object_.end() || it->is_null()) {
    if (required) fail(key, it == object_.end() ? "is required" : "is required and must not be null");
    return nullptr;
  }
  return &*it;
}

std::optional<std::string> ObjectReader::read_string(std::string_view key, bool required, StringCheck check,
                                                     std::size_t max_length) {
  const json* value = find(key, required);
  if (value == nullptr) return std::nullopt;
  if (!value->is_string()) {
    fail(key, must_be("a string", *value));
    return std::nullopt;
  }
  const auto& text = value->get_ref<const std::string&>();
  if (const auto length = utf8_length(text); length > max_length) {
    fail(key, "must be at most " + std::to_string(max_length) + " characters, got " + std::to_string(length));
    return std::nullopt;
  }
  if (check != nullptr) {
    if (auto checked = check(text); !checked) {
      fail(key, checked.error().message);
      return std::nullopt;
    }
  }
  return text;
}

std::string ObjectReader::required_string(std::string_view key, StringCheck check, std::size_t max_length) {
  return read_string(key, true, check, max_length).value_or("");
}

std::optional<std::string> ObjectReader::optional_string(std::string_view key, StringCheck check,
                                                         std::size_t max_length) {
  return read_string(key, false, check, max_length);
}

std::optional<std::string> ObjectReader::read_enum(std::string_view key, bool required,
                                                   std::initializer_list<std::string_view> allowed) {
  auto text = read_string(key, required, nullptr, kDefaultMaxLength);
  if (!text) return std::nullopt;
  if (std::find(allowed.begin(), allowed.end(), *text) == allowed.end()) {
    std::string choices;
    for (auto choice : allowed) choices += (choices.empty() ? "" : ", ") + std::string(choice);
    fail(key, "must be one of " + choices + ", got '" + *text + "'");
    return std::nullopt;
  }
  return text;
}

std::string ObjectReader::required_enum(std::string_view key, std::initializer_list<std::string_view> allowed) {
  return read_enum(key, true, allowed).value_or("");
}

std::optional<std::string> ObjectReader::optional_enum(std::string_view key,
                                                       std::initializer_list<std::string_view> allowed) {
  return read_enum(key, false, allowed);
}

bool ObjectReader::required_bool(std::string_view key) {
  const json* value = find(key, true);
  if (value == nullptr) return false;
  if (!value->is_boolean()) {
    fail(key, must_be("a boolean", *value));
    return false;
  }
  return value->get<bool>();
}

std::optional<bool> ObjectReader::optional_bool(std::string_view key) {
  const json* value = find(key, false);
  if (value == nullptr) return std::nullopt;
  if (!value->is_boolean()) {
    fail(key, must_be("a boolean", *value));
    return std::nullopt;
  }
  return value->get<bool>();
}

std::optional<std::int64_t> ObjectReader::read_integer(std::string_view key, bool required, std::int64_t min,
                                                       std::int64_t max) {
  const json* value = find(key, required);
  if (value == nullptr) return std::nullopt;
  std::int64_t number = 0;
  if (value->is_number_unsigned()) {
    const auto unsigned_number = value->get<std::uint64_t>();
    if (unsigned_number > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      fail(key, "must be at most " + std::to_string(max));
      return std::nullopt;
    }
    number = static_cast<std::int64_t>(unsigned_number);
  } else if (value->is_number_integer()) {
    number = value->get<std::int64_t>();
  } else if (value->is_number_float()) {
    // JSON Schema counts 3.0 as an integer, and so do we, to agree with it.
    const double real = value->get<double>();
    if (std::trunc(real) != real || std::abs(real) > 9.007199254740992e15) {
      fail(key, "must be an integer, got " + value->dump());
      return std::nullopt;
    }
    number = static_cast<std::int64_t>(real);
  } else {
    fail(key, must_be("an integer", *value));
    return std::nullopt;
  }
  if (number < min) {
    fail(key, "must be at least " + std::to_string(min) + ", got " + std::to_string(number));
    return std::nullopt;
  }
  if (number > max) {
    fail(key, "must be at most " + std::to_string(max) + ", got " + std::to_string(number));
    return std::nullopt;
  }
  return number;
}

std::int64_t ObjectReader::required_integer(std::string_view key, std::int64_t min, std::int64_t max) {
  return read_integer(key, true, min, max).value_or(0);
}

std::optional<std::int64_t> ObjectReader::optional_integer(std::string_view key, std::int64_t min, std::int64_t max) {
  return read_integer(key, false, min, max);
}

std::optional<double> ObjectReader::optional_number(std::string_view key) {
  const json* value = find(key, false);
  if (value == nullptr) return std::nullopt;
  if (!value->is_number()) {
    fail(key, must_be("a number", *value));
    return std::nullopt;
  }
  return value->get<double>();
}

std::optional<Timestamp> ObjectReader::read_time(std::string_view key, bool required) {
  auto text = read_string(key, required, nullptr, kDefaultMaxLength);
  if (!text) return std::nullopt;
  auto time = parse_rfc3339(*text);
  if (!time) {
    fail(key, time.error().message);
    return std::nullopt;
  }
  return time.value();
}

Timestamp ObjectReader::required_time(std::string_view key) { return read_time(key, true).value_or(Timestamp{}); }

std::optional<Timestamp> ObjectReader::optional_time(std::string_view key) { return read_time(key, false); }

std::optional<std::chrono::nanoseconds> ObjectReader::optional_duration(std::string_view key) {
  auto text = read_string(key, false, nullptr, kDefaultMaxLength);
  if (!text) return std::nullopt;
  auto duration = parse_non_negative_go_duration(*text);
  if (!duration) {
    fail(key, duration.error().message);
    return std::nullopt;
  }
  return duration.value();
}

std::map<std::string, std::string> ObjectReader::optional_string_map(std::string_view key) {
  std::map<std::string, std::string> result;
  const json* value = find(key, false);
  if (value == nullptr) return result;
  if (!value->is_object()) {
    fail(key, must_be("an object of strings", *value));
    return result;
  }
  for (const auto& [name, item] : value->items()) {
    if (!item.is_string()) {
      fail(std::string(key) + "." + name, must_be("a string", item));
      return {};
    }
    result.emplace(name, item.get<std::string>());
  }
  return result;
}

std::vector<std::string> ObjectReader::optional_string_array(std::string_view key, StringCheck check,
                                                             std::size_t max_items) {
  std::vector<std::string> result;
  const json* value = find(key, false);
  if (value == nullptr) return result;
  if (!value->is_array()) {
    fail(key, must_be("an array of strings", *value));
    return result;
  }
  if (value->size() > max_items) {
    fail(key, "must have at most " + std::to_string(max_items) + " items, got " + std::to_string(value->size()));
    return result;
  }
  for (std::size_t i = 0; i < value->size(); ++i) {
    const json& item = (*value)[i];
    const std::string item_key = std::string(key) + "[" + std::to_string(i) + "]";
    if (!item.is_string()) {
      fail(item_key, must_be("a string", item));
      return {};
    }
    if (check != nullptr) {
      if (auto checked = check(item.get_ref<const std::string&>()); !checked) {
        fail(item_key, checked.error().message);
        return {};
      }
    }
    result.push_back(item.get<std::string>());
  }
  return result;
}

json ObjectReader::optional_raw_object(std::string_view key) {
  const json* value = find(key, false);
  if (value == nullptr) return nullptr;
  if (!value->is_object()) {
    fail(key, must_be("an object", *value));
    return nullptr;
  }
  return *value;
}

json ObjectReader::optional_raw_array(std::string_view key) {
  const json* value = find(key, false);
  if (value == nullptr) return nullptr;
  if (!value->is_array()) {
    fail(key, must_be("an array", *value));
    return nullptr;
  }
  return *value;
}

bool ObjectReader::read_object(std::string_view key, bool required, const std::function<void(ObjectReader&)>& read) {
  const json* value = find(key, required);
  if (value == nullptr) return false;
  if (!value->is_object()) {
    fail(key, must_be("an object", *value));
    return false;
  }
  ObjectReader nested(*value, field_path(key), first_error_);
  read(nested);
  return !failed();
}

bool ObjectReader::required_object(std::string_view key, const std::function<void(ObjectReader&)>& read) {
  return read_object(key, true, read);
}

bool ObjectReader::optional_object(std::string_view key, const std::function<void(ObjectReader&)>& read) {
  return read_object(key, false, read);
}

void ObjectReader::optional_object_array(std::string_view key, const std::function<void(ObjectReader&)>& read,
                                         std::size_t max_items) {
  const json* value = find(key, false);
  if (value == nullptr) return;
  if (!value->is_array()) {
    fail(key, must_be("an array of objects", *value));
    return;
  }
  if (value->size() > max_items) {
    fail(key, "must have at most " + std::to_string(max_items) + " items, got " + std::to_string(value->size()));
    return;
  }
  for (std::size_t i = 0; i < value->size() && !failed(); ++i) {
    const json& item = (*value)[i];
    const std::string item_key = std::string(key) + "[" + std::to_string(i) + "]";
    if (!item.is_object()) {
      fail(item_key, must_be("an object", item));
      return;
    }
    ObjectReader nested(item, field_path(item_key), first_error_);
    read(nested);
  }
}

}  // namespace k8s4r::detail
