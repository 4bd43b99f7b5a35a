#include "k8s4r/agent/state_store.h"

#include "k8s4r/testing/temp_dir.h"

#include <gtest/gtest.h>
#include <boost/crc.hpp>

#include <sys/resource.h>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace k8s4r::agent {
namespace {

namespace fs = std::filesystem;

class StateStoreTest : public ::testing::Test {
 protected:
  StateStore open() {
    auto store = StateStore::open(dir_.path().string(), 100);
    if (!store) ADD_FAILURE() << store.error().message;
    return std::move(store).value();
  }
  std::string log_path() const { return (dir_ / "state.log").string(); }
  std::string log_text() const {
    std::ifstream in(log_path());
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }
  static std::vector<std::string> payloads(const std::vector<QueuedReport>& reports) {
    std::vector<std::string> all;
    for (const auto& report : reports) all.push_back(report.payload);
    return all;
  }

  testing::TempDir dir_;
};

TEST_F(StateStoreTest, WhatWasCommittedIsThereAfterAReopenAndWhatWasOnlyStagedIsNot) {
  {
    StateStore store = open();
    EXPECT_TRUE(store.tasks().empty());
    store.accept("t1", {{"action", "create"}});
    store.set_process("t1", TaskProcess{4242, 99, 4243, 100, "/sys/fs/cgroup/k8s4r-tasks.0/t1", "/w/exits/t1.0.json"});
    ASSERT_TRUE(store.report("t1", 1, TaskRunState::running, "k8s4r/robots/r/tasks/t1/status", R"({"seq":1})"));
    ASSERT_TRUE(store.report("t1", 2, TaskRunState::running, "k8s4r/robots/r/tasks/t1/status", R"({"seq":2})"));
    ASSERT_TRUE(store.commit());
    store.accept("t2", {{"action", "create"}});  // staged, never committed: as if the agent was killed here
    EXPECT_TRUE(store.find("t2"));
  }
  StateStore reopened = open();
  const StoredTask* task = reopened.find("t1");
  ASSERT_NE(task, nullptr);
  EXPECT_EQ(task->process.pid, 4242);
  EXPECT_EQ(task->process.start, 99u);
  EXPECT_EQ(task->process.pgid, 4243);
  EXPECT_EQ(task->process.task_start, 100u);
  EXPECT_EQ(task->process.cgroup, "/sys/fs/cgroup/k8s4r-tasks.0/t1");
  EXPECT_EQ(task->process.exit_file, "/w/exits/t1.0.json");
  EXPECT_EQ(task->dispatch["action"], "create");
  EXPECT_EQ(task->last_seq, 2);
  EXPECT_EQ(task->last_report, R"({"seq":2})");
  EXPECT_EQ(reopened.find("t2"), nullptr);
  EXPECT_EQ(payloads(reopened.oldest(10)), (std::vector<std::string>{R"({"seq":1})", R"({"seq":2})"}));
}

TEST_F(StateStoreTest, OnlyCommittedReportsAreHandedOutUnlessAskedForAll) {
  StateStore store = open();
  ASSERT_TRUE(store.report("t1", 1, TaskRunState::running, "topic", "one"));
  ASSERT_TRUE(store.commit());
  ASSERT_TRUE(store.report("t1", 2, TaskRunState::running, "topic", "two"));
  EXPECT_EQ(payloads(store.oldest(10)), std::vector<std::string>{"one"});
  EXPECT_EQ(payloads(store.oldest(10, true)), (std::vector<std::string>{"one", "two"}));
  EXPECT_EQ(payloads(store.oldest(1, true)), std::vector<std::string>{"one"});
  ASSERT_TRUE(store.commit());
  EXPECT_EQ(payloads(store.oldest(10)), (std::vector<std::string>{"one", "two"}));
}

TEST_F(StateStoreTest, AcknowledgedReportsAndForgottenTasksStayGone) {
  {
    StateStore store = open();
    const auto first = store.report("t1", 1, TaskRunState::running, "topic", "one");
    ASSERT_TRUE(store.report("t2", 1, TaskRunState::running, "topic", "other"));
    store.finish("t1", 7, std::chrono::seconds(1));
    ASSERT_TRUE(store.commit());
    store.acknowledge(first.value());
    store.forget("t2");
    ASSERT_TRUE(store.commit());
  }
  StateStore reopened = open();
  EXPECT_EQ(payloads(reopened.oldest(10)), std::vector<std::string>{"other"});  // a report outlives its task
  EXPECT_EQ(reopened.find("t2"), nullptr);
  ASSERT_NE(reopened.find("t1"), nullptr);
  EXPECT_EQ(reopened.find("t1")->finished_order, 7u);
  EXPECT_TRUE(reopened.find("t1")->dispatch.is_null());
}

TEST_F(StateStoreTest, AThousandChangesAreOneSync) {
  StateStore store = open();
  const auto before = store.syncs();
  for (int i = 0; i < 1000; ++i) {
    const std::string uid = "t" + std::to_string(i);
    store.accept(uid, {{"action", "create"}});
    ASSERT_TRUE(store.report(uid, 1, TaskRunState::running, "topic", "running"));
    if (store.queued_reports() == store.capacity()) break;
  }
  ASSERT_TRUE(store.commit());
  EXPECT_EQ(store.syncs(), before + 1);
  EXPECT_FALSE(store.has_staged());
  ASSERT_TRUE(store.commit());  // nothing staged: no sync
  EXPECT_EQ(store.syncs(), before + 1);
}

TEST_F(StateStoreTest, AFullQueueRefusesTheReportButKeepsItsSeq) {
  auto store = StateStore::open(dir_.path().string(), 2);
  ASSERT_TRUE(store);
  ASSERT_TRUE(store.value().report("t1", 1, TaskRunState::running, "topic", "one"));
  ASSERT_TRUE(store.value().report("t1", 2, TaskRunState::running, "topic", "two"));
  const auto refused = store.value().report("t1", 3, TaskRunState::running, "topic", "three");
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("full"), std::string::npos);
  ASSERT_TRUE(store.value().commit());
  auto reopened = StateStore::open(dir_.path().string(), 2);
  ASSERT_TRUE(reopened);
  EXPECT_EQ(reopened.value().find("t1")->last_seq, 3);  // seq never goes back, even for a refused report
  EXPECT_EQ(reopened.value().queued_reports(), 2u);
}

