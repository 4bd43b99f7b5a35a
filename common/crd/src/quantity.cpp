#include "k8s4r/crd/quantity.h"

#include <cctype>
#include <cstdint>
#include <limits>
#include <string>

namespace k8s4r::crd {

namespace {

__extension__ typedef __int128 Wide;  // room for a 30-digit mantissa times 1000

constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();

bool is_digit(char c) { return c >= '0' && c <= '9'; }

Error refuse(std::string_view text, const std::string& why) {
  return Error{"", "'" + std::string(text.substr(0, 64)) + "' is not a quantity: " + why};
}

}  // namespace

Result<std::int64_t> parse_quantity_milli(std::string_view text) {
  if (text.empty()) return refuse(text, "it is empty");
  if (text.size() > 64) return refuse(text, "it is longer than 64 characters");
  std::size_t at = 0;
  if (text[at] == '+' || text[at] == '-') {
    if (text[at] == '-') return refuse(text, "it is negative");
    ++at;
  }
  // The number: digits, optionally a point and more digits (".5" and "5." too).
  Wide mantissa = 0;
  int digits = 0, fraction_digits = 0;
  bool point = false;
  for (; at < text.size() && (is_digit(text[at]) || (text[at] == '.' && !point)); ++at) {
    if (text[at] == '.') {
      point = true;
      continue;
    }
    // Leading zeros do not count towards the 30 digits a mantissa may have.
    if (mantissa == 0 && text[at] == '0' && !point) continue;
    if (++digits > 30) return refuse(text, "it has more than 30 digits");
    mantissa = mantissa * 10 + (text[at] - '0');
    if (point) ++fraction_digits;
  }
  const std::size_t number_end = at;
  const bool has_digit = [&] {
    for (std::size_t i = 0; i < number_end; ++i) {
      if (is_digit(text[i])) return true;
    }
    return false;
  }();
  if (!has_digit) return refuse(text, "it has no digits");

  // The suffix: binary (Ki .. Ei), decimal (n u m k M G T P E), or an exponent.
  const std::string_view suffix = text.substr(at);
  int power_of_ten = -fraction_digits;
  int power_of_two = 0;
  if (suffix.empty()) {
  } else if (suffix.size() == 2 && suffix[1] == 'i') {
    const std::string_view binary = "KMGTPE";
    const auto found = binary.find(suffix[0]);
    if (found == std::string_view::npos) return refuse(text, "'" + std::string(suffix) + "' is no suffix");
    power_of_two = 10 * static_cast<int>(found + 1);
  } else if (suffix.size() == 1 && suffix[0] != 'e' && suffix[0] != 'E') {
    switch (suffix[0]) {
      case 'n':
        power_of_ten -= 9;
        break;
      case 'u':
        power_of_ten -= 6;
        break;
      case 'm':
        power_of_ten -= 3;
        break;
      case 'k':
        power_of_ten += 3;
        break;
      case 'M':
        power_of_ten += 6;
        break;
      case 'G':
        power_of_ten += 9;
        break;
      case 'T':
        power_of_ten += 12;
        break;
      case 'P':
        power_of_ten += 15;
        break;
      case 'E':
        power_of_ten += 18;
        break;
      default:
        return refuse(text, "'" + std::string(suffix) + "' is no suffix");
    }
  } else if (suffix[0] == 'e' || suffix[0] == 'E') {
    std::size_t i = 1;
    bool negative = false;
    if (i < suffix.size() && (suffix[i] == '+' || suffix[i] == '-')) negative = suffix[i++] == '-';
    if (i == suffix.size()) return refuse(text, "its exponent has no digits");
    int exponent = 0;
    for (; i < suffix.size(); ++i) {
      if (!is_digit(suffix[i])) return refuse(text, "its exponent is not a whole number");
      exponent = exponent * 10 + (suffix[i] - '0');
      if (exponent > 100) return refuse(text, "its exponent is out of range");
    }
    power_of_ten += negative ? -exponent : exponent;
  } else {
    return refuse(text, "'" + std::string(suffix) + "' is no suffix");
  }

  // mantissa * 2^power_of_two * 10^(power_of_ten + 3), rounded up, in 63 bits.
  power_of_ten += 3;
  Wide value = mantissa;
  for (int i = 0; i < power_of_two; ++i) {
    value *= 2;
    if (value > kMax) return refuse(text, "it is too large");
  }
  if (value == 0) return std::int64_t{0};
  for (; power_of_ten > 0; --power_of_ten) {
    value *= 10;
    if (value > kMax) return refuse(text, "it is too large");
  }
  for (; power_of_ten < 0; ++power_of_ten) {
    const bool remainder = value % 10 != 0;
    value = value / 10 + (remainder ? 1 : 0);  // rounded up at each step: ceil(ceil(x/10)/10) = ceil(x/100)
  }
  if (value > kMax) return refuse(text, "it is too large");  // a long mantissa scaled down by less than it holds
  return static_cast<std::int64_t>(value);
}

}  // namespace k8s4r::crd
