// A fleet of simulated robots for the bridge benchmark (bench/bridge_bench.py).
// Each robot is its own MQTT connection, as a real one is: client id = robot id,
// a last will that marks it offline, its presence published on connect. All of
// them are driven from one epoll loop through libmosquitto's non-threaded API,
// so ten thousand robots cost one thread.
//
// Fleet mode (the default) connects --robots robots, registers them if asked,
// prints {"event":"ready",...} and then takes commands on stdin, one per line,
// answering each with one JSON line on stdout:
//   heartbeat SECONDS RATE   heartbeats for SECONDS, RATE a second over the
//                            whole fleet (0: as fast as the broker takes them,
//                            one unacknowledged heartbeat per robot at most);
//                            Go K8s4r-style, with device figures that change
//                            every time
//   status FILE              for each "ROBOT UID" line of FILE (robots of this
//                            fleet only), that robot
//                            reports the task running (seq 1) and then
//                            completed (seq 2); answers when the broker has
//                            acknowledged every report
//   quit
// With --answer-dispatch every robot also subscribes to its dispatch topic
// and reports each Task it is sent running (seq 1) at once, as an agent that
// started it would, and failed (seq 2) when it is told to delete it (the
// manager's benchmark, bench/manager_bench.py). With --complete-dispatch it
// reports each one completed (seq 2, exit code 0) right after.
// With --answer-prefetch every robot subscribes to its artifacts topic and,
// for each list it is sent (a Prefetch), heartbeats at once saying it holds
// every artifact listed (Downloaded), as an agent whose downloads took no
// time would (the ArtifactCache benchmark, bench/manager_bench.py --prefetch).
// Count mode (--count-topic T) is the bare subscriber the bridge is measured
// against: one client subscribed to T at --count-qos (0), printing
// {"t":CLOCK_MONOTONIC ns,"count":N} every 100 ms.
#include <mosquitto.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include <fcntl.h>
#include <sys/epoll.h>
#include <unistd.h>

namespace {

using nlohmann::json;
using Steady = std::chrono::steady_clock;

long long monotonic_ns() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return now.tv_sec * 1'000'000'000LL + now.tv_nsec;
}

std::string rfc3339_now() {
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  std::tm utc{};
  gmtime_r(&now.tv_sec, &utc);
  char text[40];
  const std::size_t n = std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &utc);
  std::snprintf(text + n, sizeof text - n, ".%03ldZ", now.tv_nsec / 1'000'000);
  return text;
}

void say(const json& line) { std::cout << line.dump() << std::endl; }

class Fleet;

struct Robot {
  Fleet* fleet = nullptr;  // libmosquitto hands each callback its client's Robot
  std::string id;
  mosquitto* client = nullptr;
  int inflight = 0;
  bool registered = false;
  bool watching_write = false;
  std::set<std::string> started;  // uids reported running (--answer-dispatch)
  json artifacts;                 // what its heartbeats say it holds (--answer-prefetch); null: nothing
};

class Fleet {
 public:
  Fleet(std::string host, int port, int keepalive) : host_(std::move(host)), port_(port), keepalive_(keepalive) {
    epoll_ = epoll_create1(EPOLL_CLOEXEC);
    if (epoll_ < 0) throw std::runtime_error("epoll_create1 failed");
  }

