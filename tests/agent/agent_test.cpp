// The Agent's report delivery over a fake MQTT link: what it publishes, and
// what it does when the broker acknowledges, fails, or goes away. Real task
// processes and files; only the network is fake.
#include "k8s4r/agent/agent.h"

#include "k8s4r/testing/temp_dir.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include <filesystem>

namespace k8s4r::agent {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

struct Published {
  std::string topic, payload;
  mqtt::Completion done;
};

// Runs on the agent's loop thread only, like every caller of the link.
struct FakeLink final : mqtt::Link {
  mqtt::LinkEvents events;
  int connects = 0;
  std::vector<Published> published;
  void connect() override { ++connects; }
  void subscribe(const std::vector<mqtt::Subscription>&, mqtt::Completion done) override { done(true, ""); }
  void publish(const std::string& topic, const std::string& payload, int, bool, mqtt::Completion done) override {
    published.push_back({topic, payload, std::move(done)});
  }
  void disconnect(std::chrono::milliseconds) override {}

  std::vector<Published*> status_reports() {
    std::vector<Published*> out;
    for (auto& p : published) {
      if (p.topic.find("/status") != std::string::npos) out.push_back(&p);
    }
    return out;
  }
};

class AgentTest : public ::testing::Test {
 protected:
  AgentTest() {
    config_.broker_url = "tcp://broker.invalid:1883";
    config_.robot_id = "robot-1";
    config_.work_dir = (temp_ / "work").string();
    config_.task_shim = K8S4R_TASK_SHIM;
    make_agent();
  }
  void make_agent() {
    agent_.reset();
    agent_ = std::make_unique<Agent>(config_, loop_, [this](mqtt::LinkEvents events) {
      auto link = std::make_unique<FakeLink>();
      link->events = std::move(events);
      link_ = link.get();
      return link;
    });
  }
  ~AgentTest() override { agent_.reset(); }

  // Runs the loop until `done` holds (checked every millisecond) or 10 s pass.
  bool run_until(const std::function<bool()>& done) {
    const auto deadline = daemon::EventLoop::Clock::now() + 10s;
    std::function<void()> check = [&] {
      if (done() || daemon::EventLoop::Clock::now() > deadline) return loop_.stop();
      loop_.after(1ms, check);
    };
    loop_.post(check);
    loop_.run();
    return done();
  }

  void dispatch(const std::string& uid, const std::string& command) {
    const std::string payload =
        R"({"action":"create","task":{"apiVersion":"robot.k8s4r.io/v1alpha1","kind":"Task","metadata":{"name":"t","uid":")" +
        uid + R"("},"spec":{"name":"t","driver":"exec","config":{"execConfig":{"command":")" + command + R"("}}}}})";
    link_->events.message("k8s4r/robots/robot-1/tasks/dispatch", payload);
  }

  std::vector<TaskStatus> reports_for(const std::string& uid) {
    std::vector<TaskStatus> reports;
    for (auto* p : link_->status_reports()) {
      auto status = parse_task_status(p->payload).value();
      if (status.task_uid == uid) reports.push_back(status);
    }
    return reports;
  }

  bool state_log_mentions(const std::string& text) const {
    std::ifstream in(fs::path(config_.work_dir) / "state.log");
    for (std::string line; std::getline(in, line);) {
      if (line.find(text) != std::string::npos) return true;
    }
    return false;
  }

  // Reports held durably for the broker, read from the state file as an
  // operator would: queued ids less acknowledged ones.
  std::size_t queued_on_disk() const {
    std::ifstream in(fs::path(config_.work_dir) / "state.log");
    std::set<std::uint64_t> queued;
    for (std::string line; std::getline(in, line);) {
      const auto record = nlohmann::json::parse(line.substr(line.find('\t') + 1));
      if (record["op"] == "ack")
        queued.erase(record["id"].get<std::uint64_t>());
      else if (record.contains("id"))
        queued.insert(record["id"].get<std::uint64_t>());
    }
    return queued.size();
  }

  testing::TempDir temp_;
  AgentConfig config_;
  daemon::EventLoop loop_;
  FakeLink* link_ = nullptr;
  std::unique_ptr<Agent> agent_;
};

std::int64_t seq_of(const Published* p) { return parse_task_status(p->payload).value().seq.value(); }