TEST_F(StateStoreTest, ATornLastRecordIsCutOffAndAppendingGoesOn) {
  {
    StateStore store = open();
    store.accept("t1", {{"action", "create"}});
    ASSERT_TRUE(store.commit());
  }
  const auto good = fs::file_size(log_path());
  std::ofstream(log_path(), std::ios::app) << "0badc0de\t{\"op\":\"accept\",\"uid\":\"t2\"";  // no newline: cut short
  {
    StateStore store = open();
    EXPECT_NE(store.find("t1"), nullptr);
    EXPECT_EQ(store.find("t2"), nullptr);
    EXPECT_EQ(fs::file_size(log_path()), good);
    store.accept("t3", {{"action", "create"}});
    ASSERT_TRUE(store.commit());
  }
  StateStore reopened = open();
  EXPECT_NE(reopened.find("t1"), nullptr);
  EXPECT_NE(reopened.find("t3"), nullptr);
  EXPECT_FALSE(fs::exists(log_path() + ".damaged"));  // a torn tail is not damage
}

TEST_F(StateStoreTest, DamageBeforeTheEndKeepsWhatCameBeforeAndTheWholeFileForALook) {
  {
    StateStore store = open();
    for (const char* uid : {"t1", "t2", "t3"}) {
      store.accept(uid, {{"action", "create"}});
      ASSERT_TRUE(store.commit());
    }
  }
  std::string text = log_text();
  const auto second = text.find('\n') + 1;
  text[text.find("t2", second)] = 'x';  // a flipped byte in the second record: its checksum no longer matches
  std::ofstream(log_path(), std::ios::trunc) << text;
  StateStore store = open();
  EXPECT_NE(store.find("t1"), nullptr);
  EXPECT_EQ(store.find("t2"), nullptr);
  EXPECT_EQ(store.find("t3"), nullptr);
  EXPECT_TRUE(fs::exists(log_path() + ".damaged"));
}

TEST_F(StateStoreTest, RecordsThatAreNotOursAreDamageNotACrash) {
  for (const char* line : {"not a record\n", "00000000\t{}\n", "12345678\t[1,2]\n"}) {
    std::ofstream(log_path(), std::ios::trunc) << line;
    auto store = StateStore::open(dir_.path().string(), 10);
    ASSERT_TRUE(store) << line;
    EXPECT_TRUE(store.value().tasks().empty());
    EXPECT_EQ(fs::file_size(log_path()), 0u) << line;
  }
}

