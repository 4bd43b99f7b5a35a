// Base64 for kubeconfig certificate and key data (standard alphabet, padded) and
// list continue tokens (URL-safe alphabet, unpadded).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace k8s4r {

std::string base64_encode(std::string_view bytes, bool url_safe = false);
// Accepts both alphabets, with or without padding; nullopt on other characters.
std::optional<std::string> base64_decode(std::string_view text);

}  // namespace k8s4r
