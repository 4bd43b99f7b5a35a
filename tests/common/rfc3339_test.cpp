#include "k8s4r/common/rfc3339.h"

#include <gtest/gtest.h>

namespace k8s4r {
namespace {

using namespace std::chrono;

Timestamp at(int y, unsigned m, unsigned d, int hh, int mm, int ss, nanoseconds fraction = 0ns) {
  return sys_days{year{y} / month{m} / day{d}} + hours{hh} + minutes{mm} + seconds{ss} + fraction;
}

TEST(Rfc3339, ParsesKubernetesTimes) {
  EXPECT_EQ(parse_rfc3339("2024-02-29T23:59:59Z").value(), at(2024, 2, 29, 23, 59, 59));
  EXPECT_EQ(parse_rfc3339("1970-01-01T00:00:00Z").value(), Timestamp{});
  // metav1.MicroTime, as Events and Leases carry it.
  EXPECT_EQ(parse_rfc3339("2024-05-01T10:00:00.123456Z").value(), at(2024, 5, 1, 10, 0, 0, 123456us));
  EXPECT_EQ(parse_rfc3339("2024-05-01T10:00:00.5Z").value(), at(2024, 5, 1, 10, 0, 0, 500ms));
  EXPECT_EQ(parse_rfc3339("2024-05-01T10:00:00.000000001Z").value(), at(2024, 5, 1, 10, 0, 0, 1ns));
}

TEST(Rfc3339, NormalisesOffsetsToUtc) {
  EXPECT_EQ(parse_rfc3339("2024-05-01T12:30:00+02:30").value(), at(2024, 5, 1, 10, 0, 0));
  EXPECT_EQ(parse_rfc3339("2024-12-31T23:00:00-01:00").value(), at(2025, 1, 1, 0, 0, 0));
  EXPECT_EQ(parse_rfc3339("2024-05-01T10:00:00+00:00").value(), parse_rfc3339("2024-05-01T10:00:00Z").value());
}

TEST(Rfc3339, RejectsWhatGoRejects) {
  for (const char* text : {"",
                           "2024-05-01",
                           "2024-05-01T10:00:00",
                           "2024-05-01 10:00:00Z",
                           "2024-05-01t10:00:00Z",
                           "2024-05-01T10:00:00z",
                           "2023-02-29T00:00:00Z",
                           "2024-13-01T00:00:00Z",
                           "2024-00-10T00:00:00Z",
                           "2024-05-01T24:00:00Z",
                           "2024-05-01T10:60:00Z",
                           "2024-05-01T10:00:60Z",
                           "2024-05-01T10:00:00.Z",
                           "2024-05-01T10:00:00.1234567890Z",
                           "2024-05-01T10:00:00+0200",
                           "2024-05-01T10:00:00+24:00",
                           "2024-05-01T10:00:00Zjunk",
                           "24-05-01T10:00:00Z",
                           "2024-5-01T10:00:00Z",
                           "10000-01-01T00:00:00Z"}) {
    auto parsed = parse_rfc3339(text);
    EXPECT_FALSE(parsed) << text;
    if (!parsed) {
      EXPECT_NE(parsed.error().message.find("invalid RFC 3339 time"), std::string::npos);
    }
  }
}

TEST(Rfc3339, FormatsInUtcAtTheAskedPrecision) {
  const Timestamp t = at(2026, 11, 22, 1, 2, 3, 456789123ns);
  EXPECT_EQ(format_rfc3339(t), "2026-11-22T01:02:03Z");
  EXPECT_EQ(format_rfc3339(t, TimePrecision::milliseconds), "2026-11-22T01:02:03.456Z");
  EXPECT_EQ(format_rfc3339(t, TimePrecision::microseconds), "2026-11-22T01:02:03.456789Z");
  EXPECT_EQ(format_rfc3339(t, TimePrecision::nanoseconds), "2026-11-22T01:02:03.456789123Z");
  EXPECT_EQ(format_rfc3339(at(1969, 12, 31, 23, 59, 59, 500ms), TimePrecision::milliseconds),
            "1969-12-31T23:59:59.500Z");
  EXPECT_EQ(format_rfc3339(t, TimePrecision::as_needed), "2026-11-22T01:02:03.456789123Z");
  EXPECT_EQ(format_rfc3339(at(2026, 11, 22, 1, 2, 3, 450ms), TimePrecision::as_needed), "2026-11-22T01:02:03.45Z");
  EXPECT_EQ(format_rfc3339(at(2026, 11, 22, 1, 2, 3), TimePrecision::as_needed), "2026-11-22T01:02:03Z");
}

TEST(Rfc3339, FormatThenParseIsIdentity) {
  const Timestamp t = at(2030, 1, 2, 3, 4, 5, 6ms);
  EXPECT_EQ(parse_rfc3339(format_rfc3339(t, TimePrecision::milliseconds)).value(), t);
}

}  // namespace
}  // namespace k8s4r
