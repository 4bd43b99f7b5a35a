// The Agent as one component: a fake MQTT link, a fake TaskRunner and a
// ManualClock that the tests move by hand (never a sleep); the state store
// and the task directories are real files. Real processes under the real
// runner are the monitor's tests and the black-box tests' (integration/agent).
#include "k8s4r/agent/agent.h"

#include "k8s4r/common/messages.h"
#include "k8s4r/common/topics.h"
#include "k8s4r/testing/manual_clock.h"
#include "k8s4r/testing/temp_dir.h"

#include <gtest/gtest.h>

#include <algorithm>
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
  std::vector<std::string> subscribed;
  std::vector<Published> published;
  void connect() override { ++connects; }
  void subscribe(const std::vector<mqtt::Subscription>& subscriptions, mqtt::Completion done) override {
    for (const auto& subscription : subscriptions) subscribed.push_back(subscription.filter);
    done(true, "");
  }
  void unsubscribe(const std::vector<std::string>&, mqtt::Completion done) override { done(true, ""); }
  void publish(const std::string& topic, const std::string& payload, int, bool, mqtt::Completion done) override {
    published.push_back({topic, payload, std::move(done)});
  }
  void disconnect(std::chrono::milliseconds) override { ++disconnects; }
  mqtt::LinkBacklog backlog() const override { return {}; }
  int disconnects = 0;

  std::vector<Published*> on(const std::string& suffix) {
    std::vector<Published*> out;
    for (auto& p : published) {
      if (p.topic.size() >= suffix.size() &&
          p.topic.compare(p.topic.size() - suffix.size(), suffix.size(), suffix) == 0)
        out.push_back(&p);
    }
    return out;
  }
  std::vector<Published*> status_reports() { return on("/status"); }
};

// Starts nothing: a run is "running" once the test says it started, and
// ends when the test says so.
struct FakeRunner final : TaskRunner {
  explicit FakeRunner(RunnerEvents e) : events(std::move(e)) {}
  RunnerEvents events;
  std::vector<RunRequest> starts;
  std::vector<std::pair<std::string, StopReason>> stops;
  std::set<std::string> running;
  std::set<pid_t> alive;  // pids still_runs() finds, for a restarted agent
  std::vector<std::string> adopted;
  pid_t next_pid = 1000;

  void start(RunRequest request) override { starts.push_back(std::move(request)); }
  Result<void> adopt(const std::string& uid, const TaskProcess&, SteadyTime, std::optional<std::chrono::nanoseconds>,
                     std::chrono::nanoseconds) override {
    adopted.push_back(uid);
    running.insert(uid);
    return ok();
  }
  bool still_runs(const TaskProcess& processes) override { return alive.count(processes.pid) > 0; }
  std::optional<TaskProcess> find_unrecorded(const std::string& uid, std::int64_t) override {
    auto found = unrecorded.find(uid);
    if (found == unrecorded.end()) return std::nullopt;
    return found->second;
  }
  std::map<std::string, TaskProcess> unrecorded;  // runs an earlier agent started and never recorded
  void kill_unwatched(const TaskProcess&) override {}
  TaskExit ended_unwatched(const std::string& uid, const TaskProcess&) override {
    TaskExit exit;
    exit.task_uid = uid;
    exit.status_known = false;
    exit.unknown_why = "no record";
    return exit;
  }
  bool stop(const std::string& uid, StopReason reason) override {
    stops.emplace_back(uid, reason);
    return running.count(uid) > 0;
  }
  void sweep(const std::vector<TaskProcess>&) override {}
  void forget_record(const TaskProcess&) override {}
  bool released = false;
  void release_all() override { released = true; }
  // Withdrawn while still queued (starts not yet answered), unless
  // `launching` says a shim already has it.
  void withdraw(const std::string& uid) override {
    if (launching.count(uid)) return;
    withdrawn.push_back(uid);
    events.started(uid, Error{"Withdrawn", "stopped before it started"});
  }
  std::vector<std::string> withdrawn;
  std::set<std::string> launching;

  // The test's hand on the processes.
  void start_ok(const std::string& uid) {
    TaskProcess processes;
    processes.pid = next_pid++;
    processes.pgid = processes.pid + 1;
    running.insert(uid);
    events.started(uid, processes);
  }
  void start_fails(const std::string& uid, const std::string& why) { events.started(uid, Error{"command", why}); }
  void exit(const std::string& uid, int code, std::optional<StopReason> stopped_by = std::nullopt) {
    running.erase(uid);
    TaskExit exit;
    exit.task_uid = uid;
    exit.status = ExitStatus{code, code > 128 ? code - 128 : 0};
    exit.stopped_by = stopped_by;
    events.exited(exit);
  }
};

class AgentTest : public ::testing::Test {
 protected:
  AgentTest() {
    config_.broker_url = "tcp://broker.invalid:1883";
    config_.robot_id = "robot-1";
    config_.work_dir = (temp_.path() / "work").string();
    config_.heartbeat_interval = 10s;
    make_agent();
  }
  ~AgentTest() override { agent_.reset(); }

  void make_agent() {
    agent_.reset();
    AgentHooks hooks;
    hooks.make_runner = [this](const AgentConfig&, RunnerEvents events) {
      auto runner = std::make_unique<FakeRunner>(std::move(events));
      runner_ = runner.get();
      return runner;
    };
    agent_ = std::make_unique<Agent>(
        config_, loop_,
        [this](mqtt::LinkEvents events) {
          auto link = std::make_unique<FakeLink>();
          link->events = std::move(events);
          link_ = link.get();
          return link;
        },
        hooks);
  }

  // Starts the agent and connects it; `contact`: the bridge answers its
  // first heartbeat.
  void connect(bool contact = true) {
    agent_->start();
    settle();
    ASSERT_EQ(link_->connects, 1);
    link_->events.connected();
    settle();
    if (contact) in_contact();
  }
  // The bridge acknowledges the newest heartbeat: the robot is in contact
  // (a task arriving out of contact waits for that before it starts).
  void in_contact() {
    const auto beats = link_->on("/heartbeat");
    if (beats.empty()) return;
    Ack ack;
    ack.robot_id = "robot-1";
    ack.heartbeat = parse_heartbeat(beats.back()->payload).value().timestamp;
    send_ack(ack);
  }
  // Runs what is ready, without moving time.
  void settle() { loop_.run_ready(); }
  // Moves time, running every timer at its time.
  void advance(std::chrono::nanoseconds by) { testing::advance(clock_, loop_, by); }

