// The small hashes and encodings several parts need, written once: lowercase
// hex, and 64-bit FNV-1a (a stable, non-cryptographic hash for cache
// comparisons and deterministic names; never for anything an attacker must
// not forge).
//
// Thread-safety: pure functions; a Fnv1a64 is a plain value.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace k8s4r {

std::string hex_encode(std::string_view bytes);

class Fnv1a64 {
 public:
  Fnv1a64& update(std::string_view bytes) {
    for (char c : bytes) {
      value_ ^= static_cast<unsigned char>(c);
      value_ *= kPrime;
    }
    return *this;
  }
  std::uint64_t value() const { return value_; }
  // The value as 16 lowercase hex digits.
  std::string hex() const;

 private:
  static constexpr std::uint64_t kOffsetBasis = 14695981039346656037ULL;
  static constexpr std::uint64_t kPrime = 1099511628211ULL;
  std::uint64_t value_ = kOffsetBasis;
};

}  // namespace k8s4r
