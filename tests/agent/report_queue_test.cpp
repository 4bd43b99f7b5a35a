#include "k8s4r/agent/report_queue.h"

#include "k8s4r/testing/temp_dir.h"

#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>
#include <fstream>

namespace k8s4r::agent {
namespace {

namespace fs = std::filesystem;

class ReportQueueTest : public ::testing::Test {
 protected:
  testing::TempDir temp_;
  fs::path dir_ = temp_ / "outbox";  // created by the queue
};

std::vector<std::string> payloads(const ReportQueue& queue) {
  std::vector<std::string> out;
  for (const auto& report : queue.oldest(100)) out.push_back(report.payload);
  return out;
}

TEST_F(ReportQueueTest, KeepsOrderAcrossReopeningUntilAcknowledged) {
  {
    auto queue = ReportQueue::open(dir_.string(), 10);
    ASSERT_TRUE(queue);
    for (int i = 1; i <= 12; ++i) {
      const std::string payload = "{\"seq\":" + std::to_string(i) + "}";
      auto pushed = queue.value().push("k8s4r/robots/r1/tasks/t1/status", payload);
      if (i <= 10) {
        ASSERT_TRUE(pushed) << i;
      } else {
        ASSERT_FALSE(pushed);  // full: refused, nothing queued is dropped
        EXPECT_NE(pushed.error().message.find("full (10 reports"), std::string::npos);
      }
    }
    const auto first_two = queue.value().oldest(2);
    ASSERT_EQ(first_two.size(), 2u);
    ASSERT_TRUE(queue.value().acknowledge(first_two[0].id));
    ASSERT_TRUE(queue.value().acknowledge(first_two[1].id));
  }
  std::ofstream(dir_ / "00000000000000000099.json.tmp") << "half";  // an unfinished write from a crash
  auto reopened = ReportQueue::open(dir_.string(), 10);             // as after the agent's restart
  ASSERT_TRUE(reopened);
  EXPECT_EQ(reopened.value().size(), 8u);
  EXPECT_EQ(payloads(reopened.value()).front(), "{\"seq\":3}");
  EXPECT_EQ(payloads(reopened.value()).back(), "{\"seq\":10}");
  ASSERT_TRUE(reopened.value().push("k8s4r/robots/r1/tasks/t1/status", "{\"seq\":11}"));
  EXPECT_EQ(payloads(reopened.value()).back(), "{\"seq\":11}");  // after the old ones
  EXPECT_FALSE(fs::exists(dir_ / "00000000000000000099.json.tmp"));
}

TEST_F(ReportQueueTest, ACorruptReportIsAnError) {
  fs::create_directories(dir_);
  std::ofstream(dir_ / "00000000000000000001.json") << "{\"topic\":";
  auto queue = ReportQueue::open(dir_.string(), 10);
  ASSERT_FALSE(queue);
  EXPECT_NE(queue.error().message.find("is not a queued report"), std::string::npos);
}

}  // namespace
}  // namespace k8s4r::agent
