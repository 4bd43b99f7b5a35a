#include "k8s4r/common/duration.h"

#include <gtest/gtest.h>

#include <limits>

namespace k8s4r {
namespace {

using namespace std::chrono_literals;
using std::chrono::nanoseconds;

nanoseconds parse(const char* text) {
  auto parsed = parse_go_duration(text);
  EXPECT_TRUE(parsed) << text << ": " << (parsed ? "" : parsed.error().message);
  return parsed ? parsed.value() : nanoseconds{-1};
}

TEST(GoDuration, ParsesWhatKubernetesAndUsersWrite) {
  EXPECT_EQ(parse("0"), 0ns);
  EXPECT_EQ(parse("0s"), 0ns);
  EXPECT_EQ(parse("90s"), 90s);
  EXPECT_EQ(parse("1m30s"), 90s);
  EXPECT_EQ(parse("1h0m0s"), 1h);
  EXPECT_EQ(parse("1.5h"), 90min);
  EXPECT_EQ(parse("500ms"), 500ms);
  EXPECT_EQ(parse("1.5s"), 1500ms);
  EXPECT_EQ(parse(".5s"), 500ms);
  EXPECT_EQ(parse("1.s"), 1s);
  EXPECT_EQ(parse("10us"), 10us);
  EXPECT_EQ(parse("10\xC2\xB5s"), 10us);  // µ (micro sign)
  EXPECT_EQ(parse("10\xCE\xBCs"), 10us);  // μ (Greek mu)
  EXPECT_EQ(parse("7ns"), 7ns);
  EXPECT_EQ(parse("2h45m30.5s"), 2h + 45min + 30s + 500ms);
  EXPECT_EQ(parse("-1m"), -1min);
  EXPECT_EQ(parse("+5s"), 5s);
  EXPECT_EQ(parse("1h1h"), 2h);  // Go adds repeated units
}

TEST(GoDuration, RejectsWhatGoRejects) {
  for (const char* text :
       {"", "-", "+", "s", "5", "1x", "1.5", ".s", "1 s", "1sm", "1mss", "- 1s", "1e3s", "1,5s", "2562048h"}) {
    auto parsed = parse_go_duration(text);
    EXPECT_FALSE(parsed) << text;
    if (!parsed) {
      EXPECT_NE(parsed.error().message.find("invalid Go duration"), std::string::npos);
    }
  }
}

TEST(GoDuration, HandlesTheLimitsOfInt64Nanoseconds) {
  EXPECT_EQ(parse("2562047h47m16.854775807s"), nanoseconds::max());
  EXPECT_EQ(parse("-2562047h47m16.854775808s"), nanoseconds::min());
  EXPECT_FALSE(parse_go_duration("2562047h47m16.854775808s"));
  EXPECT_FALSE(parse_go_duration("9223372036854775808ns"));
  EXPECT_EQ(parse("9223372036854775807ns"), nanoseconds::max());
}

TEST(GoDuration, NonNegativeRefusesSigns) {
  EXPECT_EQ(parse_non_negative_go_duration("30s").value(), 30s);
  EXPECT_FALSE(parse_non_negative_go_duration("-30s"));
  EXPECT_FALSE(parse_non_negative_go_duration("+30s"));
}

TEST(GoDuration, NonNegativeRefusesWhatWouldOverflowADeadline) {
  // Go's own limit parses, but now + it wraps a clock; ten years is the maximum.
  EXPECT_EQ(parse_non_negative_go_duration("87600h").value(), kMaxDuration);
  for (const char* text : {"87600h0m0.000000001s", "2562047h47m16.854775807s", "9223372036854775807ns", "100000h"}) {
    const auto parsed = parse_non_negative_go_duration(text);
    ASSERT_FALSE(parsed) << text;
    EXPECT_NE(parsed.error().message.find("longer than the maximum of 87600h0m0s"), std::string::npos) << text;
  }
  EXPECT_TRUE(parse_go_duration("2562047h47m16.854775807s"));  // the general parser stays Go's
}

TEST(GoDuration, FormatsAsGoDurationString) {
  EXPECT_EQ(format_go_duration(0ns), "0s");
  EXPECT_EQ(format_go_duration(90s), "1m30s");
  EXPECT_EQ(format_go_duration(1h), "1h0m0s");
  EXPECT_EQ(format_go_duration(2min), "2m0s");
  EXPECT_EQ(format_go_duration(1500ms), "1.5s");
  EXPECT_EQ(format_go_duration(500ms), "500ms");
  EXPECT_EQ(format_go_duration(1ms + 500us), "1.5ms");
  EXPECT_EQ(format_go_duration(10us), "10\xC2\xB5s");
  EXPECT_EQ(format_go_duration(7ns), "7ns");
  EXPECT_EQ(format_go_duration(-90s), "-1m30s");
  EXPECT_EQ(format_go_duration(72h + 3min + 500ms), "72h3m0.5s");
  EXPECT_EQ(format_go_duration(nanoseconds::max()), "2562047h47m16.854775807s");
  EXPECT_EQ(format_go_duration(nanoseconds::min()), "-2562047h47m16.854775808s");
}

TEST(GoDuration, FormatThenParseIsIdentity) {
  for (nanoseconds d : {nanoseconds{0}, nanoseconds{1}, nanoseconds{999}, nanoseconds{1001}, nanoseconds{123456789},
                        nanoseconds{90'000'000'000}, nanoseconds{-3'600'000'000'001}, nanoseconds::max()}) {
    EXPECT_EQ(parse(format_go_duration(d).c_str()), d) << format_go_duration(d);
  }
}

}  // namespace
}  // namespace k8s4r