  // Connects every robot, `parallel` TCP handshakes in flight at most, and
  // waits until each has its CONNACK and has published its presence.
  void connect(int first, int count, const std::string& prefix, bool clean_session, const std::string& subscribe_topic,
               int subscribe_qos = 0) {
    robots_.resize(static_cast<std::size_t>(count));
    subscribe_topic_ = subscribe_topic;
    subscribe_qos_ = subscribe_qos;
    char id[64];
    for (int i = 0; i < count; ++i) {
      std::snprintf(id, sizeof id, "%s%05d", prefix.c_str(), first + i);
      Robot& robot = robots_[static_cast<std::size_t>(i)];
      robot.id = id;
      robot.fleet = this;
      robot.client = mosquitto_new(robot.id.c_str(), clean_session, &robot);
      if (robot.client == nullptr) throw std::runtime_error("mosquitto_new failed for " + robot.id);
      mosquitto_int_option(robot.client, MOSQ_OPT_TCP_NODELAY, 1);
      const std::string offline = json{{"robotId", robot.id}, {"online", false}, {"timestamp", rfc3339_now()}}.dump();
      mosquitto_will_set(robot.client, presence_topic(robot).c_str(), static_cast<int>(offline.size()), offline.data(),
                         1, true);
      mosquitto_connect_callback_set(robot.client, &Fleet::on_connect);
      mosquitto_publish_callback_set(robot.client, &Fleet::on_publish);
      mosquitto_message_callback_set(robot.client, &Fleet::on_message);
      if (int rc = mosquitto_connect(robot.client, host_.c_str(), port_, keepalive_); rc != MOSQ_ERR_SUCCESS)
        throw std::runtime_error(robot.id + ": connect: " + mosquitto_strerror(rc));
      epoll_event event{};
      event.events = EPOLLIN;
      event.data.u32 = static_cast<std::uint32_t>(i);
      if (epoll_ctl(epoll_, EPOLL_CTL_ADD, mosquitto_socket(robot.client), &event) != 0)
        throw std::runtime_error("epoll_ctl failed (too many open files? raise ulimit -n)");
      if (i % 256 == 255) poll_once(0);
    }
    run_until([&] { return connected_ == count; }, std::chrono::seconds(120), "every robot to connect");
  }

  // Every robot sends register and waits for the bridge's answer, asking
  // again every 5 s until it comes, as k8s4r-agent does (with backoff).
  void register_all() {
    const auto all = static_cast<int>(robots_.size());
    const auto deadline = Steady::now() + std::chrono::seconds(600);
    while (registered_ < all) {
      if (Steady::now() > deadline) throw std::runtime_error("timed out waiting for every robot's register answer");
      for (Robot& robot : robots_) {
        if (robot.registered) continue;
        const json message{
            {"robotId", robot.id},           {"token", "token-" + robot.id},     {"agentVersion", "bench"},
            {"labels", {{"zone", "bench"}}}, {"deviceInfo", device_info(robot)}, {"runningTasks", json::array()},
            {"timestamp", rfc3339_now()}};
        publish(robot, "k8s4r/robots/" + robot.id + "/register", message.dump(), false);
        ++register_messages_;
        if ((&robot - robots_.data()) % 256 == 255) poll_once(0);
      }
      const auto again = Steady::now() + std::chrono::seconds(5);
      while (registered_ < all && Steady::now() < again) poll_once(10);
    }
  }

  json heartbeats(double seconds, double rate) {
    const auto start = Steady::now();
    const auto end = start + std::chrono::duration_cast<Steady::duration>(std::chrono::duration<double>(seconds));
    long long sent = 0;
    std::size_t next = 0;
    while (Steady::now() < end) {
      const double elapsed = std::chrono::duration<double>(Steady::now() - start).count();
      const long long due = rate > 0 ? static_cast<long long>(elapsed * rate) : -1;
      // One pass over the fleet at most per turn, so the sockets are served in between.
      for (std::size_t scanned = 0; scanned < robots_.size() && (due < 0 || sent < due); ++scanned) {
        Robot& robot = robots_[next];
        next = (next + 1) % robots_.size();
        if (robot.inflight > 0) continue;
        publish(robot, "k8s4r/robots/" + robot.id + "/heartbeat", heartbeat(robot), false);
        ++sent;
      }
      poll_once(rate > 0 ? 1 : 0);
    }
    run_until([&] { return inflight_ == 0; }, std::chrono::seconds(120), "heartbeat acknowledgements");
    const double took = std::chrono::duration<double>(Steady::now() - start).count();
    return {{"event", "heartbeat"}, {"sent", sent}, {"seconds", took}};
  }