  void dispatch(const std::string& uid, const std::string& command = "/bin/true", const std::string& extra = "") {
    const std::string payload =
        R"({"action":"create","task":{"apiVersion":"robot.k8s4r.io/v1alpha1","kind":"Task","metadata":{"name":"t","uid":")" +
        uid + R"("},"spec":{"name":"t","driver":"exec","config":{"execConfig":{"command":")" + command + R"("}})" +
        extra + "}}}";
    link_->events.message("k8s4r/robots/robot-1/tasks/dispatch", payload);
    settle();
  }
  void cancel(const std::string& uid) {
    link_->events.message("k8s4r/robots/robot-1/tasks/dispatch",
                          R"({"action":"delete","task":{"metadata":{"uid":")" + uid + R"("}}})");
    settle();
  }
  // Acknowledges every publish not yet answered (the broker's PUBACKs).
  void acknowledge_all() {
    for (auto& p : link_->published) {
      if (p.done) std::exchange(p.done, nullptr)(true, "");
    }
    settle();
  }

  // The bridge confirms every report published so far (recorded), as one Ack.
  void confirm_all() {
    Ack ack;
    ack.robot_id = "robot-1";
    for (auto* p : link_->status_reports()) {
      const auto status = parse_task_status(p->payload).value();
      ack.reports.push_back({status.task_uid, *status.seq, ReportResult::recorded});
    }
    send_ack(ack);
  }
  void send_ack(const Ack& ack) {
    link_->events.message("k8s4r/robots/robot-1/acks", encode(ack));
    settle();
  }

  std::vector<TaskStatus> reports_for(const std::string& uid) {
    std::vector<TaskStatus> reports;
    for (auto* p : link_->status_reports()) {
      auto status = parse_task_status(p->payload).value();
      if (status.task_uid == uid) reports.push_back(status);
    }
    return reports;
  }
  std::vector<Heartbeat> heartbeats() {
    std::vector<Heartbeat> out;
    for (auto* p : link_->on("/heartbeat")) out.push_back(parse_heartbeat(p->payload).value());
    return out;
  }

  bool state_log_mentions(const std::string& text) const {
    std::ifstream in(fs::path(config_.work_dir) / "state.log");
    for (std::string line; std::getline(in, line);) {
      if (line.find(text) != std::string::npos) return true;
    }
    return false;
  }

  // Reports held durably for the bridge, read from the state file as an
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

  k8s4r::testing::TempDir temp_;
  k8s4r::testing::ManualClock clock_;
  daemon::EventLoop loop_{clock_};
  AgentConfig config_;
  FakeLink* link_ = nullptr;
  FakeRunner* runner_ = nullptr;
  std::unique_ptr<Agent> agent_;
};

std::int64_t seq_of(const Published* p) { return parse_task_status(p->payload).value().seq.value(); }

TEST_F(AgentTest, ATaskStartsOnlyOnceItsAcceptanceIsDurableAndReportsEachStateWithAGrowingSeq) {
  connect();
  dispatch("t-1", "/bin/echo");
  ASSERT_EQ(runner_->starts.size(), 1u);
  EXPECT_TRUE(state_log_mentions(R"("op":"accept","uid":"t-1")"));
  EXPECT_EQ(runner_->starts[0].process.command, "/bin/echo");
  EXPECT_EQ(runner_->starts[0].process.env.at("K8S4R_TASK_UID"), "t-1");
  EXPECT_TRUE(reports_for("t-1").empty());  // not running until the runner says so

  runner_->start_ok("t-1");
  settle();
  runner_->exit("t-1", 0);
  settle();
  const auto reports = reports_for("t-1");
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[0].state, TaskRunState::running);
  EXPECT_EQ(reports[0].seq, 1);
  EXPECT_EQ(reports[1].state, TaskRunState::completed);
  EXPECT_EQ(reports[1].seq, 2);
  EXPECT_EQ(reports[1].exit_code, 0);
  EXPECT_EQ(reports[1].finished_at, clock_.wall());
}

TEST_F(AgentTest, AReportLeavesTheQueueOnlyWhenTheBridgeConfirmsItNotOnTheBrokersPuback) {
  connect();
  EXPECT_NE(std::find(link_->subscribed.begin(), link_->subscribed.end(), "k8s4r/robots/robot-1/acks"),
            link_->subscribed.end());
  dispatch("t-1");
  runner_->start_ok("t-1");
  settle();
  runner_->exit("t-1", 0);
  settle();
  ASSERT_EQ(link_->status_reports().size(), 2u);
  acknowledge_all();  // the broker has them: not enough
  advance(1s);
  EXPECT_EQ(queued_on_disk(), 2u);
  ASSERT_EQ(heartbeats().back().ended_tasks.size(), 0u);  // sent before the end
  advance(10s);
  // The next heartbeat says the robot holds an end the bridge has not confirmed.
  ASSERT_EQ(heartbeats().back().ended_tasks, (std::vector<RunningTask>{{"t-1", TaskRunState::completed, 2}}));

  // Confirming seq 2 confirms seq 1 too.
  send_ack(Ack{"robot-1", {{"t-1", 2, ReportResult::recorded}}});
  advance(1s);  // the lazy commit
  EXPECT_EQ(queued_on_disk(), 0u);
  advance(10s);
  EXPECT_TRUE(heartbeats().back().ended_tasks.empty());
}

TEST_F(AgentTest, WhatTheBridgeDoesNotConfirmIsSentAgainLaterAndAtOnceWhenTheBridgeIsHeardAgain) {
  connect();
  dispatch("t-1");
  runner_->start_ok("t-1");
  settle();
  runner_->exit("t-1", 0);
  settle();
  acknowledge_all();
  ASSERT_EQ(link_->status_reports().size(), 2u);
  advance(9s);
  EXPECT_EQ(link_->status_reports().size(), 2u);
  advance(2s);  // 10 s without a confirmation: again, the final report only (it supersedes the first)
  ASSERT_EQ(link_->status_reports().size(), 3u);
  EXPECT_EQ(seq_of(link_->status_reports()[2]), 2);
  acknowledge_all();
  advance(19s);  // then after 20 s
  EXPECT_EQ(link_->status_reports().size(), 3u);
  advance(2s);
  ASSERT_EQ(link_->status_reports().size(), 4u);
  acknowledge_all();
  // The bridge comes back (a heartbeat's acknowledgement): sent again at once,
  // not at the end of the 40 s wait.
  send_ack(Ack{"robot-1", {}, clock_.wall()});
  ASSERT_EQ(link_->status_reports().size(), 5u);
  send_ack(Ack{"robot-1", {{"t-1", 2, ReportResult::recorded}}});
  advance(1s);
  EXPECT_EQ(queued_on_disk(), 0u);  // the first went with the second's confirmation
}

TEST_F(AgentTest, AFirstRunningReportALaterOneSupersedesBeforeItWasSentIsNotSent) {
  connect();
  dispatch("t-1");
  dispatch("t-2", "/bin/false", R"(,"restartPolicy":{"attempts":1,"interval":"1h","delay":"1s","mode":"fail"})");
  link_->events.connection_lost("gone");  // reports pile up meanwhile
  settle();
  runner_->start_ok("t-1");
  runner_->start_ok("t-2");
  settle();
  runner_->exit("t-1", 0);
  runner_->exit("t-2", 1);
  settle();
  advance(1s);  // t-2 starts again
  runner_->start_ok("t-2");
  settle();
  runner_->exit("t-2", 1);
  settle();
  link_->published.clear();
  link_->events.connected();
  settle();
  // t-1: completed (seq 3) alone, not running (seq 1) before it; its startedAt says it started.
  ASSERT_EQ(reports_for("t-1").size(), 1u);
  EXPECT_EQ(reports_for("t-1")[0].state, TaskRunState::completed);
  EXPECT_TRUE(reports_for("t-1")[0].started_at);
  // t-2: its restart and its second start are reports of their own; only its first `running` is not.
  std::vector<std::string> events;
  for (const TaskStatus& report : reports_for("t-2")) events.push_back(report.event);
  EXPECT_EQ(events, (std::vector<std::string>{"Restarting", "Started", "Exited"}));
  send_ack(Ack{"robot-1",
               {{"t-1", *reports_for("t-1")[0].seq, ReportResult::recorded},
                {"t-2", *reports_for("t-2").back().seq, ReportResult::recorded}}});
  advance(1s);
  EXPECT_EQ(queued_on_disk(), 0u);
}