TEST_F(StateStoreTest, ARecordNestedDeeperThanAnyOfOursIsRefusedNotACrash) {
  // With a correct checksum, so only its depth is wrong: serialising it later
  // (a snapshot) would recurse once per level.
  const std::string body =
      R"({"op":"accept","uid":"t1","dispatch":)" + std::string(100000, '[') + std::string(100000, ']') + "}";
  boost::crc_32_type crc;
  crc.process_bytes(body.data(), body.size());
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08x", static_cast<unsigned>(crc.checksum()));
  std::ofstream(log_path(), std::ios::trunc) << hex << '\t' << body << '\n';
  StateStore store = open();
  EXPECT_EQ(store.find("t1"), nullptr);
  EXPECT_EQ(fs::file_size(log_path()), 0u);
}

TEST_F(StateStoreTest, ValuesThatWouldOverflowAreDamageNotAWrap) {
  auto line_of = [](const std::string& body) {
    boost::crc_32_type crc;
    crc.process_bytes(body.data(), body.size());
    char hex[9];
    std::snprintf(hex, sizeof hex, "%08x", static_cast<unsigned>(crc.checksum()));
    return std::string(hex) + '\t' + body + '\n';
  };
  const std::string good = line_of(R"({"op":"report","uid":"t1","seq":5,"payload":"x"})");
  for (const char* bad : {R"({"op":"report","uid":"t1","seq":9223372036854775807,"payload":"y"})",
                          R"({"op":"clock","clock":9223372036854775000})", R"({"op":"clock","clock":-1})",
                          R"({"op":"queued","id":18446744073709551615,"topic":"t","payload":"y"})",
                          R"({"op":"finish","uid":"t1","finishedOrder":1,"clock":9000000000000000000})",
                          R"({"op":"process","uid":"t1","pid":4294967297,"processStart":1})",
                          R"({"op":"process","uid":"t1","pid":5,"taskPid":-5})",
                          R"({"op":"process","uid":"t1","pid":5,"exitFile":"relative/path"})"}) {
    std::ofstream(log_path(), std::ios::trunc) << good << line_of(bad);
    StateStore store = open();
    EXPECT_EQ(store.last_seq(), 5) << bad;  // the bad record is dropped, the good one kept
    EXPECT_EQ(store.clock(), std::chrono::nanoseconds(0)) << bad;
    EXPECT_EQ(store.queued_reports(), 0u) << bad;
    EXPECT_EQ(fs::file_size(log_path()), good.size()) << bad;
  }
}

TEST_F(StateStoreTest, TheFileIsCompactedToItsLiveContent) {
  StateStore store = open();
  store.accept("long-running", {{"action", "create"}, {"task", {{"spec", {{"command", "sleep"}}}}}});
  store.set_process("long-running", TaskProcess{10, 11, 12, 13, "/cg/long-running", "/w/exits/long-running.0.json"});
  const std::string payload(1000, 'x');
  std::uint64_t largest = 0;
  for (int i = 0; i < 5000; ++i) {
    const auto id = store.report("t" + std::to_string(i), 1, TaskRunState::running, "topic", payload);
    ASSERT_TRUE(id);
    ASSERT_TRUE(store.commit());
    store.acknowledge(id.value());
    store.forget("t" + std::to_string(i));
    ASSERT_TRUE(store.commit());
    largest = std::max(largest, store.file_bytes());
  }
  // About 5 MB went through; the file never held much more than the 1 MiB
  // threshold, and what it holds now is the one live task.
  EXPECT_LT(largest, 2u << 20);
  EXPECT_EQ(fs::file_size(log_path()), store.file_bytes());
  StateStore reopened = open();
  EXPECT_EQ(reopened.tasks().size(), 1u);
  EXPECT_EQ(reopened.find("long-running")->dispatch["task"]["spec"]["command"], "sleep");
  const TaskProcess& process = reopened.find("long-running")->process;  // through a snapshot
  EXPECT_EQ(
      std::tie(process.pid, process.start, process.pgid, process.task_start, process.cgroup, process.exit_file),
      std::make_tuple(10, 11u, 12, 13u, std::string("/cg/long-running"), std::string("/w/exits/long-running.0.json")));
  EXPECT_EQ(reopened.queued_reports(), 0u);
}

