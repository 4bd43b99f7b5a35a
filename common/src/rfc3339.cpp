#include "k8s4r/common/rfc3339.h"

#include <cstdio>

namespace k8s4r {
namespace {

using namespace std::chrono;

Error invalid(std::string_view text, std::string_view why) {
  return Error{"", "invalid RFC 3339 time '" + std::string(text) + "': " + std::string(why)};
}

// Reads exactly `count` digits at `pos`; false if any is not a digit.
bool read_digits(std::string_view text, std::size_t pos, std::size_t count, int& value) {
  if (pos + count > text.size()) return false;
  value = 0;
  for (std::size_t i = pos; i < pos + count; ++i) {
    if (text[i] < '0' || text[i] > '9') return false;
    value = value * 10 + (text[i] - '0');
  }
  return true;
}

bool expect(std::string_view text, std::size_t pos, char c) { return pos < text.size() && text[pos] == c; }

}  // namespace

Result<Timestamp> parse_rfc3339(std::string_view text) {
  // 2006-01-02T15:04:05
  // 0123456789012345678
  int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0;
  if (!read_digits(text, 0, 4, year) || !expect(text, 4, '-') || !read_digits(text, 5, 2, month) ||
      !expect(text, 7, '-') || !read_digits(text, 8, 2, day) || !expect(text, 10, 'T') ||
      !read_digits(text, 11, 2, hour) || !expect(text, 13, ':') || !read_digits(text, 14, 2, minute) ||
      !expect(text, 16, ':') || !read_digits(text, 17, 2, second)) {
    return invalid(text, "expected the form 2006-01-02T15:04:05Z");
  }
  const year_month_day date{std::chrono::year{year}, std::chrono::month{static_cast<unsigned>(month)},
                            std::chrono::day{static_cast<unsigned>(day)}};
  if (!date.ok()) return invalid(text, "no such date");
  if (hour > 23 || minute > 59 || second > 59) return invalid(text, "no such time of day");

  std::size_t pos = 19;
  nanoseconds fraction{0};
  if (expect(text, pos, '.')) {
    ++pos;
    std::int64_t value = 0;
    std::size_t digits = 0;
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
      if (digits == 9) return invalid(text, "more than 9 fractional digits");
      value = value * 10 + (text[pos] - '0');
      ++digits;
      ++pos;
    }
    if (digits == 0) return invalid(text, "expected digits after '.'");
    for (std::size_t i = digits; i < 9; ++i) value *= 10;
    fraction = nanoseconds{value};
  }

  minutes offset{0};
  if (expect(text, pos, 'Z')) {
    ++pos;
  } else if (expect(text, pos, '+') || expect(text, pos, '-')) {
    const bool behind = text[pos] == '-';
    int offset_hours = 0, offset_minutes = 0;
    if (!read_digits(text, pos + 1, 2, offset_hours) || !expect(text, pos + 3, ':') ||
        !read_digits(text, pos + 4, 2, offset_minutes) || offset_hours > 23 || offset_minutes > 59) {
      return invalid(text, "expected a time zone offset like +07:00");
    }
    offset = hours{offset_hours} + minutes{offset_minutes};
    if (behind) offset = -offset;
    pos += 6;
  } else {
    return invalid(text, "expected 'Z' or a time zone offset like +07:00");
  }
  if (pos != text.size()) return invalid(text, "unexpected text after the time zone");

  // nanoseconds since 1970 in 64 bits cover the years 1678 to 2261.
  if (year < 1678 || year > 2261) return invalid(text, "year out of range 1678-2261");
  const sys_days days{date};
  return Timestamp{days.time_since_epoch() + hours{hour} + minutes{minute} + seconds{second} + fraction - offset};
}

std::string format_rfc3339(Timestamp time, TimePrecision precision) {
  const sys_days days = floor<std::chrono::days>(time);
  const year_month_day date{days};
  const hh_mm_ss<nanoseconds> clock{time - days};
  char buffer[48];
  int length = std::snprintf(buffer, sizeof buffer, "%04d-%02u-%02uT%02d:%02d:%02d", static_cast<int>(date.year()),
                             static_cast<unsigned>(date.month()), static_cast<unsigned>(date.day()),
                             static_cast<int>(clock.hours().count()), static_cast<int>(clock.minutes().count()),
                             static_cast<int>(clock.seconds().count()));
  const auto nanos = clock.subseconds().count();
  const auto size = sizeof buffer - static_cast<std::size_t>(length);
  switch (precision) {
    case TimePrecision::seconds:
      break;
    case TimePrecision::milliseconds:
      length += std::snprintf(buffer + length, size, ".%03lld", static_cast<long long>(nanos / 1'000'000));
      break;
    case TimePrecision::microseconds:
      length += std::snprintf(buffer + length, size, ".%06lld", static_cast<long long>(nanos / 1'000));
      break;
    case TimePrecision::nanoseconds:
      length += std::snprintf(buffer + length, size, ".%09lld", static_cast<long long>(nanos));
      break;
    case TimePrecision::as_needed:
      if (nanos != 0) {
        length += std::snprintf(buffer + length, size, ".%09lld", static_cast<long long>(nanos));
        while (buffer[length - 1] == '0') --length;
      }
      break;
  }
  return std::string(buffer, static_cast<std::size_t>(length)) + "Z";
}

std::chrono::nanoseconds elapsed(Timestamp from, Timestamp to) {
  if (to <= from) return std::chrono::nanoseconds(0);
  std::int64_t out = 0;
  if (__builtin_sub_overflow(to.time_since_epoch().count(), from.time_since_epoch().count(), &out))
    return std::chrono::nanoseconds::max();
  return std::chrono::nanoseconds(out);
}

Timestamp later_by(Timestamp time, std::chrono::nanoseconds delay) {
  std::int64_t out = 0;
  if (__builtin_add_overflow(time.time_since_epoch().count(), delay.count(), &out)) return Timestamp::max();
  return Timestamp(std::chrono::nanoseconds(out));
}

}  // namespace k8s4r
