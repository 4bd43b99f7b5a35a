// Slots and their owners (common/slots.h): stable, even, and moved only
// where membership changed.
#include "k8s4r/common/slots.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

namespace k8s4r {
namespace {

TEST(Slots, ARobotsSlotNeverChanges) {
  // Pinned: a change here would move every robot of every fleet to another
  // replica's labels.
  EXPECT_EQ(slot_of("robot-1"), 303u);
  EXPECT_EQ(slot_of("robot-001"), 330u);
  EXPECT_EQ(slot_of("warehouse-7-amr-42"), 415u);
  EXPECT_EQ(slot_of("robot-1"), slot_of(std::string("robot-") + "1"));
}

TEST(Slots, RobotsSpreadEvenlyOverTheSlots) {
  std::vector<int> per_slot(kSlots);
  for (int i = 0; i < 100'000; ++i) ++per_slot[slot_of("robot-" + std::to_string(i))];
  const auto [fewest, most] = std::minmax_element(per_slot.begin(), per_slot.end());
  // 97.7 a slot on average; a fair hash keeps every slot within about 4 sigma.
  EXPECT_GT(*fewest, 55);
  EXPECT_LT(*most, 140);
}

std::map<std::string, int> shares(const std::vector<std::string>& members) {
  std::map<std::string, int> counted;
  for (std::uint32_t slot = 0; slot < kSlots; ++slot) ++counted[slot_owner(slot, members).value_or("")];
  return counted;
}

TEST(Slots, ReplicasShareTheSlotsEvenly) {
  const auto counted = shares({"bridge-a", "bridge-b", "bridge-c"});
  ASSERT_EQ(counted.size(), 3u);
  for (const auto& [member, count] : counted) {
    EXPECT_GT(count, 280) << member;  // 341 each on average
    EXPECT_LT(count, 400) << member;
  }
  EXPECT_EQ(slots_owned_by("bridge-a", {"bridge-a", "bridge-b", "bridge-c"}).size(),
            static_cast<std::size_t>(counted.at("bridge-a")));
}

TEST(Slots, EveryReplicaComputesTheSameOwnerWhateverTheOrderOfTheList) {
  for (std::uint32_t slot = 0; slot < kSlots; ++slot) {
    EXPECT_EQ(slot_owner(slot, {"a", "b", "c"}), slot_owner(slot, {"c", "a", "b", "a"}));
  }
  EXPECT_FALSE(slot_owner(7, {}));
}

TEST(Slots, AReplicaThatJoinsTakesSlotsOnlyFromOthersAndOneThatLeavesGivesOnlyItsOwn) {
  const std::vector<std::string> three{"bridge-a", "bridge-b", "bridge-c"};
  const std::vector<std::string> four{"bridge-a", "bridge-b", "bridge-c", "bridge-d"};
  const std::vector<std::string> without_b{"bridge-a", "bridge-c"};
  int taken = 0;
  for (std::uint32_t slot = 0; slot < kSlots; ++slot) {
    const std::string before = slot_owner(slot, three).value_or("");
    const std::string joined = slot_owner(slot, four).value_or("");
    const std::string left = slot_owner(slot, without_b).value_or("");
    if (joined != before) {
      EXPECT_EQ(joined, "bridge-d") << "slot " << slot << " moved between two replicas that stayed";
      ++taken;
    }
    if (before != "bridge-b") {
      EXPECT_EQ(left, before) << "slot " << slot << " moved though its owner stayed";
    }
  }
  EXPECT_GT(taken, 200);  // about a quarter of 1024
  EXPECT_LT(taken, 320);
}

}  // namespace
}  // namespace k8s4r