TEST_F(StateStoreTest, AFailedCommitLosesNothingAndLeavesNoFragment) {
  StateStore store = open();
  store.accept("t1", {{"action", "create"}});
  ASSERT_TRUE(store.commit());
  const auto durable = fs::file_size(log_path());

  // The file may not grow past its size: as a full disk, the write fails.
  std::signal(SIGXFSZ, SIG_IGN);
  rlimit original{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &original), 0);
  rlimit limited = original;
  limited.rlim_cur = durable + 10;  // room for part of the next record only
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &limited), 0);
  ASSERT_TRUE(store.report("t1", 1, TaskRunState::running, "topic", std::string(200, 'r')));
  const auto failed = store.commit();
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &original), 0);
  std::signal(SIGXFSZ, SIG_DFL);

  ASSERT_FALSE(failed);
  EXPECT_NE(failed.error().message.find("state.log"), std::string::npos);
  EXPECT_FALSE(store.out_of_space());             // EFBIG, not ENOSPC
  EXPECT_EQ(fs::file_size(log_path()), durable);  // the part that fit was cut off again
  EXPECT_TRUE(store.has_staged());
  EXPECT_TRUE(store.oldest(10).empty());         // not committed, so not handed out as such
  EXPECT_EQ(store.oldest(10, true).size(), 1u);  // but kept in memory
  ASSERT_TRUE(store.commit());                   // room again
  StateStore reopened = open();
  EXPECT_EQ(reopened.find("t1")->last_seq, 1);
  EXPECT_EQ(reopened.queued_reports(), 1u);
}

TEST_F(StateStoreTest, AnOlderAgentsJournalAndQueueAreTakenOver) {
  std::ofstream(dir_ / "journal.json") << R"({"version":1,"tasks":[{"taskUid":"t1","pid":0,"processStart":0,)"
                                          R"("lastSeq":3,"dispatch":{"action":"create"},)"
                                          R"("lastReport":{"state":"running","seq":3},"finishedOrder":0}]})";
  fs::create_directories(dir_ / "reports");
  std::ofstream(dir_ / "reports" / "00000000000000000002.json") << R"({"topic":"a","payload":"second"})";
  std::ofstream(dir_ / "reports" / "00000000000000000001.json") << R"({"topic":"a","payload":"first"})";
  {
    StateStore store = open();
    ASSERT_NE(store.find("t1"), nullptr);
    EXPECT_EQ(store.find("t1")->last_seq, 3);
    EXPECT_EQ(nlohmann::json::parse(store.find("t1")->last_report)["state"], "running");
    EXPECT_EQ(payloads(store.oldest(10)), (std::vector<std::string>{"first", "second"}));
  }
  EXPECT_FALSE(fs::exists(dir_ / "journal.json"));
  EXPECT_FALSE(fs::exists(dir_ / "reports"));
  StateStore reopened = open();  // from state.log alone now
  EXPECT_EQ(reopened.find("t1")->last_seq, 3);
  EXPECT_EQ(reopened.queued_reports(), 2u);
}

TEST_F(StateStoreTest, AnUnreadableOlderJournalIsAnErrorAndNothingIsRemoved) {
  std::ofstream(dir_ / "journal.json") << "{\"tasks\": [ {";
  auto store = StateStore::open(dir_.path().string(), 10);
  ASSERT_FALSE(store);
  EXPECT_NE(store.error().message.find("is not a k8s4r journal"), std::string::npos);
  EXPECT_TRUE(fs::exists(dir_ / "journal.json"));
}

TEST_F(StateStoreTest, TheLogIsReadableLineByLine) {
  StateStore store = open();
  store.accept("t1", {{"action", "create"}});
  ASSERT_TRUE(store.commit());
  const std::string text = log_text();
  ASSERT_EQ(text.back(), '\n');
  std::istringstream lines(text);
  std::vector<nlohmann::json> records;
  for (std::string line; std::getline(lines, line);) {
    ASSERT_EQ(line.find('\t'), 8u) << line;
    records.push_back(nlohmann::json::parse(line.substr(9)));
  }
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0]["op"], "clock");  // a new file starts as a snapshot: what only grows, then the tasks
  EXPECT_EQ(records[1]["uid"], "t1");
}