TEST_F(AgentTest, WhatIsUnconfirmedGoesAgainOnEveryNewConnectionAndARefusalEndsIt) {
  connect();
  dispatch("t-1");
  dispatch("t-2");
  runner_->start_ok("t-1");
  runner_->start_ok("t-2");
  settle();
  ASSERT_EQ(link_->status_reports().size(), 2u);
  link_->events.connection_lost("broker went away");
  advance(700ms);  // the first reconnect waits 0.4 to 0.6 s
  EXPECT_EQ(link_->connects, 2);
  link_->published.clear();
  link_->events.connected();
  settle();
  ASSERT_EQ(link_->status_reports().size(), 2u);
  // A Task deleted meanwhile: the bridge refuses its report for good.
  send_ack(Ack{
      "robot-1",
      {{"t-1", 1, ReportResult::recorded}, {"t-2", 2, ReportResult::refused, "UnknownTask", "no Task with uid t-2"}}});
  advance(1s);
  EXPECT_EQ(queued_on_disk(), 0u);
  acknowledge_all();
  advance(1min);
  EXPECT_EQ(link_->status_reports().size(), 2u);  // nothing left to send
}

TEST_F(AgentTest, WithAGoK8s4rServerTheBrokersPubackDeliversAndAStaleOneIsIgnored) {
  config_.legacy_topics = true;  // a Go K8s4r server confirms nothing
  make_agent();
  connect();
  EXPECT_EQ(std::find(link_->subscribed.begin(), link_->subscribed.end(), "k8s4r/robots/robot-1/acks"),
            link_->subscribed.end());
  dispatch("t-2");
  runner_->start_ok("t-2");
  settle();
  runner_->exit("t-2", 0);
  settle();
  ASSERT_EQ(link_->status_reports().size(), 2u);
  mqtt::Completion stale = link_->status_reports()[1]->done;
  link_->status_reports()[0]->done(true, "");
  advance(1s);
  EXPECT_EQ(queued_on_disk(), 1u);
  link_->events.connection_lost("gone");
  advance(1s);
  link_->published.clear();
  link_->events.connected();
  settle();
  ASSERT_EQ(link_->status_reports().size(), 1u);
  EXPECT_EQ(seq_of(link_->status_reports()[0]), 2);
  // The old connection's PUBACK changes nothing; a failed publish is tried again a second later.
  stale(true, "");
  link_->status_reports()[0]->done(false, "no PUBACK");
  advance(500ms);
  EXPECT_EQ(queued_on_disk(), 1u);
  advance(1s);
  ASSERT_EQ(link_->status_reports().size(), 2u);
  link_->status_reports()[1]->done(true, "");
  advance(1s);
  EXPECT_EQ(queued_on_disk(), 0u);
}

TEST_F(AgentTest, AFinishedTaskDispatchedAgainIsAnsweredWithinItsRetentionAndRunsAgainOnlyAfterItWithAHigherSeq) {
  config_.finished_task_retention = 400ms;
  make_agent();
  connect();
  dispatch("t-3");
  runner_->start_ok("t-3");
  settle();
  runner_->exit("t-3", 0);
  settle();
  ASSERT_EQ(reports_for("t-3").size(), 2u);

  // Within the retention: the final report again, with a new seq; no process.
  advance(100ms);
  dispatch("t-3");
  EXPECT_EQ(runner_->starts.size(), 1u);
  ASSERT_EQ(reports_for("t-3").size(), 3u);
  EXPECT_EQ(reports_for("t-3")[2].state, TaskRunState::completed);
  EXPECT_EQ(reports_for("t-3")[2].event, "Exited");
  EXPECT_EQ(reports_for("t-3")[2].seq, 3);

  // After it, the uid is forgotten (on disk too) and a dispatch is new work;
  // its seqs go on above every one used before.
  advance(500ms);
  EXPECT_TRUE(state_log_mentions(R"("op":"forget","uid":"t-3")"));
  dispatch("t-3");
  ASSERT_EQ(runner_->starts.size(), 2u);
  runner_->start_ok("t-3");
  settle();
  ASSERT_EQ(reports_for("t-3").size(), 4u);
  EXPECT_EQ(reports_for("t-3")[3].state, TaskRunState::running);
  EXPECT_EQ(reports_for("t-3")[3].seq, 4);
}

TEST_F(AgentTest, HeartbeatsKeepTheirIntervalAndListTheRunningTasks) {
  connect();
  ASSERT_EQ(heartbeats().size(), 1u);  // at once on connecting
  dispatch("t-4");
  runner_->start_ok("t-4");
  settle();
  advance(10s);
  ASSERT_EQ(heartbeats().size(), 2u);
  EXPECT_EQ(heartbeats()[1].running_tasks, std::vector<std::string>{"t-4"});
  EXPECT_EQ(heartbeats()[1].timestamp, clock_.wall());
  runner_->exit("t-4", 0);
  advance(25s);
  ASSERT_EQ(heartbeats().size(), 4u);
  EXPECT_TRUE(heartbeats()[3].running_tasks.empty());
}

// What the artifact store holds goes in full only until the bridge has it:
// later beats carry its fingerprint alone, until it changes or the bridge
// says it lost the list.
TEST_F(AgentTest, HeartbeatsListTheArtifactStoreUntilABeatThatListedItIsAcknowledgedAndWhenTheBridgeAsks) {
  connect(false);
  ASSERT_EQ(heartbeats().size(), 1u);
  const Heartbeat first = heartbeats()[0];
  ASSERT_TRUE(first.artifacts);
  ASSERT_TRUE(first.artifacts->held);
  EXPECT_TRUE(first.artifacts->held->empty());
  EXPECT_EQ(first.artifacts->count, 0);
  EXPECT_EQ(first.artifacts->max_bytes, 1LL << 30);
  EXPECT_EQ(first.artifacts->fingerprint.size(), 16u);
  advance(10s);
  EXPECT_TRUE(heartbeats()[1].artifacts->held);  // not acknowledged yet: listed again

  Ack ack;
  ack.robot_id = "robot-1";
  ack.heartbeat = heartbeats()[1].timestamp;
  send_ack(ack);
  advance(10s);
  const Heartbeat after = heartbeats()[2];
  ASSERT_TRUE(after.artifacts);
  EXPECT_FALSE(after.artifacts->held);
  EXPECT_EQ(after.artifacts->fingerprint, first.artifacts->fingerprint);

  Ack resend;
  resend.robot_id = "robot-1";
  resend.resend_artifacts = true;
  send_ack(resend);
  advance(10s);
  EXPECT_TRUE(heartbeats()[3].artifacts->held);
}

