#include "k8s4r/agent/journal.h"

#include "k8s4r/testing/temp_dir.h"

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>
#include <filesystem>
#include <fstream>

namespace k8s4r::agent {
namespace {

namespace fs = std::filesystem;

class JournalTest : public ::testing::Test {
 protected:
  testing::TempDir dir_;
  std::string path_ = (dir_ / "journal.json").string();
};

TEST_F(JournalTest, SeqGrowsAcrossReopening) {
  {
    auto journal = Journal::open(path_);
    ASSERT_TRUE(journal);
    EXPECT_TRUE(journal.value().entries().empty());
    EXPECT_EQ(journal.value().next_seq("t1").value(), 1);
    EXPECT_EQ(journal.value().next_seq("t1").value(), 2);
    JournalEntry entry = *journal.value().find("t1");
    entry.pid = 4242;
    entry.process_start = 99;
    entry.dispatch = {{"action", "create"}};
    ASSERT_TRUE(journal.value().put(entry));
  }
  auto reopened = Journal::open(path_);  // as after kill -9 and a restart
  ASSERT_TRUE(reopened);
  const JournalEntry* entry = reopened.value().find("t1");
  ASSERT_NE(entry, nullptr);
  EXPECT_EQ(entry->pid, 4242);
  EXPECT_EQ(entry->process_start, 99u);
  EXPECT_EQ(entry->dispatch["action"], "create");
  EXPECT_EQ(reopened.value().next_seq("t1").value(), 3);
  ASSERT_TRUE(reopened.value().remove("t1"));
  EXPECT_EQ(Journal::open(path_).value().entries().size(), 0u);
  EXPECT_FALSE(fs::exists(path_ + ".tmp"));
}

TEST_F(JournalTest, ACorruptFileIsAnErrorNotACrash) {
  std::ofstream(path_) << "{\"tasks\": [ {";
  auto journal = Journal::open(path_);
  ASSERT_FALSE(journal);
  EXPECT_NE(journal.error().message.find("is not a k8s4r journal"), std::string::npos);
}

TEST_F(JournalTest, RecognisesTheSameProcessAndNotAReusedPid) {
  const auto start = process_start_time(::getpid());
  ASSERT_TRUE(start);
  EXPECT_TRUE(same_process_running(::getpid(), *start));
  EXPECT_FALSE(same_process_running(::getpid(), *start + 1));  // a pid reused by another process
  const pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);
  EXPECT_FALSE(process_start_time(child));  // gone
  EXPECT_FALSE(same_process_running(child, 0));
}

}  // namespace
}  // namespace k8s4r::agent
