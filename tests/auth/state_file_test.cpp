// The k8s4r-auth plugin's state file (broker-plugin/state_file.h), on real
// files: what a restarted broker finds, a crash mid-append, a file it cannot
// read (fail closed), and compaction.
#include "k8s4r/auth/state_file.h"

#include "k8s4r/common/slots.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace k8s4r::auth {
namespace {

namespace fs = std::filesystem;

logins::Digest digest(std::uint8_t fill) {
  logins::Digest d{};
  d.fill(fill);
  return d;
}

logins::Batch set_batch(const std::vector<std::string>& robots, std::uint8_t fill, std::uint64_t epoch = 1) {
  logins::Batch batch{"c", {}};
  for (const std::string& robot : robots)
    batch.sections.push_back(logins::Section{slot_of(robot), epoch, false, {{robot, digest(fill)}}});
  return batch;
}

std::string read(const fs::path& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

class StateFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    directory_ = fs::temp_directory_path() / ("k8s4r-auth-state-" + std::to_string(::getpid()) + "-" +
                                              ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(directory_);
    fs::create_directories(directory_);
    path_ = directory_ / "k8s4r-auth.db";
  }
  void TearDown() override { fs::remove_all(directory_); }

  // What the plugin does with a batch: apply, then append.
  static void apply(LoginTable& table, StateFile& file, const logins::Batch& batch) {
    ASSERT_TRUE(file.append(table.apply(batch).records));
  }

  fs::path directory_, path_;
};

TEST_F(StateFileTest, ARestartedBrokerFindsWhatItWasTold) {
  {
    LoginTable table;
    StateFile file(path_.string());
    ASSERT_TRUE(file.load(table));
    apply(table, file, set_batch({"robot-1", "robot-2"}, 1));
    apply(table, file,
          logins::Batch{"c", {logins::Section{slot_of("robot-1"), 2, false, {{"robot-1", std::nullopt}}}}});
  }
  LoginTable table;
  StateFile file(path_.string());
  auto loaded = file.load(table);
  ASSERT_TRUE(loaded) << loaded.error().to_string();
  EXPECT_EQ(table.size(), 1u);
  EXPECT_EQ(table.find("robot-1"), nullptr);  // revoked stays revoked
  EXPECT_EQ(*table.find("robot-2"), digest(1));
  EXPECT_EQ(table.epoch(slot_of("robot-1")), 2u);
  EXPECT_FALSE(loaded.value().torn_tail);
  EXPECT_TRUE(loaded.value().set_aside.empty());
}

TEST_F(StateFileTest, ALineCutShortByACrashIsDroppedAndTheRestKept) {
  {
    LoginTable table;
    StateFile file(path_.string());
    ASSERT_TRUE(file.load(table));
    apply(table, file, set_batch({"robot-1"}, 1));
  }
  std::ofstream(path_, std::ios::app) << "set robot-2 sha256:abc";  // the crash
  LoginTable table;
  StateFile file(path_.string());
  auto loaded = file.load(table);
  ASSERT_TRUE(loaded);
  EXPECT_TRUE(loaded.value().torn_tail);
  EXPECT_EQ(table.size(), 1u);
  apply(table, file, set_batch({"robot-3"}, 3));  // appends after the last whole line
  LoginTable again;
  StateFile reread(path_.string());
  ASSERT_TRUE(reread.load(again));
  EXPECT_EQ(again.size(), 2u);
  EXPECT_NE(again.find("robot-3"), nullptr);
}

TEST_F(StateFileTest, AFileItCannotReadLetsNobodyInAndIsKeptAside) {
  {
    LoginTable table;
    StateFile file(path_.string());
    ASSERT_TRUE(file.load(table));
    apply(table, file, set_batch({"robot-1", "robot-2"}, 1));
  }
  std::string text = read(path_);
  text.insert(text.find("set robot-2"), "sot robot-9\n");  // a bad line in the middle
  std::ofstream(path_, std::ios::trunc) << text;
  LoginTable table;
  StateFile file(path_.string());
  auto loaded = file.load(table);
  ASSERT_TRUE(loaded);
  EXPECT_EQ(table.size(), 0u);  // fail closed: not even robot-1, which came before the bad line
  EXPECT_EQ(loaded.value().set_aside, path_.string() + ".corrupt");
  EXPECT_NE(loaded.value().why_set_aside.find("line 5"), std::string::npos) << loaded.value().why_set_aside;
  EXPECT_EQ(read(path_.string() + ".corrupt"), text);
  EXPECT_EQ(read(path_), std::string(logins::kStateHeader) + "\n");

  std::ofstream(path_, std::ios::trunc) << "k8s4r-auth-state 2\nset robot-1 x\n";  // another version
  LoginTable other;
  StateFile newer(path_.string());
  auto refused = newer.load(other);
  ASSERT_TRUE(refused);
  EXPECT_EQ(other.size(), 0u);
  EXPECT_NE(refused.value().why_set_aside.find("first line"), std::string::npos);
}

TEST_F(StateFileTest, CompactionKeepsOnlyWhatTheTableNeeds) {
  LoginTable table;
  StateFile file(path_.string());
  ASSERT_TRUE(file.load(table));
  for (std::uint8_t round = 1; round <= 30; ++round) apply(table, file, set_batch({"robot-1", "robot-2"}, round));
  EXPECT_GE(file.records(), 60u);
  ASSERT_TRUE(file.compact(table));
  // Two logins and their slots' epochs.
  EXPECT_EQ(file.records(), 2u + (slot_of("robot-1") == slot_of("robot-2") ? 1u : 2u));
  EXPECT_FALSE(fs::exists(path_.string() + ".tmp"));
  apply(table, file, set_batch({"robot-3"}, 7));  // appends to the new file
  LoginTable reread;
  StateFile again(path_.string());
  ASSERT_TRUE(again.load(reread));
  EXPECT_EQ(reread.size(), 3u);
  EXPECT_EQ(*reread.find("robot-1"), digest(30));
  EXPECT_EQ(*reread.find("robot-3"), digest(7));
}

}  // namespace
}  // namespace k8s4r::auth