TEST_F(AgentTest, EveryListOfTasksSaysWhatTheRobotHadSeenWhenItWasMade) {
  // A heartbeat may be written long after it was made (held in the broker or
  // a stalled bridge): beside its list it says the newest report seq drawn
  // and the newest dispatch taken, so the manager judges the list by those.
  connect();
  ASSERT_EQ(heartbeats().size(), 1u);
  EXPECT_EQ(heartbeats()[0].knows.report_seq, 0);
  EXPECT_EQ(heartbeats()[0].knows.newest_dispatch, std::nullopt);  // none taken yet

  const Timestamp sent = parse_rfc3339("2026-11-22T01:30:00.012345Z").value();
  link_->events.message(
      "k8s4r/robots/robot-1/tasks/dispatch",
      R"({"action":"create","timestamp":"2026-11-22T01:30:00.012345Z","task":{"apiVersion":"robot.k8s4r.io/v1alpha1","kind":"Task","metadata":{"name":"t","uid":"t-5"},"spec":{"name":"t","driver":"exec","config":{"execConfig":{"command":"/bin/true"}}}}})");
  settle();
  advance(10s);  // taken, not started yet: listed, and the dispatch echoed
  ASSERT_EQ(heartbeats().size(), 2u);
  EXPECT_EQ(heartbeats()[1].running_tasks, std::vector<std::string>{"t-5"});
  EXPECT_EQ(heartbeats()[1].knows.newest_dispatch, sent);
  EXPECT_EQ(heartbeats()[1].knows.report_seq, 0);

  runner_->start_ok("t-5");
  settle();
  const std::int64_t running_seq = reports_for("t-5").back().seq.value();
  advance(10s);
  ASSERT_EQ(heartbeats().size(), 3u);
  EXPECT_EQ(heartbeats()[2].knows.report_seq, running_seq);  // made after the running report
  // An older dispatch arriving late (a resend overtaken) does not move it back.
  dispatch("t-5");
  link_->events.message("k8s4r/robots/robot-1/tasks/dispatch",
                        R"({"action":"delete","timestamp":"2026-11-22T01:29:00Z","task":{"metadata":{"uid":"t-9"}}})");
  settle();
  advance(10s);
  EXPECT_EQ(heartbeats().back().knows.newest_dispatch, sent);

  // The counter is durable: a restarted agent registers with it, never lower.
  const pid_t pid = runner_->next_pid - 1;
  agent_.reset();
  make_agent();
  runner_->alive.insert(pid);
  connect();
  const auto registers = link_->on("/register");
  ASSERT_FALSE(registers.empty());
  EXPECT_GE(parse_register(registers.back()->payload).value().knows.report_seq, running_seq);
  EXPECT_GE(heartbeats().back().knows.report_seq, running_seq);
}

TEST_F(AgentTest, ATaskWithAShortDisconnectWindowIsHeartbeatedForFourTimesInIt) {
  // The robot hears from the bridge when a heartbeat is answered: with a 10 s
  // interval, a task allowed 8 s without word would be stopped while in contact.
  connect();
  ASSERT_EQ(heartbeats().size(), 1u);
  dispatch("t-4", "/bin/true", R"(,"disconnect":{"stopOnRobotAfter":"8s"})");
  runner_->start_ok("t-4");
  settle();
  advance(2s);  // a quarter of its window after the last one, not 10 s
  ASSERT_EQ(heartbeats().size(), 2u);
  advance(2s);
  ASSERT_EQ(heartbeats().size(), 3u);
  runner_->exit("t-4", 0);
  settle();
  advance(2s);  // the one already due
  ASSERT_EQ(heartbeats().size(), 4u);
  advance(9s);  // then the interval again
  EXPECT_EQ(heartbeats().size(), 4u);
  advance(1s);
  EXPECT_EQ(heartbeats().size(), 5u);
}

TEST_F(AgentTest, RegistersUntilTheBridgeAnswersWithABackoffThatGrows) {
  connect();
  ASSERT_EQ(link_->on("/register").size(), 1u);
  advance(2500ms);  // the first retry after 1.6 to 2.4 s
  ASSERT_EQ(link_->on("/register").size(), 2u);
  advance(2200ms);  // the second waits 3.2 to 4.8 s more: not before 4.8 s in all
  EXPECT_EQ(link_->on("/register").size(), 2u);
  advance(2600ms);  // nor after 7.2 s
  ASSERT_EQ(link_->on("/register").size(), 3u);
  link_->events.message("k8s4r/robots/robot-1/response", R"({"success":true,"robotId":"robot-1"})");
  advance(5min);
  EXPECT_EQ(link_->on("/register").size(), 3u);
}

TEST_F(AgentTest, ARestartPolicyRunsAFailedTaskAgainAfterItsDelay) {
  connect();
  dispatch("t-5", "/bin/false", R"(,"restartPolicy":{"attempts":1,"interval":"1h","delay":"5s","mode":"fail"})");
  runner_->start_ok("t-5");
  settle();
  runner_->exit("t-5", 1);
  settle();
  ASSERT_EQ(reports_for("t-5").back().event, "Restarting");
  advance(4s);
  EXPECT_EQ(runner_->starts.size(), 1u);
  advance(1s);
  ASSERT_EQ(runner_->starts.size(), 2u);
  EXPECT_EQ(runner_->starts[1].run, 1);
  EXPECT_TRUE(runner_->starts[1].process.append_output);
  runner_->start_ok("t-5");
  settle();
  runner_->exit("t-5", 1);
  settle();
  EXPECT_EQ(reports_for("t-5").back().state, TaskRunState::failed);
  EXPECT_EQ(reports_for("t-5").back().restart_count, 1);
}

// What a task declares in $K8S4R_OUTPUTS_FILE travels in its completed
// report; what cannot be used fails it (it is nobody's result to reuse);
// an earlier attempt's outputs are not the completed run's.
TEST_F(AgentTest, ACompletedTaskReportsTheOutputsItDeclaredAndUnusableOnesFailIt) {
  connect();
  const auto outputs_of = [this](const std::string& uid) {
    return fs::path(config_.work_dir) / "tasks" / uid / "outputs.json";
  };
  dispatch("t-out");
  ASSERT_EQ(runner_->starts.size(), 1u);
  EXPECT_EQ(runner_->starts[0].process.env.at("K8S4R_OUTPUTS_FILE"), outputs_of("t-out").string());
  runner_->start_ok("t-out");
  settle();
  std::ofstream(outputs_of("t-out")) << R"({"mapDigest": "sha256:9f", "cells": 1412, "draft": null})";
  runner_->exit("t-out", 0);
  settle();
  EXPECT_EQ(reports_for("t-out").back().state, TaskRunState::completed);
  EXPECT_EQ(reports_for("t-out").back().outputs, nlohmann::json::parse(R"({"mapDigest":"sha256:9f","cells":1412})"));

  dispatch("t-bad");
  runner_->start_ok("t-bad");
  settle();
  std::ofstream(outputs_of("t-bad")) << R"(["a list"])";
  runner_->exit("t-bad", 0);
  settle();
  const TaskStatus bad = reports_for("t-bad").back();
  EXPECT_EQ(bad.state, TaskRunState::failed);
  EXPECT_EQ(bad.reason, "InvalidOutputs");
  EXPECT_EQ(bad.exit_code, 0);
  EXPECT_EQ(bad.message, "exited with code 0, but its outputs.json must be a JSON object, got array");
  EXPECT_FALSE(bad.outputs);

  dispatch("t-again", "/bin/false", R"(,"restartPolicy":{"attempts":1,"interval":"1h","delay":"5s","mode":"fail"})");
  runner_->start_ok("t-again");
  settle();
  std::ofstream(outputs_of("t-again")) << R"({"from": "the failed attempt"})";
  runner_->exit("t-again", 1);
  settle();
  advance(5s);
  ASSERT_EQ(runner_->starts.size(), 4u);  // t-out, t-bad, t-again and its restart
  runner_->start_ok("t-again");
  settle();
  runner_->exit("t-again", 0);
  settle();
  EXPECT_EQ(reports_for("t-again").back().state, TaskRunState::completed);
  EXPECT_FALSE(reports_for("t-again").back().outputs);
}

