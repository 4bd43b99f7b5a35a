// The k8s4r-auth plugin's login table (broker-plugin/login_table.h): who is
// kicked when, what a replace removes, and the epochs that fence a deposed
// writer.
#include "k8s4r/auth/login_table.h"

#include "k8s4r/common/slots.h"

#include <gtest/gtest.h>

namespace k8s4r::auth {
namespace {

using logins::Batch;
using logins::Change;
using logins::Digest;
using logins::Section;

Digest digest(std::uint8_t fill) {
  Digest d{};
  d.fill(fill);
  return d;
}

// Robot ids in one slot, found by trying.
std::vector<std::string> robots_in_slot(std::uint32_t slot, std::size_t count) {
  std::vector<std::string> found;
  for (int i = 0; found.size() < count; ++i)
    if (slot_of("robot-" + std::to_string(i)) == slot) found.push_back("robot-" + std::to_string(i));
  return found;
}

Section section_of(const std::string& robot, std::uint64_t epoch, std::vector<Change> changes, bool replace = false) {
  return Section{slot_of(robot), epoch, replace, std::move(changes)};
}

TEST(LoginTable, ASetLetsInAChangeKicksADelKicksAndRepeatsChangeNothing) {
  LoginTable table;
  Applied made = table.apply(Batch{"c", {section_of("robot-1", 1, {{"robot-1", digest(1)}})}});
  EXPECT_EQ(made.changed, 1u);
  EXPECT_TRUE(made.kick.empty());  // nobody was logged in with it
  ASSERT_NE(table.find("robot-1"), nullptr);
  EXPECT_EQ(*table.find("robot-1"), digest(1));

  Applied same = table.apply(Batch{"c", {section_of("robot-1", 1, {{"robot-1", digest(1)}})}});
  EXPECT_EQ(same.changed, 0u);
  EXPECT_TRUE(same.kick.empty());
  EXPECT_TRUE(same.records.empty());  // nothing for the file either

  Applied rotated = table.apply(Batch{"c", {section_of("robot-1", 1, {{"robot-1", digest(2)}})}});
  EXPECT_EQ(rotated.kick, std::vector<std::string>{"robot-1"});  // the old token's session ends
  EXPECT_EQ(*table.find("robot-1"), digest(2));

  Applied removed = table.apply(Batch{"c", {section_of("robot-1", 1, {{"robot-1", std::nullopt}})}});
  EXPECT_EQ(removed.kick, std::vector<std::string>{"robot-1"});
  EXPECT_EQ(table.find("robot-1"), nullptr);
  EXPECT_EQ(table.size(), 0u);
  Applied again = table.apply(Batch{"c", {section_of("robot-1", 1, {{"robot-1", std::nullopt}})}});
  EXPECT_EQ(again.changed, 0u);
}

TEST(LoginTable, AReplaceKeepsWhatItNamesAndRemovesTheRestOfItsSlotOnly) {
  const auto robots = robots_in_slot(7, 3);
  const std::string elsewhere = robots_in_slot(8, 1)[0];
  LoginTable table;
  table.apply(Batch{"c",
                    {Section{7, 1, false, {{robots[0], digest(1)}, {robots[1], digest(1)}, {robots[2], digest(1)}}},
                     Section{8, 1, false, {{elsewhere, digest(1)}}}}});
  ASSERT_EQ(table.size(), 4u);
  Applied applied = table.apply(Batch{"c", {Section{7, 2, true, {{robots[0], digest(1)}, {robots[1], digest(9)}}}}});
  EXPECT_EQ(table.size(), 3u);
  EXPECT_EQ(table.find(robots[2]), nullptr);
  EXPECT_NE(table.find(elsewhere), nullptr);
  EXPECT_EQ(*table.find(robots[1]), digest(9));
  EXPECT_EQ(applied.changed, 2u);
  EXPECT_EQ(applied.kick, (std::vector<std::string>{robots[1], robots[2]}));
  // An unchanged replace (a bridge that restarted) changes nothing but the epoch.
  Applied unchanged = table.apply(Batch{"c", {Section{7, 3, true, {{robots[0], digest(1)}, {robots[1], digest(9)}}}}});
  EXPECT_EQ(unchanged.changed, 0u);
  EXPECT_TRUE(unchanged.kick.empty());
  ASSERT_EQ(unchanged.records.size(), 1u);
  EXPECT_EQ(unchanged.records[0].kind, logins::StateRecord::Kind::epoch);
}

TEST(LoginTable, ASectionOlderThanItsSlotsEpochIsRefusedAndTheOthersApplied) {
  const std::string a = robots_in_slot(1, 1)[0], b = robots_in_slot(2, 1)[0];
  LoginTable table;
  table.apply(Batch{"c", {Section{1, 50, false, {{a, digest(1)}}}}});
  // A deposed writer (epoch 40) revokes a in slot 1 and adds b in slot 2.
  Applied applied =
      table.apply(Batch{"c", {Section{1, 40, false, {{a, std::nullopt}}}, Section{2, 40, false, {{b, digest(1)}}}}});
  ASSERT_EQ(applied.stale.size(), 1u);
  EXPECT_EQ(applied.stale[0], (logins::Stale{1, 50}));
  EXPECT_NE(table.find(a), nullptr);  // untouched
  EXPECT_NE(table.find(b), nullptr);
  EXPECT_EQ(table.epoch(1), 50u);
  EXPECT_EQ(table.epoch(2), 40u);
}

TEST(LoginTable, ItsRecordsRebuildIt) {
  const auto robots = robots_in_slot(3, 2);
  LoginTable table;
  std::vector<logins::StateRecord> records;
  for (const Batch& batch : {Batch{"c", {Section{3, 4, false, {{robots[0], digest(1)}, {robots[1], digest(2)}}}}},
                             Batch{"c", {Section{3, 5, false, {{robots[0], std::nullopt}}}}}}) {
    Applied applied = table.apply(batch);
    records.insert(records.end(), applied.records.begin(), applied.records.end());
  }
  LoginTable replayed, from_snapshot;
  for (const auto& record : records) replayed.restore(record);
  for (const auto& record : table.snapshot()) from_snapshot.restore(record);
  for (const LoginTable* rebuilt : {&replayed, &from_snapshot}) {
    EXPECT_EQ(rebuilt->size(), 1u);
    EXPECT_EQ(rebuilt->find(robots[0]), nullptr);
    EXPECT_EQ(*rebuilt->find(robots[1]), digest(2));
    EXPECT_EQ(rebuilt->epoch(3), 5u);
  }
}

}  // namespace
}  // namespace k8s4r::auth