TEST_F(AgentTest, AReportLeavesTheDiskQueueOnlyWhenAcknowledgedAndIsRepublishedInOrderAfterReconnect) {
  agent_->start();
  ASSERT_EQ(link_->connects, 1);
  link_->events.connected();
  dispatch("t-1", "/bin/true");
  ASSERT_TRUE(run_until([&] { return link_->status_reports().size() == 2; }));
  EXPECT_EQ(seq_of(link_->status_reports()[0]), 1);
  EXPECT_EQ(seq_of(link_->status_reports()[1]), 2);
  EXPECT_EQ(queued_on_disk(), 2u);  // not acknowledged yet

  // The first is acknowledged, then the connection drops before the second is.
  link_->status_reports()[0]->done(true, "");
  ASSERT_TRUE(run_until([&] { return queued_on_disk() == 1; }));
  link_->events.connection_lost("broker went away");
  ASSERT_TRUE(run_until([&] { return link_->connects == 2; }));  // after a backoff
  link_->published.clear();
  link_->events.connected();
  ASSERT_TRUE(run_until([&] { return link_->status_reports().size() == 1; }));
  EXPECT_EQ(seq_of(link_->status_reports()[0]), 2);
  EXPECT_EQ(parse_task_status(link_->status_reports()[0]->payload).value().state, TaskRunState::completed);

  // A failed publish is tried again on the same connection.
  link_->status_reports()[0]->done(false, "no PUBACK");
  ASSERT_TRUE(run_until([&] { return link_->status_reports().size() == 2; }));
  link_->status_reports()[1]->done(true, "");
  ASSERT_TRUE(run_until([&] { return queued_on_disk() == 0; }));
}

TEST_F(AgentTest, AnAcknowledgementFromAnEarlierConnectionIsIgnored) {
  agent_->start();
  link_->events.connected();
  dispatch("t-2", "/bin/true");
  ASSERT_TRUE(run_until([&] { return link_->status_reports().size() == 2; }));
  mqtt::Completion stale = link_->status_reports()[1]->done;
  link_->events.connection_lost("gone");
  ASSERT_TRUE(run_until([&] { return link_->connects == 2; }));
  link_->published.clear();
  link_->events.connected();
  ASSERT_TRUE(run_until([&] { return link_->status_reports().size() == 2; }));
  // Both are in flight again; the old connection's PUBACK changes nothing.
  stale(true, "");
  loop_.post([&] { loop_.stop(); });  // runs after what the completion posted
  loop_.run();
  EXPECT_EQ(queued_on_disk(), 2u);
  for (auto* report : link_->status_reports()) report->done(true, "");
  ASSERT_TRUE(run_until([&] { return queued_on_disk() == 0; }));
}

TEST_F(AgentTest, AFinishedTaskDispatchedAgainIsAnsweredWithinItsRetentionAndRunsAgainOnlyAfterItWithAHigherSeq) {
  config_.finished_task_retention = 400ms;
  make_agent();
  agent_->start();
  link_->events.connected();
  dispatch("t-3", "/bin/true");
  ASSERT_TRUE(run_until([&] { return reports_for("t-3").size() == 2; }));
  ASSERT_EQ(reports_for("t-3")[1].state, TaskRunState::completed);

  // Within the retention: the final report again, with a new seq; no process.
  dispatch("t-3", "/bin/true");
  ASSERT_TRUE(run_until([&] { return reports_for("t-3").size() == 3; }));
  EXPECT_EQ(reports_for("t-3")[2].state, TaskRunState::completed);
  EXPECT_EQ(reports_for("t-3")[2].event, "Exited");
  EXPECT_EQ(reports_for("t-3")[2].seq, 3);

  // After it, the uid is forgotten (on disk too) and a dispatch is new work;
  // its seqs go on above every one used before.
  ASSERT_TRUE(run_until([&] { return state_log_mentions(R"("op":"forget","uid":"t-3")"); }));
  dispatch("t-3", "/bin/true");
  ASSERT_TRUE(run_until([&] { return reports_for("t-3").size() == 5; }));
  EXPECT_EQ(reports_for("t-3")[3].state, TaskRunState::running);
  EXPECT_EQ(reports_for("t-3")[3].seq, 4);
  EXPECT_EQ(reports_for("t-3")[4].seq, 5);
}

}  // namespace
}  // namespace k8s4r::agent