  json statuses(const std::string& file) {
    std::ifstream in(file);
    if (!in) throw std::runtime_error("cannot read " + file);
    std::unordered_map<std::string, std::size_t> by_id;
    for (std::size_t i = 0; i < robots_.size(); ++i) by_id.emplace(robots_[i].id, i);
    std::vector<std::pair<std::size_t, std::string>> work;
    std::string robot_id, uid;
    while (in >> robot_id >> uid) {
      const auto found = by_id.find(robot_id);
      if (found == by_id.end()) throw std::runtime_error("no simulated robot " + robot_id + " in this fleet");
      work.emplace_back(found->second, uid);
    }
    const auto start = Steady::now();
    for (int seq = 1; seq <= 2; ++seq) {
      for (const auto& [index, task_uid] : work) {
        Robot& robot = robots_[index];
        const std::string now = rfc3339_now();
        json report{{"taskUid", task_uid}, {"robotId", robot.id}, {"startedAt", now},
                    {"updatedAt", now},    {"restartCount", 0},   {"seq", seq}};
        if (seq == 1) {
          report["state"] = "running";
          report["event"] = "Started";
        } else {
          report.update({{"state", "completed"},
                         {"event", "Exited"},
                         {"exitCode", 0},
                         {"message", "exited with code 0"},
                         {"finishedAt", now},
                         {"logsTail", "bench\n"}});
        }
        publish(robot, "k8s4r/robots/" + robot.id + "/tasks/" + task_uid + "/status", report.dump(), false);
        while (inflight_ > 2000) poll_once(1);
        poll_once(0);
      }
    }
    run_until([&] { return inflight_ == 0; }, std::chrono::seconds(300), "status acknowledgements");
    return {{"event", "status"},
            {"reports", 2 * work.size()},
            {"seconds", std::chrono::duration<double>(Steady::now() - start).count()}};
  }

  // Count mode: prints what arrived every 100 ms until stdin closes.
  void count_forever() {
    add_stdin();
    auto next_print = Steady::now();
    while (!stdin_closed_) {
      poll_once(20);
      if (Steady::now() >= next_print) {
        say({{"t", monotonic_ns()}, {"count", received_}});
        next_print += std::chrono::milliseconds(100);
      }
    }
  }

  void command_loop() {
    add_stdin();
    while (!stdin_closed_) {
      poll_once(100);
      std::size_t newline;
      while ((newline = stdin_buffer_.find('\n')) != std::string::npos) {
        const std::string line = stdin_buffer_.substr(0, newline);
        stdin_buffer_.erase(0, newline + 1);
        std::istringstream words(line);
        std::string verb;
        words >> verb;
        if (verb == "heartbeat") {
          double seconds = 0, rate = 0;
          words >> seconds >> rate;
          say(heartbeats(seconds, rate));
        } else if (verb == "status") {
          std::string file;
          words >> file;
          say(statuses(file));
        } else if (verb == "quit") {
          return;
        } else if (!verb.empty()) {
          say({{"event", "error"}, {"message", "unknown command: " + verb}});
        }
      }
    }
  }

  void answer_dispatches(bool on, bool complete) {
    answer_dispatch_ = on;
    complete_dispatch_ = complete;
  }
  void answer_prefetches(bool on) { answer_prefetch_ = on; }

  void disconnect_all() {
    for (Robot& robot : robots_) {
      if (robot.client == nullptr) continue;
      mosquitto_disconnect(robot.client);
      mosquitto_destroy(robot.client);
      robot.client = nullptr;
    }
  }

  json summary() const {
    return {{"event", "ready"},
            {"robots", robots_.size()},
            {"registered", registered_},
            {"register_messages", register_messages_}};
  }

 private:
  static constexpr std::uint32_t kStdin = 0xffffffff;

  static std::string presence_topic(const Robot& robot) { return "k8s4r/robots/" + robot.id + "/presence"; }

