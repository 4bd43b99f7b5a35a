#include "k8s4r/common/base64.h"

namespace k8s4r {

std::string base64_encode(std::string_view bytes, bool url_safe) {
  const char* alphabet = url_safe ? "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
                                  : "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  unsigned value = 0;
  int bits = 0;
  for (char c : bytes) {
    value = (value << 8) | static_cast<unsigned char>(c);
    bits += 8;
    while (bits >= 6) {
      bits -= 6;
      out += alphabet[(value >> bits) & 0x3Fu];
    }
  }
  if (bits > 0) out += alphabet[(value << (6 - bits)) & 0x3Fu];
  if (!url_safe) {
    while (out.size() % 4 != 0) out += '=';
  }
  return out;
}

std::optional<std::string> base64_decode(std::string_view text) {
  std::string out;
  unsigned value = 0;
  int bits = 0;
  for (char c : text) {
    unsigned digit = 0;
    if (c >= 'A' && c <= 'Z') {
      digit = static_cast<unsigned>(c - 'A');
    } else if (c >= 'a' && c <= 'z') {
      digit = static_cast<unsigned>(c - 'a') + 26;
    } else if (c >= '0' && c <= '9') {
      digit = static_cast<unsigned>(c - '0') + 52;
    } else if (c == '-' || c == '+') {
      digit = 62;
    } else if (c == '_' || c == '/') {
      digit = 63;
    } else if (c == '=') {
      break;
    } else {
      return std::nullopt;
    }
    value = (value << 6) | digit;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>(static_cast<unsigned char>((value >> bits) & 0xFFu));
    }
  }
  return out;
}

}  // namespace k8s4r