// A cancel that finds the start still waiting for a launcher takes it back:
// the task never runs (what it would have done is never done). One that
// finds its shim already holding it reaches the run once it runs.
TEST_F(AgentTest, ACancelWhileTheRunStartsTakesItBackOrReachesItOnceItRuns) {
  connect();
  dispatch("t-5");
  cancel("t-5");
  settle();
  EXPECT_EQ(runner_->withdrawn, std::vector<std::string>{"t-5"});
  EXPECT_TRUE(runner_->stops.empty());
  ASSERT_FALSE(reports_for("t-5").empty());
  EXPECT_EQ(reports_for("t-5").back().state, TaskRunState::failed);
  EXPECT_EQ(reports_for("t-5").back().reason, "Cancelled");
  EXPECT_EQ(reports_for("t-5").back().message, "stopped before it started");
  EXPECT_FALSE(reports_for("t-5").back().started_at);

  runner_->launching.insert("t-6");
  dispatch("t-6");
  cancel("t-6");
  EXPECT_TRUE(runner_->stops.empty());  // nothing to signal yet
  runner_->start_ok("t-6");
  settle();
  ASSERT_EQ(runner_->stops.size(), 1u);
  EXPECT_EQ(runner_->stops[0], std::make_pair(std::string("t-6"), StopReason::cancelled));
  runner_->exit("t-6", 143, StopReason::cancelled);
  settle();
  EXPECT_EQ(reports_for("t-6").back().state, TaskRunState::failed);
  EXPECT_EQ(reports_for("t-6").back().reason, "Cancelled");
}

// A stop is asked for, and the task turns out to have ended already (its exit
// was on its way; its shim stopped it while the agent was stopped or cut
// off): it is recorded as it ended, and a failed one is not restarted.
TEST_F(AgentTest, ATaskThatEndedBeforeItsStopReachedItIsRecordedAsItEnded) {
  connect();
  dispatch("t-1");
  runner_->start_ok("t-1");
  settle();
  cancel("t-1");
  settle();
  runner_->exit("t-1", 0);
  settle();
  EXPECT_EQ(reports_for("t-1").back().state, TaskRunState::completed);
  EXPECT_EQ(reports_for("t-1").back().reason, "");

  dispatch("t-2", "/bin/false", R"(,"restartPolicy":{"attempts":3,"interval":"1h","delay":"1s","mode":"fail"})");
  runner_->start_ok("t-2");
  settle();
  cancel("t-2");
  settle();
  runner_->exit("t-2", 1);
  settle();
  advance(2s);
  EXPECT_EQ(runner_->starts.size(), 2u);  // t-1 and t-2, once each
  EXPECT_EQ(reports_for("t-2").back().state, TaskRunState::failed);
  EXPECT_EQ(reports_for("t-2").back().reason, "Error");
  EXPECT_EQ(reports_for("t-2").back().message,
            "exited with code 1; not restarted, as it was being stopped (Cancelled)");

  dispatch("t-3");
  runner_->start_ok("t-3");
  settle();
  cancel("t-3");
  settle();
  runner_->exit("t-3", 143, StopReason::disconnected);
  settle();
  EXPECT_EQ(reports_for("t-3").back().state, TaskRunState::failed);
  EXPECT_EQ(reports_for("t-3").back().reason, "Disconnected");
}

// Reasons the manager acts on: what would fail on every robot (InvalidTask,
// never rescheduled) apart from what this robot lacks (NotRunnableHere).
TEST_F(AgentTest, WhatFailsOnEveryRobotIsToldApartFromWhatThisRobotLacks) {
  connect();
  dispatch("t-huge", "/bin/echo");
  runner_->start_fails("t-huge", "cannot run /bin/echo: Argument list too long");
  settle();
  ASSERT_EQ(reports_for("t-huge").size(), 1u);
  EXPECT_EQ(reports_for("t-huge")[0].reason, "InvalidTask");
  dispatch("t-user", "/bin/true", R"(,"user":"no-such-user-k8s4r")");
  ASSERT_EQ(reports_for("t-user").size(), 1u);
  EXPECT_EQ(reports_for("t-user")[0].reason, "NotRunnableHere");
  dispatch("t-other", "/bin/true", R"(,"targetRobot":"robot-2")");
  ASSERT_EQ(reports_for("t-other").size(), 1u);
  EXPECT_EQ(reports_for("t-other")[0].reason, "NotRunnableHere");
}

TEST_F(AgentTest, ATaskThatCannotStartIsReportedFailedWithWhy) {
  connect();
  dispatch("t-7", "/no/such/command");
  runner_->start_fails("t-7", "/no/such/command: not found");
  settle();
  ASSERT_EQ(reports_for("t-7").size(), 1u);
  EXPECT_EQ(reports_for("t-7")[0].state, TaskRunState::failed);
  EXPECT_EQ(reports_for("t-7")[0].reason, "StartFailed");
  EXPECT_NE(reports_for("t-7")[0].message.find("not found"), std::string::npos);
}

// What the agent must refuse where it enters, each with a failed report
// naming the field, and nothing run: an environment name that would set
// another variable, a count beyond its int32, a NUL that would cut a
// command short.
TEST_F(AgentTest, ASpecThatWouldRunSomethingElseThanItSaysIsRefusedNamingTheField) {
  connect();
  const std::vector<std::pair<std::string, std::string>> refused = {
      {R"(,"env":{"PATH=/evil:/usr/bin":"x"})", "env"},
      {R"(,"env":{"NAME":"a\u0000b"})", "env.NAME"},
      {R"(,"restartPolicy":{"attempts":4294967297})", "attempts"},
  };
  int n = 0;
  for (const auto& [extra, field] : refused) {
    const std::string uid = "bad-" + std::to_string(n++);
    dispatch(uid, "/bin/true", extra);
    const auto reports = reports_for(uid);
    ASSERT_EQ(reports.size(), 1u) << extra;
    EXPECT_EQ(reports[0].state, TaskRunState::failed) << extra;
    EXPECT_EQ(reports[0].reason, "InvalidTask") << extra;
    EXPECT_NE(reports[0].message.find(field), std::string::npos) << reports[0].message;
  }
  dispatch("bad-nul-command", "/bin/true\\u0000 --evil");
  ASSERT_EQ(reports_for("bad-nul-command").size(), 1u);
  EXPECT_EQ(reports_for("bad-nul-command")[0].reason, "InvalidTask");
  EXPECT_TRUE(runner_->starts.empty());
}

