#include "k8s4r/common/duration.h"

#include <cstdint>
#include <limits>

namespace k8s4r {
namespace {

using std::uint64_t;

constexpr uint64_t kNanosecond = 1;
constexpr uint64_t kMicrosecond = 1000 * kNanosecond;
constexpr uint64_t kMillisecond = 1000 * kMicrosecond;
constexpr uint64_t kSecond = 1000 * kMillisecond;
constexpr uint64_t kMinute = 60 * kSecond;
constexpr uint64_t kHour = 60 * kMinute;
// Go allows |d| up to 2^63 ns: the magnitude of the most negative int64.
constexpr uint64_t kMaxMagnitude = uint64_t{1} << 63;

Error invalid(std::string_view text, std::string_view why) {
  return Error{"", "invalid Go duration '" + std::string(text) + "': " + std::string(why)};
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// The unit names Go accepts; a unit is matched whole, so "ms" is never "m".
struct Unit {
  std::string_view name;
  uint64_t nanoseconds;
};
constexpr Unit kUnits[] = {
    {"ns", kNanosecond},
    {"us", kMicrosecond},
    {"\xC2\xB5s", kMicrosecond},  // µ U+00B5
    {"\xCE\xBCs", kMicrosecond},  // μ U+03BC
    {"ms", kMillisecond},
    {"s", kSecond},
    {"m", kMinute},
    {"h", kHour},
};

// Reads a unit at the start of `rest`; units are followed by a digit, '.' or
// the end, so "mss" or "hx" are rejected.
const Unit* read_unit(std::string_view rest, std::size_t& length) {
  length = 0;
  while (length < rest.size() && !is_digit(rest[length]) && rest[length] != '.') ++length;
  for (const Unit& unit : kUnits) {
    if (rest.substr(0, length) == unit.name) return &unit;
  }
  return nullptr;
}

}  // namespace

Result<std::chrono::nanoseconds> parse_go_duration(std::string_view text) {
  std::string_view rest = text;
  bool negative = false;
  if (!rest.empty() && (rest.front() == '-' || rest.front() == '+')) {
    negative = rest.front() == '-';
    rest.remove_prefix(1);
  }
  if (rest == "0") return std::chrono::nanoseconds{0};
  if (rest.empty()) return invalid(text, "empty");

  uint64_t total = 0;
  while (!rest.empty()) {
    // The integer part, then an optional fraction; at least one digit overall.
    uint64_t whole = 0;
    std::size_t whole_digits = 0;
    bool overflow = false;
    while (whole_digits < rest.size() && is_digit(rest[whole_digits])) {
      const uint64_t digit = static_cast<uint64_t>(rest[whole_digits] - '0');
      if (whole > (kMaxMagnitude - digit) / 10) overflow = true;
      if (!overflow) whole = whole * 10 + digit;
      ++whole_digits;
    }
    if (overflow) return invalid(text, "out of range");
    rest.remove_prefix(whole_digits);

    uint64_t fraction = 0;
    uint64_t scale = 1;
    std::size_t fraction_digits = 0;
    if (!rest.empty() && rest.front() == '.') {
      rest.remove_prefix(1);
      while (fraction_digits < rest.size() && is_digit(rest[fraction_digits])) {
        // Like Go, digits beyond what 64 bits can scale are dropped.
        if (scale <= std::numeric_limits<uint64_t>::max() / 10 / 10) {
          fraction = fraction * 10 + static_cast<uint64_t>(rest[fraction_digits] - '0');
          scale *= 10;
        }
        ++fraction_digits;
      }
      rest.remove_prefix(fraction_digits);
    }
    if (whole_digits == 0 && fraction_digits == 0) return invalid(text, "expected a number");

    std::size_t unit_length = 0;
    const Unit* unit = read_unit(rest, unit_length);
    if (unit_length == 0) return invalid(text, "missing unit (one of ns, us, µs, ms, s, m, h)");
    if (unit == nullptr) {
      return invalid(text, "unknown unit '" + std::string(rest.substr(0, unit_length)) + "'");
    }
    rest.remove_prefix(unit_length);

    if (whole > kMaxMagnitude / unit->nanoseconds) return invalid(text, "out of range");
    uint64_t value = whole * unit->nanoseconds;
    if (fraction > 0) {
      // Go adds the fraction in floating point and truncates.
      const long double part = static_cast<long double>(fraction) *
                               (static_cast<long double>(unit->nanoseconds) / static_cast<long double>(scale));
      value += static_cast<uint64_t>(part);
      if (value > kMaxMagnitude) return invalid(text, "out of range");
    }
    if (value > kMaxMagnitude - total) return invalid(text, "out of range");
    total += value;
  }

  if (total == kMaxMagnitude) {
    if (!negative) return invalid(text, "out of range");
    return std::chrono::nanoseconds{std::numeric_limits<std::int64_t>::min()};
  }
  const auto magnitude = static_cast<std::int64_t>(total);
  return std::chrono::nanoseconds{negative ? -magnitude : magnitude};
}

Result<std::chrono::nanoseconds> parse_non_negative_go_duration(std::string_view text) {
  if (!text.empty() && (text.front() == '-' || text.front() == '+')) {
    return invalid(text, "must not have a sign");
  }
  auto parsed = parse_go_duration(text);
  if (parsed && parsed.value() > kMaxDuration) {
    return invalid(text, "longer than the maximum of " + format_go_duration(kMaxDuration) + " (ten years)");
  }
  return parsed;
}

namespace {

// "<whole>.<fraction>" with trailing zeros of the fraction dropped, as Go's
// fmtFrac does; `digits` is how many decimal places `fraction` has.
std::string with_fraction(uint64_t whole, uint64_t fraction, int digits) {
  std::string text = std::to_string(whole);
  if (fraction == 0) return text;
  std::string decimals(static_cast<std::size_t>(digits), '0');
  for (int i = digits - 1; i >= 0; --i) {
    decimals[static_cast<std::size_t>(i)] = static_cast<char>('0' + fraction % 10);
    fraction /= 10;
  }
  while (!decimals.empty() && decimals.back() == '0') decimals.pop_back();
  return text + "." + decimals;
}

}  // namespace

std::string format_go_duration(std::chrono::nanoseconds duration) {
  const std::int64_t count = duration.count();
  if (count == 0) return "0s";
  const bool negative = count < 0;
  // Two's complement: this is right for INT64_MIN too.
  const uint64_t magnitude = negative ? ~static_cast<uint64_t>(count) + 1 : static_cast<uint64_t>(count);

  std::string text;
  if (magnitude < kSecond) {
    if (magnitude < kMicrosecond) {
      text = std::to_string(magnitude) + "ns";
    } else if (magnitude < kMillisecond) {
      text = with_fraction(magnitude / kMicrosecond, magnitude % kMicrosecond, 3) + "\xC2\xB5s";
    } else {
      text = with_fraction(magnitude / kMillisecond, magnitude % kMillisecond, 6) + "ms";
    }
  } else {
    const uint64_t total_seconds = magnitude / kSecond;
    text = with_fraction(total_seconds % 60, magnitude % kSecond, 9) + "s";
    const uint64_t total_minutes = total_seconds / 60;
    if (total_minutes > 0) {
      text = std::to_string(total_minutes % 60) + "m" + text;
      const uint64_t hours = total_minutes / 60;
      if (hours > 0) text = std::to_string(hours) + "h" + text;
    }
  }
  return negative ? "-" + text : text;
}

}  // namespace k8s4r