TEST_F(StateStoreTest, FinishedTasksAreForgottenAfterTheirRetentionOnTheRunClockAndTheClockSurvivesAReopen) {
  using std::chrono::seconds;
  {
    StateStore store = open();
    store.finish("early", 1, seconds(10));
    store.finish("late", 2, seconds(20));
    store.accept("running", {{"action", "create"}});
    EXPECT_EQ(store.finished_tasks(), 2u);
    const auto forgotten = store.forget_finished(seconds(15), 100);
    EXPECT_EQ(forgotten.expired, std::vector<std::string>{"early"});
    EXPECT_TRUE(forgotten.evicted.empty());
    store.note_clock(seconds(30));
    store.note_clock(seconds(25));  // the clock never goes back
    ASSERT_TRUE(store.commit());
    EXPECT_EQ(store.clock(), seconds(30));
  }
  StateStore reopened = open();
  EXPECT_EQ(reopened.find("early"), nullptr);
  ASSERT_NE(reopened.find("late"), nullptr);
  EXPECT_EQ(reopened.find("late")->finished_clock, seconds(20));
  EXPECT_NE(reopened.find("running"), nullptr);  // a task not finished is never forgotten
  EXPECT_EQ(reopened.finished_tasks(), 1u);
  EXPECT_EQ(reopened.clock(), seconds(30));
}

TEST_F(StateStoreTest, BeyondTheLimitTheTasksThatFinishedFirstAreForgottenFirst) {
  StateStore store = open();
  // Orders and clocks disagree on purpose: the order they finished in counts.
  for (int i = 1; i <= 5; ++i)
    store.finish("t" + std::to_string(i), static_cast<std::uint64_t>(i), std::chrono::seconds(100 - i));
  const auto forgotten = store.forget_finished(std::chrono::seconds(0), 2);
  EXPECT_TRUE(forgotten.expired.empty());
  EXPECT_EQ(forgotten.evicted, (std::vector<std::string>{"t1", "t2", "t3"}));
  EXPECT_EQ(store.finished_tasks(), 2u);
  EXPECT_NE(store.find("t4"), nullptr);
  EXPECT_NE(store.find("t5"), nullptr);
}

TEST_F(StateStoreTest, TheHighestSeqOutlivesTheTaskThatHadItThroughACompaction) {
  StateStore store = open();
  const auto final_id = store.report("gone", 41, TaskRunState::completed, "topic", "final");
  ASSERT_TRUE(final_id);
  store.acknowledge(final_id.value());
  store.finish("gone", 1, std::chrono::seconds(1));
  store.forget("gone");
  ASSERT_TRUE(store.commit());
  EXPECT_EQ(store.last_seq(), 41);
  // Enough traffic for a snapshot, which holds no record of "gone" at all.
  const std::string payload(1000, 'x');
  for (int i = 0; i < 2000; ++i) {
    const auto id = store.report("other", i + 42, TaskRunState::running, "topic", payload);
    ASSERT_TRUE(id);
    store.acknowledge(id.value());
    ASSERT_TRUE(store.commit());
  }
  EXPECT_EQ(log_text().find("\"gone\""), std::string::npos);
  StateStore reopened = open();
  EXPECT_EQ(reopened.find("gone"), nullptr);
  EXPECT_EQ(reopened.last_seq(), 2041);
  reopened.forget("other");
  ASSERT_TRUE(reopened.commit());
  EXPECT_EQ(open().last_seq(), 2041);
}

TEST_F(StateStoreTest, AFinishedTaskKeepsItsFinalReportWithoutTheLogsTailWhileTheQueueSendsItWhole) {
  const std::string final_report = R"({"state":"completed","seq":2,"logsTail":")" + std::string(3000, 'y') + R"("})";
  {
    StateStore store = open();
    ASSERT_TRUE(store.report("t1", 1, TaskRunState::running, "topic", R"({"state":"running","seq":1})"));
    store.finish("t1", 1, std::chrono::seconds(1));
    ASSERT_TRUE(store.report("t1", 2, TaskRunState::running, "topic", final_report));
    EXPECT_EQ(store.find("t1")->last_report, R"({"seq":2,"state":"completed"})");
    ASSERT_TRUE(store.commit());
  }
  StateStore reopened = open();
  EXPECT_EQ(reopened.find("t1")->last_report, R"({"seq":2,"state":"completed"})");
  EXPECT_EQ(payloads(reopened.oldest(10)).back(), final_report);
}

}  // namespace
}  // namespace k8s4r::agent