// A delete that overtook its create (or a create resent late, after the
// delete): the create, when it comes, must not run.
TEST_F(AgentTest, ACreateThatArrivesAfterItsOwnDeleteNeverRuns) {
  connect();
  cancel("t-late");
  ASSERT_EQ(reports_for("t-late").size(), 1u);
  EXPECT_EQ(reports_for("t-late")[0].state, TaskRunState::failed);
  EXPECT_EQ(reports_for("t-late")[0].reason, "Cancelled");
  dispatch("t-late", "/bin/echo");
  EXPECT_TRUE(runner_->starts.empty());
  const auto reports = reports_for("t-late");
  ASSERT_EQ(reports.size(), 2u);  // answered with its end, again
  EXPECT_EQ(reports[1].reason, "Cancelled");
  EXPECT_GT(*reports[1].seq, *reports[0].seq);
}

TEST_F(AgentTest, ADispatchFromAReplicaThatLostTheRobotsSlotIsRefusedAndTheNewestEpochSurvivesARestart) {
  connect();
  const auto send = [&](const std::string& action, const std::string& uid, std::int64_t epoch) {
    const std::string spec =
        action == "create"
            ? R"(,"apiVersion":"robot.k8s4r.io/v1alpha1","kind":"Task","spec":{"name":"t","driver":"exec","config":{"execConfig":{"command":"/bin/true"}}})"
            : "";
    link_->events.message("k8s4r/robots/robot-1/tasks/dispatch",
                          R"({"action":")" + action + R"(","epoch":)" + std::to_string(epoch) +
                              R"(,"task":{"metadata":{"name":"t","uid":")" + uid + R"("})" + spec + "}}");
    settle();
  };
  send("create", "t-new", 200);
  ASSERT_EQ(runner_->starts.size(), 1u);
  runner_->start_ok("t-new");
  settle();

  // A replica that lost the slot (epoch 100 < 200) can neither start a task
  // nor stop one, and is not answered: no report for what it sent.
  send("create", "t-stale", 100);
  send("delete", "t-new", 150);
  EXPECT_EQ(runner_->starts.size(), 1u);
  EXPECT_TRUE(runner_->stops.empty());
  EXPECT_TRUE(reports_for("t-stale").empty());

  // The new owner's epoch arrives on an Ack before any dispatch of its own.
  Ack ack;
  ack.robot_id = "robot-1";
  ack.epoch = 300;
  send_ack(ack);
  send("create", "t-250", 250);
  EXPECT_EQ(runner_->starts.size(), 1u);
  // A dispatch with no epoch (a single bridge, Go K8s4r) is never refused for it.
  dispatch("t-plain");
  EXPECT_EQ(runner_->starts.size(), 2u);

  // Durable: a restarted agent refuses what is older still.
  advance(1s);
  EXPECT_TRUE(state_log_mentions(R"("epoch":300)"));
  make_agent();
  connect();
  const std::size_t before = runner_->starts.size();
  send("create", "t-299", 299);
  EXPECT_EQ(runner_->starts.size(), before);
  send("create", "t-300", 300);
  EXPECT_EQ(runner_->starts.size(), before + 1);
}

TEST_F(AgentTest, AnEpochFarAheadOfTheRobotsClockIsNotKeptSoAForgeryCannotFenceOutTheRealBridge) {
  // Epochs are a replica's clock in ms. On a broker without per-robot ACLs
  // anyone may send an Ack with epoch 2^53; kept, it would refuse every real
  // dispatch for good.
  connect();
  const std::int64_t now_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(clock_.wall().time_since_epoch()).count();
  Ack forged;
  forged.robot_id = "robot-1";
  forged.epoch = std::int64_t{1} << 53;
  send_ack(forged);
  Ack ahead = forged;
  ahead.epoch = now_ms + 3'600'001;  // more than an hour ahead
  send_ack(ahead);
  const auto create = [&](const std::string& uid, std::int64_t epoch) {
    link_->events.message(
        "k8s4r/robots/robot-1/tasks/dispatch",
        R"({"action":"create","epoch":)" + std::to_string(epoch) + R"(,"task":{"metadata":{"name":"t","uid":")" + uid +
            R"("},"apiVersion":"robot.k8s4r.io/v1alpha1","kind":"Task","spec":{"name":"t","driver":"exec","config":{"execConfig":{"command":"/bin/true"}}}}})");
    settle();
  };
  create("t-real", now_ms - 60'000);  // the real owner's, minted a minute ago
  EXPECT_EQ(runner_->starts.size(), 1u);
  // Within the hour (a bridge whose clock is a little ahead): kept.
  Ack near = forged;
  near.epoch = now_ms + 3'000'000;
  send_ack(near);
  create("t-older", now_ms);
  EXPECT_EQ(runner_->starts.size(), 1u);
}

TEST_F(AgentTest, ATaskThisRobotReportedOnAndHasNoRecordOfIsNeverRunAgain) {
  // The work dir was wiped (or restored from an older copy): the bridge sends
  // the robot's running Task again when it registers, with the seq of the
  // robot's last report on it. The agent says its state was lost, above that
  // seq (so the bridge takes it), and its counter stays above it.
  connect();
  dispatch("t-1");  // a task of its own first: seq 1 or so
  runner_->start_ok("t-1");
  settle();
  link_->events.message(
      "k8s4r/robots/robot-1/tasks/dispatch",
      R"({"action":"create","reportedSeq":41,"task":{"apiVersion":"robot.k8s4r.io/v1alpha1","kind":"Task","metadata":{"name":"t","uid":"t-wiped"},"spec":{"name":"t","driver":"exec","config":{"execConfig":{"command":"/bin/true"}}}}})");
  settle();
  ASSERT_EQ(runner_->starts.size(), 1u) << "only t-1 ran";
  const auto reports = reports_for("t-wiped");
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].state, TaskRunState::failed);
  EXPECT_EQ(reports[0].reason, "StateLost");
  EXPECT_EQ(reports[0].seq, 42);
  advance(10s);
  EXPECT_GE(heartbeats().back().knows.report_seq, 42);
  // A task it does hold is answered as any repeat, whatever reportedSeq says.
  link_->events.message(
      "k8s4r/robots/robot-1/tasks/dispatch",
      R"({"action":"create","reportedSeq":1,"task":{"apiVersion":"robot.k8s4r.io/v1alpha1","kind":"Task","metadata":{"name":"t","uid":"t-1"},"spec":{"name":"t","driver":"exec","config":{"execConfig":{"command":"/bin/true"}}}}})");
  settle();
  EXPECT_EQ(reports_for("t-1").back().state, TaskRunState::running);
  EXPECT_EQ(runner_->starts.size(), 1u);
  // A state restored from an older copy: the bridge holds a later report of
  // a task the agent does hold. Its answer is drawn above it, or the bridge
  // would drop it as stale.
  link_->events.message(
      "k8s4r/robots/robot-1/tasks/dispatch",
      R"({"action":"create","reportedSeq":100,"task":{"apiVersion":"robot.k8s4r.io/v1alpha1","kind":"Task","metadata":{"name":"t","uid":"t-1"},"spec":{"name":"t","driver":"exec","config":{"execConfig":{"command":"/bin/true"}}}}})");
  settle();
  EXPECT_EQ(reports_for("t-1").back().seq, 101);
  EXPECT_EQ(runner_->starts.size(), 1u);
}