  json device_info(const Robot& robot) {
    std::uniform_real_distribution<double> percent(0, 100);
    return {
        {"hostname", robot.id},
        {"platform", {{"os", "linux"}, {"arch", "arm64"}, {"platform", "debian"}, {"platformVersion", "12.8"}}},
        {"cpu",
         {{"physicalCores", 4}, {"logicalCores", 4}, {"modelName", "Cortex-A72"}, {"usagePercent", percent(random_)}}},
        {"memory", {{"total", 8226324480LL}, {"used", 1800000000LL}, {"usagePercent", percent(random_)}}},
        {"uptime", monotonic_ns() / 1'000'000'000}};
  }

  std::string heartbeat(const Robot& robot) {
    json beat{{"robotId", robot.id},
              {"token", "token-" + robot.id},
              {"timestamp", rfc3339_now()},
              {"deviceInfo", device_info(robot)},
              {"runningTasks", robot.started}};
    if (!robot.artifacts.is_null()) beat["artifacts"] = robot.artifacts;
    return beat.dump();
  }

  void publish(Robot& robot, const std::string& topic, const std::string& payload, bool retain) {
    int mid = 0;
    const int rc = mosquitto_publish(robot.client, &mid, topic.c_str(), static_cast<int>(payload.size()),
                                     payload.data(), 1, retain);
    if (rc != MOSQ_ERR_SUCCESS) throw std::runtime_error(robot.id + ": publish: " + mosquitto_strerror(rc));
    ++robot.inflight;
    ++inflight_;
    watch_write(robot);
  }

  void watch_write(Robot& robot) {
    const bool want = mosquitto_want_write(robot.client);
    if (want == robot.watching_write) return;
    epoll_event event{};
    event.events = want ? EPOLLIN | EPOLLOUT : EPOLLIN;
    event.data.u32 = static_cast<std::uint32_t>(&robot - robots_.data());
    epoll_ctl(epoll_, EPOLL_CTL_MOD, mosquitto_socket(robot.client), &event);
    robot.watching_write = want;
  }

  void add_stdin() {
    fcntl(0, F_SETFL, fcntl(0, F_GETFL) | O_NONBLOCK);
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.u32 = kStdin;
    epoll_ctl(epoll_, EPOLL_CTL_ADD, 0, &event);
  }

  void poll_once(int timeout_ms) {
    epoll_event events[512];
    const int n = epoll_wait(epoll_, events, 512, timeout_ms);
    for (int i = 0; i < n; ++i) {
      if (events[i].data.u32 == kStdin) {
        char buffer[4096];
        const ssize_t got = read(0, buffer, sizeof buffer);
        if (got > 0) stdin_buffer_.append(buffer, static_cast<std::size_t>(got));
        if (got == 0) stdin_closed_ = true;
        continue;
      }
      Robot& robot = robots_[events[i].data.u32];
      if (events[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) check(robot, mosquitto_loop_read(robot.client, 64));
      if (events[i].events & EPOLLOUT) check(robot, mosquitto_loop_write(robot.client, 64));
      watch_write(robot);
    }
    if (Steady::now() >= next_misc_) {
      for (Robot& robot : robots_)
        if (robot.client != nullptr) check(robot, mosquitto_loop_misc(robot.client));
      next_misc_ = Steady::now() + std::chrono::seconds(1);
    }
  }

  // Also where a callback's failure surfaces: libmosquitto is C, and an
  // exception must not unwind through it.
  void check(const Robot& robot, int rc) {
    if (!failure_.empty()) throw std::runtime_error(failure_);
    if (rc != MOSQ_ERR_SUCCESS) throw std::runtime_error(robot.id + ": connection lost: " + mosquitto_strerror(rc));
  }

  template <typename Done>
  void run_until(Done done, std::chrono::seconds limit, const std::string& what) {
    const auto deadline = Steady::now() + limit;
    while (!done()) {
      if (Steady::now() > deadline) throw std::runtime_error("timed out waiting for " + what);
      poll_once(10);
    }
  }

  static void on_connect(mosquitto* client, void* robot_ptr, int rc) {
    Robot& robot = *static_cast<Robot*>(robot_ptr);
    Fleet* self = robot.fleet;
    if (rc != 0) {
      self->failure_ = robot.id + ": CONNACK refused: " + mosquitto_connack_string(rc);
      return;
    }
    ++self->connected_;
    if (!self->subscribe_topic_.empty()) {
      mosquitto_subscribe(client, nullptr, self->subscribe_topic_.c_str(), self->subscribe_qos_);
      return;
    }
    mosquitto_subscribe(client, nullptr, ("k8s4r/robots/" + robot.id + "/response").c_str(), 1);
    if (self->answer_dispatch_)
      mosquitto_subscribe(client, nullptr, ("k8s4r/robots/" + robot.id + "/tasks/dispatch").c_str(), 1);
    if (self->answer_prefetch_)
      mosquitto_subscribe(client, nullptr, ("k8s4r/robots/" + robot.id + "/artifacts").c_str(), 1);
    const std::string online = json{{"robotId", robot.id}, {"online", true}, {"timestamp", rfc3339_now()}}.dump();
    try {
      self->publish(robot, presence_topic(robot), online, true);
    } catch (const std::exception& error) {
      self->failure_ = error.what();
    }
  }

  static void on_publish(mosquitto* /*client*/, void* robot_ptr, int /*mid*/) {
    Robot& robot = *static_cast<Robot*>(robot_ptr);
    --robot.inflight;
    --robot.fleet->inflight_;
  }

  static void on_message(mosquitto* /*client*/, void* robot_ptr, const mosquitto_message* message) {
    Robot& robot = *static_cast<Robot*>(robot_ptr);
    Fleet* self = robot.fleet;
    ++self->received_;
    if (!self->subscribe_topic_.empty()) return;
    const std::string topic = message->topic;
    if (self->answer_prefetch_ && topic.size() > 10 && topic.compare(topic.size() - 10, 10, "/artifacts") == 0) {
      const json wanted = json::parse(static_cast<const char*>(message->payload),
                                      static_cast<const char*>(message->payload) + message->payloadlen, nullptr, false);
      if (!wanted.is_object() || !wanted.contains("artifacts") || !wanted["artifacts"].is_array()) return;
      json holds = json::array(), states = json::array();
      std::string listed;
      for (const json& artifact : wanted["artifacts"]) {
        const std::string checksum = artifact.value("checksum", "");
        holds.push_back(checksum);
        states.push_back({{"checksum", checksum}, {"state", "Downloaded"}});
        listed += checksum + "\n";
      }
      char fingerprint[17];
      std::snprintf(fingerprint, sizeof fingerprint, "%016zx", std::hash<std::string>{}(listed));
      // Every heartbeat lists them from now on (the fleet does not track acknowledgements).
      robot.artifacts = {
          {"fingerprint", fingerprint}, {"count", holds.size()}, {"bytes", 0}, {"held", holds}, {"prefetch", states}};
      try {
        self->publish(robot, "k8s4r/robots/" + robot.id + "/heartbeat", self->heartbeat(robot), false);
      } catch (const std::exception& error) {
        self->failure_ = error.what();
      }
      return;
    }
    if (self->answer_dispatch_ && topic.size() > 15 && topic.compare(topic.size() - 15, 15, "/tasks/dispatch") == 0) {
      const json sent = json::parse(static_cast<const char*>(message->payload),
                                    static_cast<const char*>(message->payload) + message->payloadlen, nullptr, false);
      if (!sent.is_object() || !sent.contains("task") || !sent["task"].is_object()) return;
      const std::string action = sent.value("action", "");
      const std::string uid = sent["task"].value("metadata", json::object()).value("uid", "");
      if (uid.empty()) return;
      const std::string now = rfc3339_now();
      json report{{"taskUid", uid}, {"robotId", robot.id}, {"startedAt", now}, {"updatedAt", now}, {"restartCount", 0}};
      if (action == "create") {
        if (!robot.started.insert(uid).second) return;  // a resend: answered already
        report.update({{"seq", 1}, {"state", "running"}, {"event", "Started"}});
      } else if (action == "delete") {
        if (robot.started.erase(uid) == 0) return;
        report.update({{"seq", 2},
                       {"state", "failed"},
                       {"event", "Killed"},
                       {"message", "stopped: deleted"},
                       {"finishedAt", now}});
      } else {
        return;
      }
      try {
        const std::string status_topic = "k8s4r/robots/" + robot.id + "/tasks/" + uid + "/status";
        self->publish(robot, status_topic, report.dump(), false);
        if (action == "create" && self->complete_dispatch_) {
          report.update({{"seq", 2},
                         {"state", "completed"},
                         {"event", "Exited"},
                         {"exitCode", 0},
                         {"message", "exited with code 0"},
                         {"logs", "done\n"},
                         {"finishedAt", rfc3339_now()}});
          self->publish(robot, status_topic, report.dump(), false);
        }
      } catch (const std::exception& error) {
        self->failure_ = error.what();
      }
      return;
    }
    if (topic.size() > 9 && topic.compare(topic.size() - 9, 9, "/response") == 0 && !robot.registered) {
      const json answer = json::parse(static_cast<const char*>(message->payload),
                                      static_cast<const char*>(message->payload) + message->payloadlen, nullptr, false);
      if (answer.is_object() && answer.value("success", false)) {
        robot.registered = true;
        ++self->registered_;
      }
    }
  }

  std::string host_;
  int port_;
  int keepalive_;
  int epoll_ = -1;
  std::vector<Robot> robots_;
  std::string subscribe_topic_;
  int subscribe_qos_ = 0;
  std::string stdin_buffer_;
  std::string failure_;  // set by a callback, thrown by check()
  bool stdin_closed_ = false;
  bool answer_dispatch_ = false;
  bool complete_dispatch_ = false;
  bool answer_prefetch_ = false;
  int connected_ = 0;
  int registered_ = 0;
  long long register_messages_ = 0;
  long long inflight_ = 0;
  long long received_ = 0;
  std::mt19937 random_{42};
  Steady::time_point next_misc_ = Steady::now();
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"A fleet of simulated robots, each with its own MQTT connection (bench/bridge_bench.py drives it)"};
  std::string broker = "127.0.0.1:1883", prefix = "sim-robot-", count_topic;
  int robots = 100, first = 0, keepalive = 60;
  bool register_robots = false, answer_dispatch = false, complete_dispatch = false;
  app.add_option("--broker", broker, "HOST:PORT of the MQTT broker");
  app.add_option("--robots", robots, "how many robots")->check(CLI::Range(1, 60000));
  app.add_option("--prefix", prefix, "robot ids are PREFIX00000, PREFIX00001, ...");
  app.add_option("--first", first,
                 "the first robot's number, so several fleets make one (libmosquitto takes three "
                 "descriptors a robot)");
  app.add_option("--keepalive", keepalive, "MQTT keepalive, seconds");
  app.add_flag("--register", register_robots, "register every robot and wait for the bridge's answers");
  app.add_flag("--answer-dispatch", answer_dispatch, "report every Task dispatched to a robot running at once");
  app.add_flag("--complete-dispatch", complete_dispatch,
               "with --answer-dispatch, report it completed (exit code 0) right after");
  bool answer_prefetch = false;
  app.add_flag("--answer-prefetch", answer_prefetch,
               "heartbeat at once holding every artifact a robot is told to keep ahead of need");
  int count_qos = 0;
  app.add_option("--count-topic", count_topic, "be the bare subscriber of this topic instead of a fleet");
  app.add_option("--count-qos", count_qos, "the bare subscriber's QoS (0, as the bridge takes heartbeats)")
      ->check(CLI::Range(0, 2));
  CLI11_PARSE(app, argc, argv);
  const std::size_t colon = broker.rfind(':');
  if (colon == std::string::npos) {
    std::cerr << "--broker must be HOST:PORT\n";
    return 2;
  }
  mosquitto_lib_init();
  try {
    Fleet fleet(broker.substr(0, colon), std::stoi(broker.substr(colon + 1)), keepalive);
    if (!count_topic.empty()) {
      fleet.connect(0, 1, "bench-subscriber-", true, count_topic, count_qos);
      fleet.count_forever();
    } else {
      fleet.answer_dispatches(answer_dispatch, complete_dispatch);
      fleet.answer_prefetches(answer_prefetch);
      fleet.connect(first, robots, prefix, true, "");
      if (register_robots) fleet.register_all();
      say(fleet.summary());
      fleet.command_loop();
    }
    fleet.disconnect_all();
  } catch (const std::exception& error) {
    say({{"event", "error"}, {"message", error.what()}});
    return 1;
  }
  mosquitto_lib_cleanup();
  return 0;
}
