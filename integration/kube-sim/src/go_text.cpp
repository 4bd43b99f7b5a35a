#include "go_text.h"

#include <cstdio>

namespace k8s4r::kube_sim {

using nlohmann::json;

std::string go_quote(const std::string& text) {
  std::string out = "\"";
  for (char raw : text) {
    const auto c = static_cast<unsigned char>(raw);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", c);
      out += escaped;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string json_kind(const json& value) {
  if (value.is_array()) return "array";
  if (value.is_object()) return "object";
  if (value.is_string()) return "string";
  if (value.is_boolean()) return "bool";
  return "number";
}

std::string unmarshal_error(const json& value, const std::string& field, const std::string& go_type) {
  return "json: cannot unmarshal " + json_kind(value) + " into Go struct field " + field + " of type " + go_type;
}

}  // namespace k8s4r::kube_sim