TEST_F(AgentTest, ARestartedAgentWatchesItsStillRunningTaskAgainInsteadOfStartingIt) {
  connect();
  dispatch("t-8");
  runner_->start_ok("t-8");
  settle();
  const pid_t pid = runner_->next_pid - 1;
  agent_.reset();  // as if killed: nothing said, nothing stopped

  make_agent();
  runner_->alive.insert(pid);
  connect();
  EXPECT_EQ(runner_->adopted, std::vector<std::string>{"t-8"});
  EXPECT_TRUE(runner_->starts.empty());
  EXPECT_EQ(heartbeats().back().running_tasks, std::vector<std::string>{"t-8"});
  dispatch("t-8");  // the bridge's resend: answered, not run
  EXPECT_TRUE(runner_->starts.empty());
  EXPECT_EQ(reports_for("t-8").back().state, TaskRunState::running);
}

TEST_F(AgentTest, ARunStartedJustBeforeTheAgentDiedIsFoundAndWatchedNotKilledAndRunAgain) {
  connect();
  dispatch("t-8");
  ASSERT_EQ(runner_->starts.size(), 1u);  // handed to the runner: the shim may have started it
  agent_.reset();                         // killed before the runner answered: nothing of the run recorded

  make_agent();
  TaskProcess found;
  found.pid = 4242;
  found.pgid = 4243;
  runner_->unrecorded["t-8"] = found;
  runner_->alive.insert(4242);
  connect();
  EXPECT_EQ(runner_->adopted, std::vector<std::string>{"t-8"});
  EXPECT_TRUE(runner_->starts.empty());
  ASSERT_EQ(reports_for("t-8").size(), 1u);  // reported running now: the earlier agent never could
  EXPECT_EQ(reports_for("t-8")[0].state, TaskRunState::running);
  EXPECT_TRUE(state_log_mentions(R"("pid":4242)"));  // recorded now
  runner_->exit("t-8", 0);
  settle();
  EXPECT_EQ(reports_for("t-8").back().state, TaskRunState::completed);
}

TEST_F(AgentTest, ShutdownStopsTheRunningTasksReportsThemAndSaysOffline) {
  connect();
  dispatch("t-9");
  runner_->start_ok("t-9");
  settle();
  acknowledge_all();
  agent_->shutdown();
  settle();
  ASSERT_EQ(runner_->stops.size(), 1u);
  EXPECT_EQ(runner_->stops[0].second, StopReason::shutdown);
  runner_->exit("t-9", 143, StopReason::shutdown);
  settle();
  EXPECT_EQ(reports_for("t-9").back().reason, "AgentShutdown");
  acknowledge_all();
  confirm_all();
  const auto presence = link_->on("/presence");
  ASSERT_FALSE(presence.empty());
  EXPECT_FALSE(parse_presence(presence.back()->payload).value().online);
  EXPECT_EQ(queued_on_disk(), 0u);
}

// The package's upgrade (SIGUSR2): the agent leaves, its tasks do not. It
// leaves the broker at once, waits for a task being started (no pid recorded
// yet) and one being stopped (the next agent would not know to), then exits
// with 75.
TEST_F(AgentTest, AHandOverLeavesTheRunningTaskToTheNextAgentWhichReportsItsTrueEnd) {
  connect();
  dispatch("t-10");
  const pid_t pid = runner_->next_pid;
  runner_->start_ok("t-10");
  dispatch("t-11");
  dispatch("t-12");
  runner_->start_ok("t-12");
  settle();
  cancel("t-12");  // being stopped
  acknowledge_all();
  const std::size_t presences = link_->on("/presence").size();
  agent_->hand_over();
  settle();
  EXPECT_EQ(link_->disconnects, 1);  // off the broker at once: what comes next waits for the next agent
  EXPECT_FALSE(runner_->released);   // t-11 starting, t-12 stopping: not yet
  const pid_t starting_pid = runner_->next_pid;
  runner_->start_ok("t-11");
  runner_->exit("t-12", 143, StopReason::cancelled);
  advance(200ms);
  EXPECT_TRUE(runner_->released);                       // nor killed when the runner goes
  ASSERT_EQ(runner_->stops.size(), 1u);                 // t-12's, asked before; nothing else stopped
  EXPECT_EQ(link_->on("/presence").size(), presences);  // no offline said: the robot is not gone
  EXPECT_EQ(agent_->exit_code(), kHandOverExitCode);
  agent_->shutdown();  // a SIGTERM after it changes nothing
  settle();
  EXPECT_EQ(runner_->stops.size(), 1u);

  make_agent();
  runner_->alive.insert(pid);
  runner_->alive.insert(starting_pid);
  connect();
  EXPECT_EQ(runner_->adopted, (std::vector<std::string>{"t-10", "t-11"}));
  EXPECT_TRUE(runner_->starts.empty());
  EXPECT_EQ(reports_for("t-12").back().reason, "Cancelled");  // its end, queued while off the broker
  runner_->exit("t-10", 3);
  settle();
  EXPECT_EQ(reports_for("t-10").back().state, TaskRunState::failed);
  EXPECT_EQ(reports_for("t-10").back().exit_code, 3);
}

// A start that never answers holds a hand-over up 30 s at most.
TEST_F(AgentTest, AHandOverWaitsForAStartingTaskAtMostThirtySeconds) {
  connect();
  dispatch("t-13");  // handed to the runner, never answered
  agent_->hand_over();
  advance(29s);
  EXPECT_FALSE(runner_->released);
  advance(2s);
  EXPECT_TRUE(runner_->released);
  EXPECT_EQ(agent_->exit_code(), kHandOverExitCode);
}

// systemctl stop (or a removal) during a hand-over's wait: the tasks are
// stopped as on any stop, since no agent will adopt them.
TEST_F(AgentTest, AStopDuringAHandOverStopsTheTasksInstead) {
  connect();
  dispatch("t-14");
  runner_->start_ok("t-14");
  dispatch("t-15");  // starting: holds the hand-over
  settle();
  agent_->hand_over();
  settle();
  agent_->shutdown();
  settle();
  EXPECT_FALSE(runner_->released);
  ASSERT_FALSE(runner_->stops.empty());
  EXPECT_EQ(runner_->stops[0], (std::pair<std::string, StopReason>{"t-14", StopReason::shutdown}));
  runner_->exit("t-14", 143, StopReason::shutdown);
  runner_->start_fails("t-15", "stopped");
  advance(10s);
  EXPECT_EQ(agent_->exit_code(), 0);
  EXPECT_FALSE(runner_->released);
}

// The contact file's time, as a shim reads it; none before the first contact.
std::optional<SteadyTime> contact_in(const std::string& work_dir) {
  std::ifstream in(fs::path(work_dir) / "contact");
  std::string text;
  if (!std::getline(in, text) || text.size() != 20) return std::nullopt;
  return SteadyTime(std::chrono::nanoseconds(std::stoll(text)));
}

