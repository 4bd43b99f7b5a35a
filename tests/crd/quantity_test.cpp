#include "k8s4r/crd/quantity.h"

#include <gtest/gtest.h>

namespace k8s4r::crd {
namespace {

TEST(Quantity, ReadsWhatKubernetesWritesInMilliUnits) {
  const std::pair<const char*, std::int64_t> cases[] = {
      {"0", 0},
      {"1", 1000},
      {"100m", 100},
      {"0.5", 500},
      {".5", 500},
      {"5.", 5000},
      {"+2", 2000},
      {"1500m", 1500},
      {"1n", 1},
      {"1u", 1},
      {"1k", 1000000},
      {"1Ki", 1024000},
      {"128Mi", 134217728000},
      {"1.5Gi", 1610612736000},
      {"1e3", 1000000},
      {"1E-3", 1},
      {"2e+2", 200000},
      {"0.1m", 1},
      {"007", 7000},
  };
  for (const auto& [text, milli] : cases) {
    auto parsed = parse_quantity_milli(text);
    ASSERT_TRUE(parsed) << text << ": " << parsed.error().message;
    EXPECT_EQ(parsed.value(), milli) << text;
  }
  EXPECT_EQ(whole_units(parse_quantity_milli("100m").value()), 1);
  EXPECT_EQ(whole_units(parse_quantity_milli("2").value()), 2);
}

TEST(Quantity, RefusesWhatIsNotOneAndWhatOverflows) {
  for (const char* text : {"", "-1", "m", "1.2.3", "1 m", "1mi", "1KiB", "1e", "1e1.5", "Ki", ".", "1x",
                           "9223372036854775807", "8Ei", "1e100", "1e101", "12345678901234567890123456789012",
                           "0000000000051615.0000000000000000794497T"}) {  // found by fuzz_manager_placement
    auto parsed = parse_quantity_milli(text);
    EXPECT_FALSE(parsed) << text << " read as " << (parsed ? parsed.value() : 0);
    if (!parsed) {
      EXPECT_NE(parsed.error().message.find("is not a quantity"), std::string::npos) << parsed.error().message;
    }
  }
}

}  // namespace
}  // namespace k8s4r::crd
