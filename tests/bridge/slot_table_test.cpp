// The slot table's decisions: who serves which slot, under which epoch, and
// how a slot changes hands (bridge/include/k8s4r/bridge/slot_table.h).
#include "k8s4r/bridge/slot_table.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

namespace k8s4r::bridge {
namespace {

using nlohmann::json;

std::size_t count_served(const ServedSlots& slots) {
  return static_cast<std::size_t>(std::count_if(slots.begin(), slots.end(), [](std::int64_t e) { return e != 0; }));
}

std::string owner_of(std::uint32_t slot) { return slot_owner(slot, {"bridge-0", "bridge-1"}).value(); }

// No slot served by two replicas, whatever the table says.
void expect_one_server_at_most(const SlotTable& table, const std::vector<std::string>& replicas) {
  for (std::uint32_t slot = 0; slot < kSlots; ++slot) {
    int servers = 0;
    for (const auto& replica : replicas) servers += served_by(table, replica)[slot] != 0;
    EXPECT_LE(servers, 1) << "slot " << slot;
  }
}

TEST(SlotTable, AFirstReplicaTakesEverySlotUnderOneEpochFromTheWallClock) {
  const SlotTable table = rebalance(SlotTable{}, {"bridge-0"}, 1'800'000'000'000);
  EXPECT_EQ(table.epoch, 1'800'000'000'000);
  EXPECT_EQ(table.members, std::vector<std::string>{"bridge-0"});
  const ServedSlots served = served_by(table, "bridge-0");
  EXPECT_EQ(count_served(served), kSlots);
  EXPECT_EQ(served[303], 1'800'000'000'000);
  EXPECT_EQ(count_served(served_by(table, "bridge-1")), 0u);
}

TEST(SlotTable, AJoiningReplicaGetsItsShareOnlyAfterTheOwnerHandsItOver) {
  SlotTable table = rebalance(SlotTable{}, {"bridge-0"}, 1000);
  table = rebalance(table, {"bridge-0", "bridge-1"}, 2000);
  // Marked, not moved: bridge-0 stops serving the marked slots, bridge-1
  // serves none yet.
  std::size_t marked = 0;
  for (const SlotEntry& entry : table.slots) {
    EXPECT_EQ(entry.owner, "bridge-0");
    EXPECT_EQ(entry.epoch, 1000);
    marked += entry.next == "bridge-1";
  }
  EXPECT_GT(marked, 400u);
  EXPECT_LT(marked, 624u);
  EXPECT_EQ(count_served(served_by(table, "bridge-0")), kSlots - marked);
  EXPECT_EQ(count_served(served_by(table, "bridge-1")), 0u);
  expect_one_server_at_most(table, {"bridge-0", "bridge-1"});

  // Rebalancing again changes nothing; the hand-over moves the marked slots
  // under one new epoch, above every earlier one even if the clock went back.
  EXPECT_EQ(rebalance(table, {"bridge-1", "bridge-0"}, 2500), table);
  const SlotTable handed = hand_over(table, "bridge-0", 500);
  EXPECT_EQ(handed.epoch, 1001);
  EXPECT_EQ(count_served(served_by(handed, "bridge-1")), marked);
  for (std::uint32_t slot = 0; slot < kSlots; ++slot) {
    if (table.slots[slot].next.empty()) {
      EXPECT_EQ(handed.slots[slot], table.slots[slot]);
    } else {
      EXPECT_EQ(handed.slots[slot], (SlotEntry{"bridge-1", 1001, ""}));
    }
  }
  EXPECT_EQ(rebalance(handed, {"bridge-0", "bridge-1"}, 3000), handed);
  // Only bridge-0 hands its slots over: another replica's call changes nothing.
  EXPECT_EQ(hand_over(table, "bridge-1", 3000), table);
}

TEST(SlotTable, AReplicaThatIsGoneHasItsSlotsTakenOverAtOnceUnderANewEpoch) {
  SlotTable table = rebalance(SlotTable{}, {"bridge-0", "bridge-1", "bridge-2"}, 1000);
  const ServedSlots of_2 = served_by(table, "bridge-2");
  const std::size_t held = count_served(of_2);
  EXPECT_GT(held, 250u);
  table = rebalance(table, {"bridge-0", "bridge-1"}, 5000);
  EXPECT_EQ(table.epoch, 5000);
  EXPECT_EQ(count_served(served_by(table, "bridge-2")), 0u);
  EXPECT_EQ(count_served(served_by(table, "bridge-0")) + count_served(served_by(table, "bridge-1")), kSlots);
  for (std::uint32_t slot = 0; slot < kSlots; ++slot) {
    // Only what bridge-2 held moved, and under the new epoch.
    EXPECT_EQ(table.slots[slot].epoch, of_2[slot] ? 5000 : 1000) << slot;
    EXPECT_TRUE(table.slots[slot].next.empty());
  }
}

TEST(SlotTable, SlotsWithNoOwnerWaitUntilWhoeverServedThemMustHaveStopped) {
  // A damaged table written anew: slots whose lines were lost are nobody's,
  // and are given out only when the coordinator says the old servers stopped.
  SlotTable table = rebalance(SlotTable{}, {"bridge-0", "bridge-1"}, 1000);
  table.slots[5] = SlotEntry{};
  const SlotTable waiting = rebalance(table, {"bridge-0", "bridge-1"}, 2000, false);
  EXPECT_TRUE(waiting.slots[5].owner.empty());
  EXPECT_EQ(waiting, table);
  const SlotTable taken = rebalance(table, {"bridge-0", "bridge-1"}, 2000, true);
  EXPECT_EQ(taken.slots[5], (SlotEntry{owner_of(5), 2000, ""}));
}

TEST(SlotTable, AHandOverUnderWayIsCalledOffWhenTheReplicaItWasForLeaves) {
  SlotTable table = rebalance(SlotTable{}, {"bridge-0"}, 1000);
  table = rebalance(table, {"bridge-0", "bridge-1"}, 2000);
  table = rebalance(table, {"bridge-0"}, 3000);
  EXPECT_EQ(count_served(served_by(table, "bridge-0")), kSlots);
  EXPECT_EQ(table.epoch, 1000);  // nothing changed hands
}

TEST(SlotTable, AReplicaStartingAgainFencesOffItsEarlierSelfAndALeavingOneGivesItsSlotsAway) {
  SlotTable table = rebalance(SlotTable{}, {"bridge-0", "bridge-1"}, 1000);
  const SlotTable reclaimed = reclaim(table, "bridge-0", 2000);
  for (std::uint32_t slot = 0; slot < kSlots; ++slot) {
    EXPECT_EQ(reclaimed.slots[slot].epoch, table.slots[slot].owner == "bridge-0" ? 2000 : 1000);
  }
  const SlotTable left = give_away(reclaimed, "bridge-0", {"bridge-0", "bridge-1"}, 3000);
  EXPECT_EQ(count_served(served_by(left, "bridge-1")), kSlots);
  EXPECT_EQ(left.members, std::vector<std::string>{"bridge-1"});
  // Slots being handed to a replica that leaves stay with their owners.
  SlotTable joining = rebalance(SlotTable{}, {"bridge-1"}, 1000);
  joining = rebalance(joining, {"bridge-0", "bridge-1"}, 2000);
  const SlotTable called_off = give_away(joining, "bridge-0", {"bridge-0", "bridge-1"}, 3000);
  EXPECT_EQ(count_served(served_by(called_off, "bridge-1")), kSlots);
  EXPECT_EQ(called_off.epoch, 1000);
  // Alone, it keeps them: there is nobody to give them to.
  EXPECT_EQ(give_away(reclaimed, "bridge-0", {"bridge-0"}, 3000), reclaimed);
}

TEST(SlotTable, WhatIsWrittenReadsBackTheSameAndAnOperatorCanGrepIt) {
  SlotTable table = rebalance(SlotTable{}, {"bridge-0"}, 1000);
  table = rebalance(table, {"bridge-0", "bridge-1"}, 2000);
  const json data = slot_table_data(table);
  EXPECT_EQ(data["epoch"], "1000");
  EXPECT_EQ(data["members"], "bridge-0,bridge-1");
  const std::string slots = data["slots"];
  EXPECT_NE(slots.find("\n303 bridge-0 1000"), std::string::npos);
  EXPECT_NE(slots.find(" -> bridge-1\n"), std::string::npos);
  auto parsed = parse_slot_table(data);
  ASSERT_TRUE(parsed) << parsed.error().to_string();
  EXPECT_EQ(parsed.value(), table);
}

TEST(SlotTable, ADamagedTableIsAnErrorNamingTheLineNeverAPartialTable) {
  const auto error_of = [](const json& data) {
    auto parsed = parse_slot_table(data);
    return parsed ? std::string("parsed") : parsed.error().to_string();
  };
  const auto with = [](const std::string& slots) {
    return json{{"epoch", "1000"}, {"members", "bridge-0"}, {"slots", slots}};
  };
  EXPECT_NE(error_of(json::array()).find("not an object"), std::string::npos);
  EXPECT_NE(error_of(json{{"slots", ""}}).find("data.epoch"), std::string::npos);
  EXPECT_NE(error_of(json{{"epoch", "-1"}, {"slots", ""}}).find("data.epoch"), std::string::npos);
  EXPECT_NE(error_of(json{{"epoch", "9007199254740993"}, {"slots", ""}}).find("data.epoch"), std::string::npos);
  EXPECT_NE(error_of(json{{"epoch", 1000}, {"slots", ""}}).find("not a string"), std::string::npos);
  EXPECT_NE(error_of(with("0 bridge-0 1000\n0 bridge-1 1000\n")).find("line 2: slot 0 appears twice"),
            std::string::npos);
  EXPECT_NE(error_of(with("1024 bridge-0 1000\n")).find("slot is not"), std::string::npos);
  EXPECT_NE(error_of(with("1x bridge-0 1000\n")).find("slot is not"), std::string::npos);
  EXPECT_NE(error_of(with("1 bridge/0 1000\n")).find("owner"), std::string::npos);
  EXPECT_NE(error_of(with("1 bridge-+ 1000\n")).find("owner"), std::string::npos);
  EXPECT_NE(error_of(with("1 bridge-0 1001\n")).find("epoch"), std::string::npos);  // above data.epoch
  EXPECT_NE(error_of(with("1 bridge-0 0\n")).find("epoch"), std::string::npos);
  EXPECT_NE(error_of(with("1 bridge-0 1000 => bridge-1\n")).find("line 1"), std::string::npos);
  EXPECT_NE(error_of(with("1 bridge-0 1000 -> #\n")).find("next owner"), std::string::npos);
  EXPECT_NE(error_of(with(std::string(300 * 1024, ' '))).find("256 KiB"), std::string::npos);
  // Blank lines and runs of spaces are allowed; slots not listed have no owner.
  auto sparse = parse_slot_table(with("\n  7   bridge-0   900  \n\n"));
  ASSERT_TRUE(sparse);
  EXPECT_EQ(sparse.value().slots[7], (SlotEntry{"bridge-0", 900, ""}));
  EXPECT_EQ(count_served(served_by(sparse.value(), "bridge-0")), 1u);
}

TEST(SlotTable, AReplicasCachesSelectItsSlotsInTheShortestForm) {
  ServedSlots served(kSlots, 0);
  EXPECT_EQ(slot_selector(served), "robot.k8s4r.io/slot=none");
  served[303] = served[5] = 7;
  EXPECT_EQ(slot_selector(served), "robot.k8s4r.io/slot in (5,303)");
  served.assign(kSlots, 7);
  EXPECT_EQ(slot_selector(served), "robot.k8s4r.io/slot");
  served[1] = served[1000] = 0;
  EXPECT_EQ(slot_selector(served), "robot.k8s4r.io/slot,robot.k8s4r.io/slot notin (1,1000)");
  // A third of the fleet, or two thirds: well within a URL.
  const SlotTable table = rebalance(SlotTable{}, {"bridge-0", "bridge-1", "bridge-2"}, 1000);
  for (const char* replica : {"bridge-0", "bridge-1"}) {
    EXPECT_LT(slot_selector(served_by(table, replica)).size(), 2600u);
  }
  ServedSlots two_thirds = served_by(table, "bridge-0");
  const ServedSlots other = served_by(table, "bridge-1");
  for (std::uint32_t slot = 0; slot < kSlots; ++slot) two_thirds[slot] |= other[slot];
  EXPECT_LT(slot_selector(two_thirds).size(), 2600u);
  EXPECT_NE(slot_selector(two_thirds).find(" notin ("), std::string::npos);
}

TEST(SlotTable, ReplicaIdsNameALeaseAndCannotBreakATopicOrALine) {
  EXPECT_TRUE(validate_replica_id("bridge-0"));
  EXPECT_TRUE(validate_replica_id(std::string(kMaxReplicaIdLength, 'a')));
  EXPECT_FALSE(validate_replica_id(std::string(kMaxReplicaIdLength + 1, 'a')));
  for (const char* bad : {"", "Bridge", "a b", "a/b", "a+b", "a#b", "-a", "a\n"})
    EXPECT_FALSE(validate_replica_id(bad));
}

}  // namespace
}  // namespace k8s4r::bridge