TEST_F(AgentTest, TheContactFileSaysWhenTheNewestHeartbeatTheBridgeAnsweredWasSent) {
  connect(false);
  const SteadyTime first = clock_.steady();  // the heartbeat on connecting
  acknowledge_all();                         // the broker's PUBACKs: not the bridge
  EXPECT_FALSE(contact_in(config_.work_dir));
  advance(5s);
  send_ack(Ack{"robot-1", {}, clock_.wall()});  // an Ack of reports only: it may have waited anywhere
  dispatch("t-0", "/bin/true", R"(,"disconnect":{"stopOnRobotAfter":"45s"})");  // so may a dispatch
  EXPECT_FALSE(contact_in(config_.work_dir));
  in_contact();  // echoes the newest heartbeat: asked for by t-0, sent 5 s after the first
  EXPECT_EQ(contact_in(config_.work_dir), first + 5s);
  Ack older{"robot-1", {}, clock_.wall()};
  older.heartbeat = heartbeats()[0].timestamp;  // an answer that waited: proves less
  send_ack(older);
  EXPECT_EQ(contact_in(config_.work_dir), first + 5s);
  // A task's stop window: its own, else the agent's default.
  dispatch("t-1");
  ASSERT_EQ(runner_->starts.size(), 2u);
  EXPECT_EQ(runner_->starts[0].stop_after_disconnect, 45s);
  EXPECT_EQ(runner_->starts[1].stop_after_disconnect, config_.disconnect_stop_after);
}

TEST_F(AgentTest, WithAGoK8s4rServerTheBrokerTakingAHeartbeatIsTheContact) {
  config_.legacy_topics = true;
  make_agent();
  connect(false);
  EXPECT_FALSE(contact_in(config_.work_dir));
  const SteadyTime sent = clock_.steady();
  advance(1s);
  link_->on("/heartbeat").front()->done(true, "");
  settle();
  EXPECT_EQ(contact_in(config_.work_dir), sent);
}

// The outside run's case: a robot cut off while its dispatch was on the
// way; the manager replaced the task meanwhile and deleted it. The dispatch
// arrives when the link heals, with the delete right behind it.
TEST_F(AgentTest, ADispatchThatArrivesOutOfContactWaitsForAnAnsweredHeartbeatAndADeleteMeanwhileMeansItNeverRuns) {
  connect();
  advance(2min + 15s);  // heartbeats every 10 s, none answered: out of contact longer than the 2m window
  const std::size_t beats = heartbeats().size();
  dispatch("t-1");
  EXPECT_TRUE(runner_->starts.empty());
  ASSERT_EQ(heartbeats().size(), beats + 1);  // asked for at once, listing it
  EXPECT_EQ(heartbeats().back().running_tasks, std::vector<std::string>{"t-1"});
  cancel("t-1");
  EXPECT_TRUE(runner_->starts.empty());
  const TaskStatus end = reports_for("t-1").back();
  EXPECT_EQ(end.state, TaskRunState::failed);
  EXPECT_EQ(end.reason, "Cancelled");
  in_contact();  // the answer, after the delete: nothing to start
  EXPECT_TRUE(runner_->starts.empty());
}

TEST_F(AgentTest, TasksHeldTogetherAskForOneHeartbeatAndStartOnItsAnswer) {
  connect();
  advance(2min + 15s);
  const std::size_t beats = heartbeats().size();
  for (const char* uid : {"t-1", "t-2", "t-3"}) {
    link_->events.message(
        "k8s4r/robots/robot-1/tasks/dispatch",
        R"({"action":"create","task":{"apiVersion":"robot.k8s4r.io/v1alpha1","kind":"Task","metadata":{"name":"t","uid":")" +
            std::string(uid) +
            R"("},"spec":{"name":"t","driver":"exec","config":{"execConfig":{"command":"/bin/true"}}}}})");
  }
  settle();
  EXPECT_TRUE(runner_->starts.empty());
  ASSERT_EQ(heartbeats().size(), beats + 1);  // one, listing all three
  EXPECT_EQ(heartbeats().back().running_tasks, (std::vector<std::string>{"t-1", "t-2", "t-3"}));
  in_contact();
  EXPECT_EQ(runner_->starts.size(), 3u);
}

TEST_F(AgentTest, AHeldDispatchStartsOnceTheBridgeAnswersAHeartbeatMadeAfterItCame) {
  connect();
  advance(2min + 15s);
  const Heartbeat before = heartbeats().back();  // 5 s ago
  dispatch("t-1", "/bin/true", R"(,"disconnect":{"stopOnRobotAfter":"60s"})");
  ASSERT_TRUE(runner_->starts.empty());
  Ack stale{"robot-1", {}, clock_.wall()};
  stale.heartbeat = before.timestamp;  // made before the dispatch came
  send_ack(stale);
  EXPECT_TRUE(runner_->starts.empty());
  advance(1s);
  in_contact();
  ASSERT_EQ(runner_->starts.size(), 1u);
  runner_->start_ok("t-1");
  settle();
  EXPECT_EQ(reports_for("t-1").back().state, TaskRunState::running);
  // In contact now: the next one starts at once.
  dispatch("t-2", "/bin/true", R"(,"disconnect":{"stopOnRobotAfter":"60s"})");
  EXPECT_EQ(runner_->starts.size(), 2u);
}

TEST_F(AgentTest, AHeldDispatchWithoutContactForItsWindowIsFailedDisconnectedAndARestartIsHeldToo) {
  connect();
  advance(16s);  // half its window and more: its shim would stop it within 14 s of a start
  dispatch("t-1", "/bin/true", R"(,"disconnect":{"stopOnRobotAfter":"30s"})");
  ASSERT_TRUE(runner_->starts.empty());
  advance(29s);
  EXPECT_TRUE(reports_for("t-1").empty());
  advance(1s);
  ASSERT_FALSE(reports_for("t-1").empty());
  const TaskStatus refused = reports_for("t-1").back();
  EXPECT_EQ(refused.state, TaskRunState::failed);
  EXPECT_EQ(refused.reason, "Disconnected");
  EXPECT_NE(refused.message.find("not started"), std::string::npos) << refused.message;
  EXPECT_TRUE(runner_->starts.empty());

  // A restart that comes due out of contact waits too.
  in_contact();
  dispatch(
      "t-2", "/bin/false",
      R"(,"disconnect":{"stopOnRobotAfter":"30s"},"restartPolicy":{"attempts":1,"interval":"1h","delay":"40s","mode":"fail"})");
  ASSERT_EQ(runner_->starts.size(), 1u);
  runner_->start_ok("t-2");
  settle();
  runner_->exit("t-2", 1);
  settle();
  advance(40s);  // due, 40 s after the last contact
  EXPECT_EQ(runner_->starts.size(), 1u);
  EXPECT_EQ(heartbeats().back().running_tasks, std::vector<std::string>{"t-2"});  // asked at once, listing it
  advance(1s);
  in_contact();
  ASSERT_EQ(runner_->starts.size(), 2u);
  EXPECT_EQ(runner_->starts[1].run, 1);
}

TEST_F(AgentTest, ATaskItsShimStoppedForWantOfContactIsReportedDisconnected) {
  connect();
  dispatch("t-1");
  runner_->start_ok("t-1");
  settle();
  runner_->exit("t-1", 143, StopReason::disconnected);
  settle();
  const TaskStatus end = reports_for("t-1").back();
  EXPECT_EQ(end.state, TaskRunState::failed);
  EXPECT_EQ(end.reason, "Disconnected");
  EXPECT_NE(end.message.find("after 2m0s without contact with the bridge"), std::string::npos) << end.message;
}

}  // namespace
}  // namespace k8s4r::agent
