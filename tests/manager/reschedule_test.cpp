// A lost slot's replacement: how many, and after how long.
#include "k8s4r/manager/reschedule.h"

#include <gtest/gtest.h>

namespace k8s4r::manager {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

const Timestamp kNow = parse_rfc3339("2026-11-26T12:00:00Z").value();

ReschedulePolicy policy(const char* text, const std::string& type = "batch") {
  auto read = read_reschedule_policy(json::parse(text), type);
  EXPECT_TRUE(read) << text << ": " << read.error().to_string();
  return read.value();
}

TEST(Reschedule, DefaultsAreNomadsPerJobType) {
  const ReschedulePolicy batch = read_reschedule_policy(json(), "batch").value();
  EXPECT_EQ(batch.attempts, 1);
  EXPECT_EQ(batch.interval, 24h);
  EXPECT_EQ(batch.delay, 5s);
  EXPECT_FALSE(batch.unlimited);
  const ReschedulePolicy service = read_reschedule_policy(json(), "service").value();
  EXPECT_TRUE(service.unlimited);
  EXPECT_EQ(service.delay_function, "exponential");
  EXPECT_EQ(service.max_delay, 1h);
  EXPECT_EQ(policy(R"({"attempts": 3})", "service").attempts, 3);  // a field given overrides one default only
}

TEST(Reschedule, AttemptsAreCountedWithinTheInterval) {
  const ReschedulePolicy twice = policy(R"({"attempts": 2, "interval": "10m", "delay": "1s"})");
  EXPECT_TRUE(decide_reschedule(twice, {}, kNow).reschedule);
  EXPECT_TRUE(decide_reschedule(twice, {kNow - 1min}, kNow).reschedule);
  const RescheduleDecision refused = decide_reschedule(twice, {kNow - 1min, kNow - 2min}, kNow);
  EXPECT_FALSE(refused.reschedule);
  EXPECT_NE(refused.why.find("rescheduled 2 time(s) in the last 10m0s"), std::string::npos) << refused.why;
  // Older ones no longer count.
  EXPECT_TRUE(decide_reschedule(twice, {kNow - 11min, kNow - 20min}, kNow).reschedule);
  EXPECT_FALSE(decide_reschedule(policy(R"({"attempts": 0})"), {}, kNow).reschedule);
  EXPECT_TRUE(decide_reschedule(policy(R"({"attempts": 0, "unlimited": true})"), {kNow, kNow, kNow}, kNow).reschedule);
}

TEST(Reschedule, TheDelayGrowsAsItsFunctionSaysUpToItsCap) {
  auto delays = [](const ReschedulePolicy& p) {
    std::vector<std::chrono::nanoseconds> out;
    std::vector<Timestamp> earlier;
    for (int i = 0; i < 6; ++i) {
      out.push_back(decide_reschedule(p, earlier, kNow).delay);
      earlier.push_back(kNow - 48h);  // long ago: counts for the delay, not the attempts
    }
    return out;
  };
  using V = std::vector<std::chrono::nanoseconds>;
  EXPECT_EQ(delays(policy(R"({"delay": "1s", "delayFunction": "constant", "unlimited": true})")),
            (V{1s, 1s, 1s, 1s, 1s, 1s}));
  EXPECT_EQ(delays(policy(R"({"delay": "1s", "delayFunction": "exponential", "maxDelay": "10s", "unlimited": true})")),
            (V{1s, 2s, 4s, 8s, 10s, 10s}));
  EXPECT_EQ(delays(policy(R"({"delay": "1s", "delayFunction": "fibonacci", "unlimited": true})")),
            (V{1s, 1s, 2s, 3s, 5s, 8s}));
  // Huge values saturate at the cap instead of overflowing.
  const ReschedulePolicy huge = policy(R"({"delay": "87600h", "delayFunction": "exponential", "unlimited": true})");
  std::vector<Timestamp> many(200, kNow - 100000h);
  EXPECT_GT(decide_reschedule(huge, many, kNow).delay, 0ns);
}

TEST(Reschedule, BadPoliciesAreErrorsNamingTheField) {
  EXPECT_EQ(read_reschedule_policy(json::parse(R"({"attempts": -1})"), "batch").error().field,
            "reschedulePolicy.attempts");
  EXPECT_EQ(read_reschedule_policy(json::parse(R"({"delay": "soon"})"), "batch")
                .error()
                .field.rfind("reschedulePolicy.delay", 0),
            0u);
  EXPECT_EQ(read_reschedule_policy(json::parse(R"({"delayFunction": "linear"})"), "batch").error().field,
            "reschedulePolicy.delayFunction");
  EXPECT_FALSE(read_reschedule_policy(json::parse(R"([1])"), "batch"));
}

}  // namespace
}  // namespace k8s4r::manager
