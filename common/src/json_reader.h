// Reading JSON objects field by field with validation, for the message
// codecs. Private to k8s4r_common.
//
// The first error wins: once a read fails, later reads return defaults and
// record nothing, so a codec reads every field in order and checks error()
// once at the end. Errors name the dotted path of the field.
//
// Ownership: a reader borrows the json object and the error slot; both must
// outlive it. Not thread-safe; one reader per parse.
#pragma once

#include "k8s4r/common/duration.h"
#include "k8s4r/common/result.h"
#include "k8s4r/common/rfc3339.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace k8s4r::detail {

using nlohmann::json;

// A check on a string's content, such as validate_identifier.
using StringCheck = Result<void> (*)(std::string_view);

// Number of Unicode code points in UTF-8 text, which is what JSON Schema's
// maxLength counts.
std::size_t utf8_length(std::string_view text);

// Parses a payload into a JSON object: rejects more than `max_bytes`, text
// that is not JSON, and JSON that is not an object.
Result<json> parse_json_object(std::string_view payload, std::size_t max_bytes);

class ObjectReader {
 public:
  ObjectReader(const json& object, std::string path, std::optional<Error>& first_error);

  std::string required_string(std::string_view key, StringCheck check = nullptr,
                              std::size_t max_length = kDefaultMaxLength);
  std::optional<std::string> optional_string(std::string_view key, StringCheck check = nullptr,
                                             std::size_t max_length = kDefaultMaxLength);
  std::string required_enum(std::string_view key, std::initializer_list<std::string_view> allowed);
  std::optional<std::string> optional_enum(std::string_view key, std::initializer_list<std::string_view> allowed);

  bool required_bool(std::string_view key);
  std::optional<bool> optional_bool(std::string_view key);

  std::int64_t required_integer(std::string_view key, std::int64_t min = std::numeric_limits<std::int64_t>::min(),
                                std::int64_t max = std::numeric_limits<std::int64_t>::max());
  std::optional<std::int64_t> optional_integer(std::string_view key,
                                               std::int64_t min = std::numeric_limits<std::int64_t>::min(),
                                               std::int64_t max = std::numeric_limits<std::int64_t>::max());
  std::optional<double> optional_number(std::string_view key);

  Timestamp required_time(std::string_view key);
  std::optional<Timestamp> optional_time(std::string_view key);
  // A Go duration without a sign: timeouts, intervals, delays.
  std::optional<std::chrono::nanoseconds> optional_duration(std::string_view key);

  // An object of string values, e.g. labels or env.
  std::map<std::string, std::string> optional_string_map(std::string_view key);
  std::vector<std::string> optional_string_array(std::string_view key, StringCheck check = nullptr,
                                                 std::size_t max_items = kDefaultMaxItems);
  // The raw value of an optional field that must be an object (free-form
  // parts such as resources); null json when absent.
  json optional_raw_object(std::string_view key);
  json optional_raw_array(std::string_view key);

  // Reads a nested object with `read`, whose errors are reported under this
  // object's path. Returns false when the field is absent (for optional) or
  // on error.
  bool required_object(std::string_view key, const std::function<void(ObjectReader&)>& read);
  bool optional_object(std::string_view key, const std::function<void(ObjectReader&)>& read);
  // Each item of an array of objects, with its index in the error path.
  void optional_object_array(std::string_view key, const std::function<void(ObjectReader&)>& read,
                             std::size_t max_items = kDefaultMaxItems);

  // Records an error on `key` unless one is recorded already; for checks that
  // span fields.
  void fail(std::string_view key, std::string message);
  bool failed() const { return first_error_.has_value(); }
  // The object being read, for codecs that keep it whole.
  const json& object() const { return object_; }

  // No limit unless a field sets one; the payload size limit bounds all.
  static constexpr std::size_t kDefaultMaxLength = std::numeric_limits<std::size_t>::max();
  static constexpr std::size_t kDefaultMaxItems = std::numeric_limits<std::size_t>::max();

 private:
  // The field if present and not null; records `expected` as an error when
  // `required` and it is missing.
  const json* find(std::string_view key, bool required);
  std::string field_path(std::string_view key) const;
  std::optional<std::string> read_string(std::string_view key, bool required, StringCheck check,
                                         std::size_t max_length);
  std::optional<std::int64_t> read_integer(std::string_view key, bool required, std::int64_t min, std::int64_t max);
  std::optional<std::string> read_enum(std::string_view key, bool required,
                                       std::initializer_list<std::string_view> allowed);
  std::optional<Timestamp> read_time(std::string_view key, bool required);
  bool read_object(std::string_view key, bool required, const std::function<void(ObjectReader&)>& read);

  const json& object_;
  std::string path_;
  std::optional<Error>& first_error_;
};

// Reads a whole payload as an object with `read`, returning what `build`
// returns or the first error.
template <class T>
Result<T> read_payload(std::string_view payload, std::size_t max_bytes, const std::function<T(ObjectReader&)>& read) {
  auto parsed = parse_json_object(payload, max_bytes);
  if (!parsed) return parsed.error();
  std::optional<Error> first_error;
  ObjectReader reader(parsed.value(), "", first_error);
  T message = read(reader);
  if (first_error) return *first_error;
  return message;
}

}  // namespace k8s4r::detail
