#include "k8s4r/common/identifiers.h"

#include <string>

namespace k8s4r {
namespace {

bool is_lower_alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

}  // namespace

Result<void> validate_identifier(std::string_view value) {
  if (value.empty()) return Error{"", "must not be empty"};
  if (value.size() > kMaxIdentifierLength) {
    return Error{"", "must be at most 63 characters, got " + std::to_string(value.size())};
  }
  // Checked before the general rule so the log says why it matters.
  if (value.find_first_of("+#/") != std::string_view::npos) {
    return Error{"", "must not contain '+', '#' or '/' (they would change the MQTT topic)"};
  }
  bool body_ok = true;
  for (char c : value) body_ok = body_ok && (is_lower_alnum(c) || c == '-');
  if (!body_ok || !is_lower_alnum(value.front()) || !is_lower_alnum(value.back())) {
    return Error{"",
                 "must be a DNS-1123 label: lowercase letters, digits and '-', starting and "
                 "ending with a letter or digit"};
  }
  return ok();
}

Result<void> validate_identifier(std::string_view value, std::string_view field) {
  auto checked = validate_identifier(value);
  if (!checked) return Error{std::string(field), checked.error().message};
  return ok();
}

}  // namespace k8s4r
