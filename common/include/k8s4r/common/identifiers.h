// Validation of the identifiers that become MQTT topic levels and Kubernetes
// object names: robot ids and task uids.
//
// Both must be DNS-1123 labels (RFC 1123, as Kubernetes defines them):
// 1 to 63 characters of lowercase letters, digits and '-', starting and ending
// with a letter or digit. That rules out every character that could change
// the meaning of a topic ('+', '#', '/') and anything kubectl cannot name.
// A Kubernetes object uid (a lowercase UUID) is such a label.
#pragma once

#include "k8s4r/common/result.h"

#include <cstddef>
#include <string_view>

namespace k8s4r {

inline constexpr std::size_t kMaxIdentifierLength = 63;

// ok() for a DNS-1123 label; otherwise an Error with an empty field and a
// message saying which rule failed (empty, too long, a topic wildcard or
// separator, or not a DNS-1123 label). Callers attach the field name.
Result<void> validate_identifier(std::string_view value);

// validate_identifier with the field name set to `field`.
Result<void> validate_identifier(std::string_view value, std::string_view field);

}  // namespace k8s4r
