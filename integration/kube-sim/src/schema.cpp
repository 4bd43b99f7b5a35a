#include "k8s4r/kube_sim/schema.h"

#include "k8s4r/common/rfc3339.h"

#include <map>
#include <optional>
#include <regex>
#include <set>

namespace k8s4r::kube_sim {
namespace {

using nlohmann::json;

std::string child(const std::string& path, const std::string& key) { return path.empty() ? key : path + "." + key; }

std::string json_type(const json& value) {
  switch (value.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "integer";
    case json::value_t::number_float:
      return "number";
    case json::value_t::string:
      return "string";
    case json::value_t::array:
      return "array";
    case json::value_t::object:
      return "object";
    default:
      return "unknown";
  }
}

bool has_type(const json& value, const std::string& type) {
  if (type == "integer") {
    return value.is_number_integer() ||
           (value.is_number_float() &&
            value.get<double>() == static_cast<double>(static_cast<long long>(value.get<double>())));
  }
  if (type == "number") return value.is_number();
  if (type == "string") return value.is_string();
  if (type == "boolean") return value.is_boolean();
  if (type == "object") return value.is_object();
  if (type == "array") return value.is_array();
  return true;
}

bool flag(const json& schema, const char* key) { return schema.contains(key) && schema[key] == true; }

std::string shown(const json& value) { return value.dump(-1, ' ', false, json::error_handler_t::replace); }

// Compiling a std::regex costs far more than matching; schemas repeat.
const std::regex* compiled_pattern(const std::string& pattern) {
  thread_local std::map<std::string, std::optional<std::regex>> cache;
  auto it = cache.find(pattern);
  if (it == cache.end()) {
    std::optional<std::regex> compiled;
    try {
      compiled.emplace(pattern, std::regex::ECMAScript);
    } catch (const std::regex_error&) {
      // Not enforced: the CRD was accepted, and kube-apiserver uses Go's RE2,
      // whose syntax differs in corners.
    }
    it = cache.emplace(pattern, std::move(compiled)).first;
  }
  return it->second ? &*it->second : nullptr;
}

}  // namespace

std::vector<std::string> structural_errors(const json& schema, const std::string& path) {
  std::vector<std::string> errors;
  if (!schema.is_object()) return {path + ": must be an object"};
  const bool exempt =
      flag(schema, "x-kubernetes-int-or-string") || flag(schema, "x-kubernetes-preserve-unknown-fields");
  if (!schema.contains("type") && !exempt)
    errors.push_back(path + ".type: Required value: must not be empty for specified object fields");
  if (schema.contains("properties") && schema["properties"].is_object()) {
    for (const auto& [name, property] : schema["properties"].items()) {
      auto nested = structural_errors(property, path + ".properties[" + name + "]");
      errors.insert(errors.end(), nested.begin(), nested.end());
    }
  }
  if (schema.contains("items")) {
    auto nested = structural_errors(schema["items"], path + ".items");
    errors.insert(errors.end(), nested.begin(), nested.end());
  }
  if (schema.contains("additionalProperties") && schema["additionalProperties"].is_object()) {
    auto nested = structural_errors(schema["additionalProperties"], path + ".additionalProperties");
    errors.insert(errors.end(), nested.begin(), nested.end());
  }
  return errors;
}

void normalize(const json& schema, json& value, const std::string& path, std::vector<std::string>& pruned,
               bool is_root) {
  if (!schema.is_object()) return;
  if (value.is_object()) {
    const bool keep_unknown = flag(schema, "x-kubernetes-preserve-unknown-fields");
    const bool embedded = flag(schema, "x-kubernetes-embedded-resource");
    const json* properties = schema.contains("properties") ? &schema["properties"] : nullptr;
    const json* additional = schema.contains("additionalProperties") && schema["additionalProperties"].is_object()
                                 ? &schema["additionalProperties"]
                                 : nullptr;
    for (auto it = value.begin(); it != value.end();) {
      const std::string key = it.key();
      const bool metadata_key = (is_root || embedded) && (key == "apiVersion" || key == "kind" || key == "metadata");
      const json* property = properties && properties->contains(key) ? &(*properties)[key] : additional;
      if (metadata_key && !(properties && properties->contains(key) && key != "metadata")) {
        ++it;
        continue;
      }
      if (property == nullptr) {
        if (!keep_unknown) {
          pruned.push_back(child(path, key));
          it = value.erase(it);
          continue;
        }
        ++it;
        continue;
      }
      if (it->is_null() && !flag(*property, "nullable")) {
        it = value.erase(it);
        continue;
      }
      normalize(*property, *it, child(path, key), pruned, false);
      ++it;
    }
    // Defaults for absent properties.
    if (properties) {
      for (const auto& [key, property] : properties->items()) {
        if (!value.contains(key) && property.is_object() && property.contains("default")) {
          value[key] = property["default"];
          normalize(property, value[key], child(path, key), pruned, false);
        }
      }
    }
  } else if (value.is_array() && schema.contains("items")) {
    for (std::size_t i = 0; i < value.size(); ++i) {
      normalize(schema["items"], value[i], path + "[" + std::to_string(i) + "]", pruned, false);
    }
  }
}

void validate(const json& schema, const json& value, const std::string& path, std::vector<FieldCause>& errors) {
  if (!schema.is_object()) return;
  if (value.is_null()) {
    if (!flag(schema, "nullable") && schema.contains("type")) {
      errors.push_back({"FieldValueTypeInvalid",
                        "Invalid value: \"null\": " + path + " in body must be of type " +
                            schema["type"].get<std::string>() + ": \"null\"",
                        path});
    }
    return;
  }
  if (flag(schema, "x-kubernetes-int-or-string")) {
    if (!value.is_number_integer() && !value.is_string()) {
      errors.push_back({"FieldValueTypeInvalid",
                        "Invalid value: \"" + json_type(value) + "\": " + path +
                            " in body must be of type int-or-string: \"" + json_type(value) + "\"",
                        path});
      return;
    }
  } else if (schema.contains("type") && schema["type"].is_string()) {
    const std::string type = schema["type"].get<std::string>();
    if (!has_type(value, type)) {
      errors.push_back({"FieldValueTypeInvalid",
                        "Invalid value: \"" + json_type(value) + "\": " + path + " in body must be of type " + type +
                            ": \"" + json_type(value) + "\"",
                        path});
      return;
    }
  }

  if (schema.contains("enum") && schema["enum"].is_array()) {
    bool listed = false;
    std::string supported;
    for (const json& allowed : schema["enum"]) {
      listed = listed || allowed == value;
      supported += (supported.empty() ? "" : ", ") + shown(allowed);
    }
    if (!listed) {
      errors.push_back(
          {"FieldValueNotSupported", "Unsupported value: " + shown(value) + ": supported values: " + supported, path});
    }
  }
  const auto invalid = [&](const std::string& why) {
    errors.push_back({"FieldValueInvalid", "Invalid value: " + shown(value) + ": " + path + " in body " + why, path});
  };
  if (value.is_number()) {
    const double number = value.get<double>();
    if (schema.contains("minimum")) {
      const double minimum = schema["minimum"].get<double>();
      if (flag(schema, "exclusiveMinimum") ? number <= minimum : number < minimum) {
        invalid(std::string("should be greater than ") + (flag(schema, "exclusiveMinimum") ? "" : "or equal to ") +
                schema["minimum"].dump());
      }
    }
    if (schema.contains("maximum")) {
      const double maximum = schema["maximum"].get<double>();
      if (flag(schema, "exclusiveMaximum") ? number >= maximum : number > maximum) {
        invalid(std::string("should be less than ") + (flag(schema, "exclusiveMaximum") ? "" : "or equal to ") +
                schema["maximum"].dump());
      }
    }
    const std::string format = schema.value("format", "");
    if (format == "int32" && value.is_number_integer()) {
      const auto integer = value.get<long long>();
      if (integer < -2147483648LL || integer > 2147483647LL) invalid("must be of type int32");
    }
  }
  if (value.is_string()) {
    const std::string& text = value.get_ref<const std::string&>();
    std::size_t characters = 0;
    for (char c : text) characters += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
    if (schema.contains("minLength") && characters < schema["minLength"].get<std::size_t>()) {
      invalid("should be at least " + schema["minLength"].dump() + " chars long");
    }
    bool too_long = false;
    if (schema.contains("maxLength") && characters > schema["maxLength"].get<std::size_t>()) {
      invalid("may not be more than " + schema["maxLength"].dump() + " bytes");
      too_long = true;
    }
    // libstdc++'s std::regex recurses once per character: past this length a
    // match could overflow the stack, so the pattern is not checked (see
    // docs/kube-sim.md).
    constexpr std::size_t kLongestPatternInput = 16 * 1024;
    if (!too_long && text.size() <= kLongestPatternInput && schema.contains("pattern") &&
        schema["pattern"].is_string()) {
      const std::regex* pattern = compiled_pattern(schema["pattern"].get<std::string>());
      if (pattern && !std::regex_search(text, *pattern))
        invalid("should match '" + schema["pattern"].get<std::string>() + "'");
    }
    if (schema.value("format", "") == "date-time" && !parse_rfc3339(text)) {
      invalid("must be of type date-time");
    }
  }
  if (value.is_array()) {
    if (schema.contains("minItems") && value.size() < schema["minItems"].get<std::size_t>()) {
      errors.push_back({"FieldValueInvalid",
                        "Invalid value: " + std::to_string(value.size()) + ": " + path +
                            " in body should have at least " + schema["minItems"].dump() + " items",
                        path});
    }
    if (schema.contains("maxItems") && value.size() > schema["maxItems"].get<std::size_t>()) {
      errors.push_back(
          {"FieldValueTooMany",
           "Too many: " + std::to_string(value.size()) + ": must have at most " + schema["maxItems"].dump() + " items",
           path});
    }
    if (schema.contains("items")) {
      for (std::size_t i = 0; i < value.size(); ++i) {
        validate(schema["items"], value[i], path + "[" + std::to_string(i) + "]", errors);
      }
    }
    // As apiextensions' listtype validation: a set holds each value once, a
    // map each tuple of its keys once; a repeat is reported where it repeats,
    // in the words kube-apiserver uses (Go's %#v of the key fields).
    const std::string list_type = schema.value("x-kubernetes-list-type", "");
    if (list_type == "set" || list_type == "map") {
      std::set<std::string> seen;
      for (std::size_t i = 0; i < value.size(); ++i) {
        std::string key, shown_key;
        if (list_type == "set") {
          key = shown_key = shown(value[i]);
        } else {
          if (!value[i].is_object()) continue;  // a type error, reported above
          std::vector<std::string> fields;
          if (schema.contains("x-kubernetes-list-map-keys") && schema["x-kubernetes-list-map-keys"].is_array()) {
            for (const json& name : schema["x-kubernetes-list-map-keys"]) {
              if (!name.is_string()) continue;
              const std::string field = name.get<std::string>();
              if (value[i].contains(field)) fields.push_back(shown(json(field)) + ":" + shown(value[i][field]));
            }
          }
          for (const std::string& field : fields) key += (key.empty() ? "" : ", ") + field;
          shown_key = "map[string]interface {}{" + key + "}";
        }
        if (!seen.insert(key).second) {
          errors.push_back(
              {"FieldValueDuplicate", "Duplicate value: " + shown_key, path + "[" + std::to_string(i) + "]"});
        }
      }
    }
  }
  if (value.is_object()) {
    if (schema.contains("required") && schema["required"].is_array()) {
      for (const json& required : schema["required"]) {
        if (required.is_string() && !value.contains(required.get<std::string>())) {
          errors.push_back({"FieldValueRequired", "Required value", child(path, required.get<std::string>())});
        }
      }
    }
    const json* properties = schema.contains("properties") ? &schema["properties"] : nullptr;
    for (const auto& [key, item] : value.items()) {
      if (properties && properties->contains(key)) {
        validate((*properties)[key], item, child(path, key), errors);
      } else if (schema.contains("additionalProperties") && schema["additionalProperties"].is_object()) {
        validate(schema["additionalProperties"], item, child(path, key), errors);
      }
    }
  }
  for (const char* combinator : {"allOf", "anyOf", "oneOf"}) {
    if (!schema.contains(combinator) || !schema[combinator].is_array()) continue;
    std::size_t passing = 0;
    std::vector<FieldCause> first_failure;
    for (const json& option : schema[combinator]) {
      std::vector<FieldCause> option_errors;
      validate(option, value, path, option_errors);
      if (option_errors.empty()) {
        ++passing;
      } else if (first_failure.empty()) {
        first_failure = option_errors;
      }
    }
    const std::string name = combinator;
    const std::size_t options = schema[combinator].size();
    if (name == "allOf" && passing != options) errors.insert(errors.end(), first_failure.begin(), first_failure.end());
    if (name == "anyOf" && passing == 0) errors.insert(errors.end(), first_failure.begin(), first_failure.end());
    if (name == "oneOf" && passing != 1) invalid("must validate one and only one schema (oneOf)");
  }
}

}  // namespace k8s4r::kube_sim
