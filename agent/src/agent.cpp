#include "k8s4r/agent/agent.h"

#include "k8s4r/common/files.h"

#include "k8s4r/agent/device_info.h"
#include "k8s4r/agent/task_logs.h"
#include "k8s4r/common/duration.h"
#include "k8s4r/common/identifiers.h"
#include "k8s4r/common/topics.h"
#include "k8s4r/shim/protocol.h"

#include <spdlog/spdlog.h>

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <array>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>

namespace k8s4r::agent {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

#ifndef K8S4R_VERSION
#define K8S4R_VERSION "0.0.0"
#endif

constexpr auto kMaxReconnectBackoff = 30s;
constexpr auto kMaxRegisterBackoff = 60s;
// Below Mosquitto's default receive maximum (20): more would wait inside Paho,
// which sends queued messages late (up to a quarter second was measured).
constexpr std::size_t kMaxInFlightReports = 16;
constexpr auto kFlushTimeout = 5s;
// Bytes of received messages waiting for the loop at most; beyond, Paho's
// thread waits and the rest stay with the broker. Counted in bytes, not
// messages: a burst of small dispatches goes through in large batches (one
// commit each), while sixteen of the largest (256 KiB) fill it.
constexpr std::size_t kMaxWaitingBytes = 4 << 20;
// Finished tasks kept whole, with their directories (logs) and in register's
// runningTasks; older ones are remembered by the store alone, until their
// retention ends.
constexpr std::size_t kRecentFinishedTasks = 256;
// Acknowledgements wait this long for company before they are committed.
constexpr auto kLazyCommitDelay = 200ms;
// While storage fails, commits are tried again this often.
constexpr auto kStorageRetry = 5s;

Timestamp now_utc() { return std::chrono::time_point_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now()); }

// Doubles `backoff` up to `cap`, and returns it with ±20% jitter so a fleet
// that lost its broker together does not come back in lockstep.
std::chrono::milliseconds next_backoff(std::chrono::milliseconds& backoff, std::chrono::milliseconds first,
                                       std::chrono::milliseconds cap) {
  backoff = backoff.count() == 0 ? first : std::min(cap, backoff * 2);
  static thread_local std::mt19937 random{std::random_device{}()};
  std::uniform_real_distribution<double> jitter(0.8, 1.2);
  return std::chrono::milliseconds(static_cast<long long>(static_cast<double>(backoff.count()) * jitter(random)));
}

std::string describe(const ExitStatus& status) {
  if (status.signal != 0) {
    const char* name = sigabbrev_np(status.signal);
    return std::string("killed by SIG") + (name ? name : std::to_string(status.signal));
  }
  return "exited with code " + std::to_string(status.exit_code);
}

TaskStatus failure(std::string reason, std::string event, std::string message) {
  TaskStatus status;
  status.state = TaskRunState::failed;
  status.reason = std::move(reason);
  status.event = std::move(event);
  status.message = std::move(message);
  return status;
}

// A task uid from a dispatch that did not parse, when one can be read safely:
// task.metadata.uid, found by a SAX pass that keeps nothing but the path to
// it, so even a payload nesting far deeper than any message may is read
// without building (and recursing through) its tree.
class TaskUidReader final : public nlohmann::json_sax<nlohmann::json> {
 public:
  std::optional<std::string> uid;

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool string(string_t& value) override {
    if (at_uid()) uid = value;
    return true;
  }
  bool start_object(std::size_t) override { return open(true); }
  bool start_array(std::size_t) override { return open(false); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }
  bool key(string_t& value) override {
    if (depth_ <= kPath.size()) keys_[depth_ - 1] = value;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }

 private:
  static constexpr std::array<std::string_view, 3> kPath{"task", "metadata", "uid"};
  bool open(bool object) {
    ++depth_;
    if (depth_ <= kPath.size()) {
      objects_[depth_ - 1] = object;
      keys_[depth_ - 1].clear();
    }
    return true;
  }
  bool close() {
    --depth_;
    return true;
  }
  bool at_uid() const {
    if (depth_ != kPath.size()) return false;
    for (std::size_t i = 0; i < kPath.size(); ++i) {
      if (!objects_[i] || keys_[i] != kPath[i]) return false;
    }
    return true;
  }
  std::size_t depth_ = 0;
  std::array<bool, 3> objects_{};
  std::array<std::string, 3> keys_;
};

std::optional<std::string> readable_task_uid(const std::string& payload) {
  if (payload.size() > kMaxPayloadBytes) return std::nullopt;
  TaskUidReader reader;
  if (!nlohmann::json::sax_parse(payload, &reader) || !reader.uid || !validate_identifier(*reader.uid)) {
    return std::nullopt;
  }
  return reader.uid;
}

}  // namespace

Agent::Agent(AgentConfig config, daemon::EventLoop& loop, LinkFactory make_link, AgentHooks hooks)
    : config_(std::move(config)), loop_(loop), hooks_(std::move(hooks)), inbox_(kMaxWaitingBytes) {
  std::error_code error;
  fs::create_directories(fs::path(config_.work_dir) / "tasks", error);
  if (error) throw std::runtime_error("work dir " + config_.work_dir + ": " + error.message());
  // Traversable, not listable: a task's user reaches its own directory (0700)
  // and no other user learns which tasks ran.
  fs::permissions(fs::path(config_.work_dir) / "tasks",
                  fs::perms::owner_all | fs::perms::group_exec | fs::perms::others_exec, error);
  if (error) throw std::runtime_error("work dir " + config_.work_dir + "/tasks: " + error.message());
  lock_work_dir();
  auto store = StateStore::open(config_.work_dir, config_.max_queued_reports);
  if (!store) throw std::runtime_error(store.error().message);
  store_ = std::make_unique<StateStore>(std::move(store).value());
  run_clock_at_start_ = store_->clock();
  set_up_containment();
  artifacts_ = std::make_unique<ArtifactWorker>();
  monitor_ = std::make_unique<Monitor>(
      MonitorCallbacks{[this](const TaskExit& exit) { loop_.post([this, exit] { on_exit(exit); }); },
                       [](const SignalAction& action, std::chrono::nanoseconds lateness) {
                         spdlog::info("task {}: sent {} ({}), {} µs after its deadline", action.task_uid,
                                      action.signal == SIGKILL ? "SIGKILL" : "SIGTERM", to_string(action.reason),
                                      std::chrono::duration_cast<std::chrono::microseconds>(lateness).count());
                       }});
  mqtt::LinkEvents events;
  events.connected = [this] { loop_.post([this] { on_connected(); }); };
  events.connect_failed = [this](const std::string& cause) { loop_.post([this, cause] { on_connect_failed(cause); }); };
  events.connection_lost = [this](const std::string& cause) {
    loop_.post([this, cause] { on_connection_lost(cause); });
  };
  events.message = [this](const std::string& topic, const std::string& payload) {
    const std::size_t bytes = topic.size() + payload.size();
    inbox_.enter(bytes);  // Paho's thread waits here while the loop is behind
    loop_.post([this, topic, payload, bytes] {
      inbox_.leave(bytes);
      on_message(topic, payload);
    });
  };
  link_ = make_link(std::move(events));
}

void Agent::lock_work_dir() {
  // Two agents on one work dir would both run its tasks and both write
  // state.log. flock: released by the kernel when the agent dies, however it
  // dies; close-on-exec, so no task inherits it and outlives the agent with it.
  const std::string path = (fs::path(config_.work_dir) / "agent.lock").string();
  lock_fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd_ < 0) throw std::runtime_error("cannot open " + path + ": " + std::strerror(errno));
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    const int why = errno;
    const auto read = read_file(path);
    const std::string holder = read ? read.value() : std::string();
    ::close(lock_fd_);
    lock_fd_ = -1;
    if (why == EWOULDBLOCK) {
      throw std::runtime_error("work dir " + config_.work_dir + " is in use by another agent" +
                               (holder.empty() ? "" : " (pid " + holder.substr(0, holder.find('\n')) + ")") +
                               "; two agents on one work dir would run its tasks twice");
    }
    throw std::runtime_error("cannot lock " + path + ": " + std::strerror(why));
  }
  // Who holds it, for the next one's message; the lock itself is the flock.
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(lock_fd_, 0) != 0 || ::pwrite(lock_fd_, pid.data(), pid.size(), 0) < 0) {
    spdlog::warn("cannot write this agent's pid into {}: {}", path, std::strerror(errno));
  }
}

Agent::~Agent() {
  // The link's and the monitor's threads stop before the state they post to;
  // a callback waiting for room in the inbox would hold up the link's teardown.
  inbox_.close();
  link_.reset();
  monitor_.reset();
  artifacts_.reset();
  // Empty once every task ended; what still runs keeps it for the next start.
  if (cgroups_) ::rmdir(cgroups_->parent().c_str());
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

std::string Agent::task_dir(const std::string& uid) const {
  return (fs::path(config_.work_dir) / "tasks" / uid).string();
}

std::string Agent::task_file(const std::string& uid, const char* name) const {
  return (fs::path(task_dir(uid)) / name).string();
}

std::string Agent::final_logs_tail(const std::string& uid) const {
  return logs_tail(task_file(uid, "stdout.log"), task_file(uid, "stderr.log"), kMaxLogsTailCharacters);
}

std::chrono::nanoseconds Agent::kill_timeout_of(const Task& task) const {
  return task.spec.kill_timeout.value_or(config_.default_kill_timeout);
}

// ---- start and connection ----------------------------------------------------

void Agent::start() {
  restore();
  kill_orphans();
  prepare_spare_shim();  // so the first task need not start one
  remove_exit_records(true);
  forget_expired();
  if (hooks_.watchdog_interval) feed_watchdog();
  spdlog::info("agent {} for robot {}: {} task(s) from state.log, {} report(s) queued", K8S4R_VERSION, config_.robot_id,
               tasks_.size(), store_->queued_reports());
  connect();
}

void Agent::feed_watchdog() {
  if (hooks_.notify) hooks_.notify("WATCHDOG=1");
  loop_.after(*hooks_.watchdog_interval, [this] { feed_watchdog(); });
}

void Agent::connect() {
  reconnect_timer_ = 0;
  if (shutting_down_) return;
  spdlog::info("connecting to {}", config_.broker_url);
  link_->connect();
}

void Agent::schedule_reconnect() {
  if (shutting_down_ || reconnect_timer_ != 0) return;
  const auto wait = next_backoff(reconnect_backoff_, 500ms, kMaxReconnectBackoff);
  reconnect_timer_ = loop_.after(wait, [this] { connect(); });
}

void Agent::on_connect_failed(const std::string& cause) {
  spdlog::warn("cannot connect to {}: {}", config_.broker_url, cause);
  schedule_reconnect();
}

void Agent::on_connection_lost(const std::string& cause) {
  if (!connected_) return;
  spdlog::warn("lost the broker: {}", cause);
  connected_ = false;
  registered_ = false;
  in_flight_.clear();  // whatever was unacknowledged is published again
  for (auto* timer : {&register_timer_, &heartbeat_timer_, &retry_drain_timer_}) {
    loop_.cancel(*timer);
    *timer = 0;
  }
  if (shutting_down_) {
    check_shutdown_progress();
    return;
  }
  schedule_reconnect();
}

void Agent::on_connected() {
  connected_ = true;
  ++generation_;
  reconnect_backoff_ = {};
  register_backoff_ = {};
  connected_at_ = now_utc();
  spdlog::info("connected to {}", config_.broker_url);
  subscribe();
  publish_presence(true, nullptr);
  send_register();
  send_heartbeat();
  drain();
}

void Agent::subscribe() {
  const std::uint64_t generation = generation_;
  // Subscriptions survive in a persistent session, but not a broker restart
  // without persistence; subscribing again is harmless.
  link_->subscribe({{topics::response(config_.robot_id).value(), 1}, {topics::dispatch(config_.robot_id).value(), 1}},
                   [this, generation](bool ok, const std::string& error) {
                     loop_.post([this, generation, ok, error] {
                       if (generation != generation_ || !connected_) return;
                       if (!ok) {
                         spdlog::error("subscribing to this robot's topics failed: {}; trying again in 5s", error);
                         loop_.after(5s, [this, generation] {
                           if (generation == generation_ && connected_) subscribe();
                         });
                         return;
                       }
                       if (!ready_notified_ && hooks_.notify) hooks_.notify("READY=1\nSTATUS=connected");
                       ready_notified_ = true;
                     });
                   });
}

std::optional<StorageError> Agent::storage_error() const {
  if (!storage_failure_) return std::nullopt;
  std::string message = *storage_failure_;
  // At most kMaxStorageErrorMessageCharacters characters, cut between them.
  std::size_t characters = 0, end = 0;
  for (; end < message.size(); ++end) {
    if ((static_cast<unsigned char>(message[end]) & 0xC0) == 0x80) continue;
    if (++characters > kMaxStorageErrorMessageCharacters) break;
  }
  message.resize(end);
  return StorageError{store_->out_of_space() ? "StorageFull" : "StorageError", std::move(message)};
}

void Agent::publish_presence(bool online, mqtt::Completion done) {
  Presence presence{config_.robot_id, online, connected_at_, online ? storage_error() : std::nullopt};
  link_->publish(topics::presence(config_.robot_id).value(), encode(presence), 1, true,
                 done ? std::move(done) : mqtt::Completion([](bool, const std::string&) {}));
}

void Agent::send_register() {
  register_timer_ = 0;
  if (!connected_ || registered_ || shutting_down_) return;
  Register message;
  message.robot_id = config_.robot_id;
  message.token = config_.token;
  message.agent_version = K8S4R_VERSION;
  message.labels = config_.labels;
  message.device_info = collect_device_info();
  message.timestamp = now_utc();
  for (const auto& [uid, task] : tasks_) {
    RunningTask entry{uid, TaskRunState::running, task.last_seq > 0 ? std::optional(task.last_seq) : std::nullopt};
    if (task.last_report) entry.state = task.last_report->state;
    message.running_tasks.push_back(entry);
  }
  const std::string topic =
      config_.legacy_topics ? std::string(topics::kRegister) : topics::robot_register(config_.robot_id).value();
  link_->publish(topic, encode(message), 1, false, [](bool ok, const std::string& error) {
    if (!ok) spdlog::warn("publishing register failed: {}", error);
  });
  // Until a RegisterResponse arrives, ask again with backoff.
  const auto wait = next_backoff(register_backoff_, 2s, kMaxRegisterBackoff);
  register_timer_ = loop_.after(wait, [this] { send_register(); });
}

void Agent::send_heartbeat() {
  loop_.cancel(heartbeat_timer_);
  heartbeat_timer_ = 0;
  if (!connected_ || shutting_down_) return;
  Heartbeat beat;
  beat.robot_id = config_.robot_id;
  // No token: it is the robot's login, checked by the broker at connect, and a
  // heartbeat is what operators tail; the manager judges the register's.
  beat.timestamp = now_utc();
  for (const auto& [uid, task] : tasks_) {
    if (task.phase == Phase::running) {
      beat.running_tasks.push_back(uid);
      // A chatty task's logs are kept in bounds here, between heartbeats.
      for (const char* stream : {"stdout.log", "stderr.log"}) {
        if (cap_log(task_file(uid, stream), config_.max_log_bytes))
          spdlog::info("task {}: {} rotated at {} bytes", uid, stream, config_.max_log_bytes);
      }
    }
  }
  beat.storage_error = storage_error();
  const std::string topic =
      config_.legacy_topics ? std::string(topics::kHeartbeat) : topics::robot_heartbeat(config_.robot_id).value();
  link_->publish(topic, encode(beat), 1, false, [](bool ok, const std::string& error) {
    if (!ok) spdlog::warn("publishing heartbeat failed: {}", error);
  });
  heartbeat_timer_ = loop_.after(config_.heartbeat_interval, [this] { send_heartbeat(); });
}

void Agent::tell_storage_state() {
  // At once, not at the next heartbeat: the bridge writes the Robot's
  // StorageReady condition, and an operator tailing MQTT sees the presence.
  if (!connected_ || shutting_down_) return;
  send_heartbeat();
  publish_presence(true, nullptr);
}

void Agent::on_message(const std::string& topic, const std::string& payload) {
  auto parsed = topics::parse_topic(topic);
  if (!parsed || parsed.value().robot_id != config_.robot_id) {
    spdlog::warn("ignoring a message on {}: not one of this robot's topics", topic);
    return;
  }
  switch (parsed.value().kind) {
    case topics::TopicKind::response:
      on_register_response(payload);
      break;
    case topics::TopicKind::dispatch:
      on_dispatch(payload);
      break;
    default:
      spdlog::warn("ignoring a message on {}", topic);
  }
}

void Agent::on_register_response(const std::string& payload) {
  auto response = parse_register_response(payload);
  if (!response) {
    spdlog::warn("ignoring a register response: {}: {}", response.error().field, response.error().message);
    return;
  }
  if (!response.value().success) {
    spdlog::warn("the bridge refused registration: {}; trying again", response.value().message);
    return;  // the register timer asks again, with backoff
  }
  if (!response.value().robot_id.empty() && response.value().robot_id != config_.robot_id) {
    spdlog::warn("ignoring a register response for robot {}", response.value().robot_id);
    return;
  }
  registered_ = true;
  loop_.cancel(register_timer_);
  register_timer_ = 0;
  register_backoff_ = {};
  spdlog::info("registered{}{}", response.value().message.empty() ? "" : ": ", response.value().message);
}

// ---- tasks -----------------------------------------------------------------------

void Agent::refuse_dispatch(const std::string& payload, const Error& error) {
  const std::string why = error.field.empty() ? error.message : error.field + ": " + error.message;
  spdlog::warn("refused a dispatch: {}", why);
  const auto uid = readable_task_uid(payload);
  if (!uid || tasks_.count(*uid) || store_->find(*uid)) return;  // a task we hold keeps its state
  Task& task = tasks_[*uid];
  task.uid = *uid;
  finish(task, failure("InvalidTask", "Refused", why));
}

void Agent::on_dispatch(const std::string& payload) {
  auto parsed = parse_dispatch(payload);
  if (!parsed) return refuse_dispatch(payload, parsed.error());
  const Dispatch& dispatch = parsed.value();
  const std::string& uid = dispatch.task.metadata.uid;
  auto known = tasks_.find(uid);
  if (known == tasks_.end() && recall_finished(uid)) known = tasks_.find(uid);

  if (dispatch.action == DispatchAction::remove) {
    if (known == tasks_.end()) {
      spdlog::info("delete for task {}, which this robot does not have; nothing to do", uid);
      return;
    }
    if (known->second.phase == Phase::finished) {
      if (known->second.last_report) report(known->second, *known->second.last_report);
      return;
    }
    spdlog::info("task {}: cancelled", uid);
    stop(known->second, StopReason::cancelled);
    return;
  }

  if (known != tasks_.end()) {
    // QoS 1 redelivery or a resend: never a second process.
    spdlog::info("task {}: dispatched again; re-reporting its state", uid);
    if (known->second.last_report) report(known->second, *known->second.last_report);
    prune_finished();  // a task recalled from the store goes back to it
    return;
  }
  create_task(dispatch);
}

Agent::Task* Agent::recall_finished(const std::string& uid) {
  const StoredTask* stored = store_->find(uid);
  if (!stored || stored->finished_order == 0) return nullptr;
  Task& task = tasks_[uid];
  task.uid = uid;
  task.phase = Phase::finished;
  task.last_seq = stored->last_seq;
  task.finished_order = stored->finished_order;
  if (auto last = parse_task_status(stored->last_report); last) {
    task.last_report = last.value();
    task.started_at = last.value().started_at;
    task.earlier_restarts = last.value().restart_count;
  }
  return &task;
}

Result<Agent::TaskUser> Agent::user_of(const TaskSpec& spec) const {
  // spec.user, else the configured task-user, else the agent's own user.
  const std::string name = spec.user.empty() ? config_.task_user : spec.user;
  const std::string whose = spec.user.empty() ? "task-user " : "spec.user ";
  TaskUser chosen{std::nullopt, geteuid()};
  if (name.empty()) return chosen;
  const passwd* user = getpwnam(name.c_str());
  if (!user) return Error{"user", whose + name + " does not exist on this robot"};
  if (geteuid() != 0 && user->pw_uid != geteuid())
    return Error{"user", whose + name + " needs the agent to run as root"};
  if (geteuid() == 0) chosen.run_as = RunAs{user->pw_uid, user->pw_gid, name};
  chosen.uid = user->pw_uid;
  return chosen;
}

void Agent::create_task(const Dispatch& dispatch) {
  const std::string& uid = dispatch.task.metadata.uid;
  Task& task = tasks_[uid];
  task.uid = uid;
  task.name = dispatch.task.metadata.name;
  task.spec = *dispatch.task.spec;
  task.dispatch = to_json_value(dispatch);
  task.restarts = RestartTracker(task.spec.restart_policy);

  auto refuse = [&](const std::string& reason, const std::string& message) {
    spdlog::warn("task {}: {}: {}", uid, reason, message);
    finish(task, failure(reason, "Refused", message));
  };
  if (shutting_down_) return refuse("AgentShutdown", "the agent is shutting down");
  if (!task.spec.target_robot.empty() && task.spec.target_robot != config_.robot_id) {
    return refuse("InvalidTask", "spec.targetRobot is " + task.spec.target_robot + ", not this robot");
  }
  if (task.spec.driver != TaskDriver::exec && task.spec.driver != TaskDriver::raw_exec) {
    return refuse("UnsupportedDriver",
                  "driver " + std::string(to_string(task.spec.driver)) + " is not supported; use exec or raw_exec");
  }
  auto user = user_of(task.spec);
  if (!user) return refuse("InvalidTask", user.error().message);
  task.run_as = user.value().run_as;
  const uid_t runs_as = user.value().uid;
  if (runs_as == 0 && !config_.allow_root_tasks) {
    return refuse("InvalidTask",
                  "this robot runs no task as root (allow-root-tasks is false); set spec.user to another user");
  }

  // Made afresh, never reused: what could not be removed of an earlier one
  // (a process of the task's user holding on to it) may hold links.
  remove_task_dir(uid);
  if (::mkdir(task_dir(uid).c_str(), 0700) != 0) {
    return refuse("StartFailed", "cannot create the task directory " + task_dir(uid) + ": " + std::strerror(errno) +
                                     (errno == EEXIST ? " (an earlier one could not be removed)" : ""));
  }
  // Private, and root's until the task starts (hand_over): nothing of the
  // task's user (another of its tasks, say) can put a link where the agent
  // writes its artifacts.
  if (::chmod(task_dir(uid).c_str(), 0700) != 0) {
    return refuse("StartFailed", "cannot make the task directory private: " + std::string(std::strerror(errno)));
  }
  // Nothing starts before the agent's memory of it is durable: a restart
  // must know the task, or a dispatch sent again would run it twice.
  store_->accept(uid, task.dispatch);
  task.phase = Phase::accepted;
  awaiting_commit_.push_back(uid);
  request_commit();
  spdlog::info("task {} ({}): accepted", uid, task.name);
}

void Agent::remove_task_dir(const std::string& uid) {
  // Taken back from the task's user first, so nothing of that user (a
  // process that outlived its task, another of its tasks) can swap a
  // directory for a link while root removes what is inside.
  const std::string dir = task_dir(uid);
  if (::lchown(dir.c_str(), geteuid(), getegid()) == 0) ::chmod(dir.c_str(), 0700);
  std::error_code error;
  fs::remove_all(dir, error);
}

bool Agent::hand_over(Task& task) {
  if (!task.run_as) return true;
  // Its directory and what the agent put in it become the task's user's
  // (lchown: a link is never followed).
  // The directory itself last: until then no process of the user can enter
  // it, so none can swap one of its directories for a link while root walks
  // them by path.
  std::error_code error;
  bool given = true;
  for (auto item = fs::recursive_directory_iterator(task_dir(task.uid), error);
       given && !error && item != fs::recursive_directory_iterator(); item.increment(error)) {
    given = ::lchown(item->path().c_str(), task.run_as->uid, task.run_as->gid) == 0;
  }
  given = given && !error && ::lchown(task_dir(task.uid).c_str(), task.run_as->uid, task.run_as->gid) == 0;
  if (given) return true;
  finish(task, failure("StartFailed", "StartFailed", "cannot give the task directory to " + task.run_as->name));
  return false;
}

void Agent::begin(Task& task) {
  const std::string uid = task.uid;
  if (task.spec.artifacts.empty()) {
    if (hand_over(task)) start_process(task);
    return;
  }
  task.phase = Phase::fetching;
  std::optional<ReadAs> read_as;
  if (task.run_as) read_as = ReadAs{task.run_as->uid, task.run_as->gid};
  artifacts_->fetch(task.spec.artifacts, task_dir(uid), read_as, [this, uid](Result<void> outcome) {
    loop_.post([this, uid, outcome = std::move(outcome)]() mutable { on_artifacts(uid, std::move(outcome)); });
  });
}

void Agent::on_artifacts(const std::string& uid, Result<void> outcome) {
  auto found = tasks_.find(uid);
  if (found == tasks_.end() || found->second.phase != Phase::fetching) return;
  Task& task = found->second;
  if (!outcome) {
    spdlog::warn("task {}: artifact download failed: {}", uid, outcome.error().message);
    return finish(task, failure("DownloadFailed", "DownloadFailed", outcome.error().message));
  }
  // Downloaded by root; the task's user must be able to read and replace them.
  if (hand_over(task)) start_process(task);
}

ProcessSpec Agent::process_spec(const Task& task) const {
  ProcessSpec spec;
  const std::string dir = task_dir(task.uid);
  spec.working_dir = dir;
  spec.stdout_path = task_file(task.uid, "stdout.log");
  spec.stderr_path = task_file(task.uid, "stderr.log");
  spec.append_output = task.restarts.restart_count() > 0;
  const char* path = std::getenv("PATH");
  spec.env["PATH"] = path ? path : "/usr/local/bin:/usr/bin:/bin";
  spec.env["HOME"] = dir;
  spec.env["K8S4R_TASK_UID"] = task.uid;
  spec.env["K8S4R_TASK_NAME"] = task.name;
  spec.env["K8S4R_TASK_DIR"] = dir;
  spec.env["K8S4R_ROBOT_ID"] = config_.robot_id;
  // Marks the process as this agent's, so a restarted agent finds orphans.
  spec.env["K8S4R_AGENT_WORK_DIR"] = config_.work_dir;
  for (const auto& [key, value] : task.spec.env) spec.env[key] = value;
  const ExecConfig& exec = *task.spec.exec_config;
  spec.command = exec.command;
  spec.args = exec.args;
  if (task.run_as) {
    // The shim switches to the user, groups first, in the task's process
    // before the exec: nothing else runs as root with the task's environment.
    ProcessSpec::User user{task.run_as->uid, task.run_as->gid, {}};
    int count = 64;
    std::vector<gid_t> groups(static_cast<std::size_t>(count));
    if (getgrouplist(task.run_as->name.c_str(), task.run_as->gid, groups.data(), &count) < 0) {
      groups.resize(static_cast<std::size_t>(count));
      getgrouplist(task.run_as->name.c_str(), task.run_as->gid, groups.data(), &count);
    }
    groups.resize(static_cast<std::size_t>(std::max(count, 0)));
    user.groups = std::move(groups);
    spec.user = std::move(user);
    spec.env["USER"] = spec.env["LOGNAME"] = task.run_as->name;
  }
  return spec;
}

void Agent::start_process(Task& task) {
  auto shim = shim_for(task);
  auto process =
      shim ? monitor_->launch(task.uid, process_spec(task), shim.value(), task.spec.timeout, kill_timeout_of(task))
           : Result<TaskProcess>(shim.error());
  if (!process) {
    if (shim && cgroups_) static_cast<void>(cgroups_->destroy(task.uid, 1s));
    spdlog::warn("task {}: cannot start: {}", task.uid, process.error().message);
    const std::string& field = process.error().field;
    const bool storage = field == "StorageFull" || field == "StorageError";
    return finish(
        task, failure(storage ? field : "StartFailed", storage ? "Refused" : "StartFailed", process.error().message));
  }
  task.phase = Phase::running;
  task.process = process.value();
  store_->set_process(task.uid, task.process);
  task.started_at = now_utc();
  spdlog::info("task {}: started pid {} (shim pid {}{})", task.uid, task.process.pgid, task.process.pid,
               task.process.cgroup.empty() ? "" : ", cgroup " + task.process.cgroup);
  TaskStatus status;
  status.state = TaskRunState::running;
  status.event = "Started";
  status.started_at = task.started_at;
  status.message = "started " + task.spec.exec_config->command;
  report(task, status);
  // The next task's shim, once this one's report is on its way.
  loop_.post([this] { prepare_spare_shim(); });
}

void Agent::prepare_spare_shim() {
  if (shutting_down_) return;
  if (auto ready = spares_->prepare(); !ready) {
    // The next task starts one itself, and says so if that fails too.
    spdlog::warn("cannot keep a task shim ready: {}", ready.error().message);
  }
}

void Agent::stop(Task& task, StopReason reason) {
  switch (task.phase) {
    case Phase::running:
      // Remembered here too: the process may already have exited, with its
      // exit on the way to the loop, and must then not be restarted.
      if (!task.stop_requested) task.stop_requested = reason;
      monitor_->stop_task(task.uid, reason);
      break;
    case Phase::accepted:
    case Phase::fetching:
      // A download runs on; its result is ignored, and nothing starts.
      finish(task, failure(to_string(reason), "Stopped", "stopped before it started"));
      break;
    case Phase::waiting_restart: {
      loop_.cancel(task.restart_timer);
      TaskStatus status = task.last_report.value_or(TaskStatus{});
      status.state = TaskRunState::failed;
      status.reason = to_string(reason);
      status.event = "Stopped";
      status.message = "stopped while waiting to restart";
      finish(task, status);
      break;
    }
    case Phase::finished:
      break;
  }
}

void Agent::on_exit(const TaskExit& exit) {
  auto found = tasks_.find(exit.task_uid);
  if (found == tasks_.end()) return;
  Task& task = found->second;
  if (!task.process.exit_file.empty()) exit_records_done_.push_back(task.process.exit_file);
  task.process = TaskProcess{};
  if (!exit.status_known) {
    // An agent before shims started it; or its shim was killed.
    const bool adopted = exit.unknown_why == "adopted";
    TaskStatus status = failure(exit.stopped_by ? to_string(*exit.stopped_by)
                                : adopted       ? "AgentRestarted"
                                                : "ExitUnknown",
                                "Exited",
                                adopted ? "ran on across an agent restart and ended; its exit code is unknown, since "
                                          "the restarted agent is not its parent"
                                        : "ended, and its exit code is unknown: " + exit.unknown_why);
    status.finished_at = now_utc();
    status.logs_tail = final_logs_tail(task.uid);
    spdlog::warn("task {}: {}", task.uid, status.message);
    return finish(task, status);
  }
  if (exit.leftovers > 0) {
    spdlog::info("task {}: {} process(es) it left behind were killed when it ended", task.uid, exit.leftovers);
  }

  TaskStatus status;
  status.finished_at = now_utc();
  status.exit_code = exit.status.exit_code;
  if (exit.status.signal != 0) status.signal = exit.status.signal;
  const std::optional<StopReason> stopped_by = exit.stopped_by ? exit.stopped_by : task.stop_requested;
  const RestartDecision decision = task.restarts.on_exit(exit.exited_at, exit.status, stopped_by);
  status.event = exit.status.signal == SIGKILL ? "Killed" : exit.status.signal != 0 ? "Terminated" : "Exited";
  status.message = decision.message;
  if (stopped_by == StopReason::timeout && task.spec.timeout) {
    status.message =
        exit.status.signal == SIGKILL
            ? "did not stop " + format_go_duration(kill_timeout_of(task)) + " after SIGTERM at its " +
                  format_go_duration(*task.spec.timeout) + " timeout; killed"
            : "stopped at its " + format_go_duration(*task.spec.timeout) + " timeout, " + describe(exit.status);
  } else if (stopped_by) {
    status.message = "stopped (" + to_string(*stopped_by) + "), " + describe(exit.status);
  }

  switch (decision.kind) {
    case RestartDecision::Kind::complete:
      status.state = TaskRunState::completed;
      break;
    case RestartDecision::Kind::fail:
      status.state = TaskRunState::failed;
      status.reason = decision.reason;
      break;
    case RestartDecision::Kind::restart: {
      status.state = TaskRunState::running;
      status.event = "Restarting";
      task.phase = Phase::waiting_restart;
      store_->set_process(task.uid, TaskProcess{});
      report(task, status);
      const std::string uid = task.uid;
      task.restart_timer = loop_.after(decision.delay, [this, uid] {
        auto again = tasks_.find(uid);
        if (again == tasks_.end() || again->second.phase != Phase::waiting_restart) return;
        again->second.restart_timer = 0;
        start_process(again->second);
      });
      return;
    }
  }
  status.logs_tail = final_logs_tail(task.uid);
  spdlog::info("task {}: {} ({})", task.uid, to_string(status.state), status.message);
  finish(task, status);
}

void Agent::finish(Task& task, TaskStatus status) {
  task.phase = Phase::finished;
  task.finished_order = ++last_finished_order_;
  task.process = TaskProcess{};
  store_->finish(task.uid, task.finished_order, run_clock());
  report(task, std::move(status));
  // Only the report is needed from now on; a dispatch can be 256 KiB.
  task.dispatch = nullptr;
  task.spec = TaskSpec{};
  prune_finished();
  if (shutting_down_) check_shutdown_progress();
}

// ---- reports -------------------------------------------------------------------

void Agent::request_commit(bool urgent) {
  if (commit_posted_) return;
  if (!urgent) {
    if (lazy_commit_timer_ == 0) {
      lazy_commit_timer_ = loop_.after(kLazyCommitDelay, [this] {
        lazy_commit_timer_ = 0;
        commit();
      });
    }
    return;
  }
  // Posted, so it runs after the work already waiting: every message of this
  // batch joins the same commit.
  commit_posted_ = true;
  loop_.post([this] { commit(); });
}

void Agent::commit() {
  commit_posted_ = false;
  loop_.cancel(lazy_commit_timer_);
  lazy_commit_timer_ = 0;
  auto committed = store_->commit();
  if (!committed) {
    if (!storage_failure_) {
      spdlog::error(
          "{}; no new task starts and reports go out from memory until it can be written (retrying every "
          "{}s)",
          committed.error().message, std::chrono::duration_cast<std::chrono::seconds>(kStorageRetry).count());
    }
    const auto before = storage_error();
    storage_failure_ = committed.error().message;
    if (storage_error() != before) tell_storage_state();
    lazy_commit_timer_ = loop_.after(kStorageRetry, [this] {
      lazy_commit_timer_ = 0;
      commit();
    });
  } else if (storage_failure_) {
    spdlog::info("the work dir is writable again; everything held in memory is stored");
    storage_failure_.reset();
    tell_storage_state();
  }
  if (committed) remove_exit_records(false);
  const auto waiting = std::move(awaiting_commit_);
  awaiting_commit_.clear();
  for (const std::string& uid : waiting) {
    auto found = tasks_.find(uid);
    if (found == tasks_.end() || found->second.phase != Phase::accepted) continue;
    if (committed) {
      begin(found->second);
      continue;
    }
    const std::string reason = store_->out_of_space() ? "StorageFull" : "StorageError";
    spdlog::warn("task {}: not started: {}", uid, committed.error().message);
    finish(found->second, failure(reason, "Refused",
                                  "not started: the agent cannot store its state (" + committed.error().message + ")"));
  }
  drain();
}

void Agent::report(Task& task, TaskStatus status) {
  status.task_uid = task.uid;
  status.robot_id = config_.robot_id;
  status.restart_count = task.earlier_restarts + task.restarts.restart_count();
  status.updated_at = now_utc();
  // seq is written down before any report carries it, so it grows across
  // restarts of the agent. One counter serves every task: a uid forgotten
  // after its retention and dispatched again still never reuses a seq.
  status.seq = task.last_seq = store_->last_seq() + 1;
  if (!status.started_at) status.started_at = task.started_at;
  task.last_report = status;
  auto queued =
      store_->report(task.uid, *status.seq, topics::task_status(config_.robot_id, task.uid).value(), encode(status));
  if (!queued) {
    spdlog::error("task {}: status seq {} ({}) NOT queued: {}", task.uid, *status.seq, to_string(status.state),
                  queued.error().message);
  }
  // Published once the commit holds it (seq must grow across restarts).
  request_commit();
}

void Agent::drain() {
  if (!connected_) return;
  const std::uint64_t generation = generation_;
  // While storage fails, reports not yet stored go out too: the broker is then
  // the only place they can be kept.
  for (const QueuedReport& queued : store_->oldest(kMaxInFlightReports, storage_failure_.has_value())) {
    if (in_flight_.count(queued.id)) continue;
    in_flight_.insert(queued.id);
    const std::uint64_t id = queued.id;
    link_->publish(queued.topic, queued.payload, 1, false, [this, generation, id](bool ok, const std::string& error) {
      loop_.post([this, generation, id, ok, error] {
        spdlog::debug("report {}: {} (connection {}, now {})", id, ok ? "acknowledged" : error, generation,
                      generation_);
        if (generation != generation_) return;  // a newer connection publishes it again
        in_flight_.erase(id);
        if (ok) {
          store_->acknowledge(id);
          request_commit(false);
          if (shutting_down_) check_shutdown_progress();
          drain();
          return;
        }
        spdlog::warn("publishing a status report failed: {}; will retry", error);
        if (retry_drain_timer_ == 0 && connected_) {
          retry_drain_timer_ = loop_.after(1s, [this] {
            retry_drain_timer_ = 0;
            drain();
          });
        }
      });
    });
  }
}

void Agent::prune_finished() {
  std::vector<std::pair<std::uint64_t, std::string>> finished;
  for (const auto& [uid, task] : tasks_) {
    if (task.phase == Phase::finished) finished.emplace_back(task.finished_order, uid);
  }
  if (finished.size() <= kRecentFinishedTasks) return;
  // Oldest first by the order they finished in (persisted), not by the wall
  // clock, which a robot without an RTC may not have set yet. The store still
  // remembers them.
  std::sort(finished.begin(), finished.end());
  for (std::size_t i = 0; i + kRecentFinishedTasks < finished.size(); ++i) {
    const std::string& uid = finished[i].second;
    tasks_.erase(uid);
    remove_task_dir(uid);
  }
}

std::chrono::nanoseconds Agent::run_clock() const {
  return run_clock_at_start_ + (std::chrono::steady_clock::now() - started_at_);
}

void Agent::schedule_retention() {
  // Often enough that a task is forgotten at most an eighth of the retention
  // late, and the run clock recorded that often while anything is held.
  const auto every =
      std::clamp(std::chrono::duration_cast<std::chrono::milliseconds>(config_.finished_task_retention / 8),
                 std::chrono::milliseconds(100), std::chrono::milliseconds(5min));
  retention_timer_ = loop_.after(every, [this] {
    retention_timer_ = 0;
    forget_expired();
  });
}

void Agent::forget_expired() {
  if (store_->finished_tasks() > 0) {
    const auto now = run_clock();
    const auto forgotten = store_->forget_finished(now - config_.finished_task_retention, config_.max_finished_tasks);
    for (const auto* uids : {&forgotten.expired, &forgotten.evicted}) {
      for (const std::string& uid : *uids) {
        tasks_.erase(uid);
        remove_task_dir(uid);
      }
    }
    if (!forgotten.expired.empty()) {
      spdlog::info("forgot {} task(s) finished more than {} ago", forgotten.expired.size(),
                   format_go_duration(config_.finished_task_retention));
    }
    if (!forgotten.evicted.empty()) {
      spdlog::warn(
          "forgot {} finished task(s) before their retention ended: more than max-finished-tasks ({}) finished "
          "within {}; a dispatch of one of them sent again would run it again",
          forgotten.evicted.size(), config_.max_finished_tasks, format_go_duration(config_.finished_task_retention));
    }
    store_->note_clock(now);
    request_commit(false);
  }
  if (!shutting_down_) schedule_retention();
}

// ---- restart of the agent -------------------------------------------------------

void Agent::restore() {
  // A copy: finishing a task below changes the store.
  const auto entries = store_->tasks();
  for (const auto& [uid, entry] : entries) last_finished_order_ = std::max(last_finished_order_, entry.finished_order);
  for (const auto& [uid, entry] : entries) {
    if (entry.finished_order != 0 && entry.finished_order + kRecentFinishedTasks <= last_finished_order_) {
      continue;  // not among the most recent: the store alone remembers it
    }
    Task& task = tasks_[uid];
    task.uid = uid;
    task.last_seq = entry.last_seq;
    task.dispatch = entry.dispatch;
    task.finished_order = entry.finished_order;
    if (!entry.last_report.empty()) {
      if (auto last = parse_task_status(entry.last_report); last) {
        task.last_report = last.value();
        task.started_at = last.value().started_at;
        task.earlier_restarts = last.value().restart_count;
      }
    }
    if (task.last_report && task.last_report->state != TaskRunState::running) {
      task.phase = Phase::finished;  // its final report is in the queue or delivered
      continue;
    }
    auto dispatch = parse_dispatch(entry.dispatch.dump());
    if (dispatch && dispatch.value().task.spec) {
      task.spec = *dispatch.value().task.spec;
      task.name = dispatch.value().task.metadata.name;
    }

    // What follows its end, as before the restart: its restart policy, and
    // the user it runs as (a user gone meanwhile means no more runs).
    task.restarts = RestartTracker(task.spec.restart_policy);
    if (auto user = user_of(task.spec); user) {
      task.run_as = user.value().run_as;
    } else {
      task.restarts = RestartTracker(std::nullopt);  // its user is gone: it cannot start again
    }

    const TaskProcess& process = entry.process;
    std::string unwatched;
    if (dispatch && process.pid > 0 && same_process_running(process.pid, process.start)) {
      // Watch it again until it ends; its timeout still counts from its start.
      auto started = daemon::EventLoop::Clock::now();
      if (task.started_at)
        started -= std::chrono::duration_cast<daemon::EventLoop::Clock::duration>(now_utc() - *task.started_at);
      auto adopted = monitor_->adopt(uid, process, started, task.spec.timeout, kill_timeout_of(task));
      if (adopted) {
        task.phase = Phase::running;
        task.process = process;
        if (process.exit_file.empty()) {
          spdlog::info("task {}: pid {} still runs; watching it again", uid, process.pid);
        } else {
          spdlog::info("task {}: pid {} still runs under its shim (pid {}); watching it again", uid, process.pgid,
                       process.pid);
        }
        continue;
      }
      // Alive, but it cannot be watched (no pidfd): it must not run on unseen.
      unwatched = adopted.error().message;
      kill_remains(process);
      if (!process.exit_file.empty()) kill(process.pid, SIGKILL);
    }
    if (unwatched.empty() && dispatch && process.pid > 0 && !process.exit_file.empty()) {
      restore_ended(task, entry);
      continue;
    }
    TaskStatus status = task.last_report.value_or(TaskStatus{});
    status.state = TaskRunState::failed;
    status.reason = "AgentRestarted";
    status.event = "AgentRestarted";
    status.exit_code.reset();
    status.signal.reset();
    status.finished_at = now_utc();
    status.message =
        !unwatched.empty() ? "the agent restarted and could not watch the task again (" + unwatched + "); it was killed"
        : process.pid > 0  ? "the agent restarted and the task's process (pid " + std::to_string(process.pid) +
                                ") had ended meanwhile; its exit code is unknown"
                          : "the agent restarted before the task's process started";
    status.logs_tail = final_logs_tail(uid);
    spdlog::warn("task {}: {}", uid, status.message);
    finish(task, status);
  }
}

void Agent::restore_ended(Task& task, const StoredTask& entry) {
  // As if the monitor had seen it end: the exit record says how, and the
  // restart policy decides what follows, as it would have without the restart.
  task.phase = Phase::running;
  task.process = entry.process;
  TaskExit exit;
  exit.task_uid = task.uid;
  exit.exited_at = std::chrono::steady_clock::now();
  const auto text = read_file(entry.process.exit_file);
  auto record = text ? shim::parse_exit_record(text.value()) : Result<shim::ExitRecord>(text.error());
  if (record) {
    exit.status = ExitStatus{record.value().exit_code, record.value().signal};
    exit.leftovers = record.value().leftovers;
    spdlog::info("task {}: ended while the agent was away ({})", task.uid, describe(exit.status));
  } else {
    // The shim is gone and said nothing: killed, or the machine went down.
    kill_remains(task.process);
    exit.status_known = false;
    exit.unknown_why = "its shim (pid " + std::to_string(entry.process.pid) + ") ended while the agent was away " +
                       "without recording it (" + entry.process.exit_file + ": " + record.error().to_string() + ")";
  }
  on_exit(exit);
}

void Agent::kill_orphans() {
  // What an earlier run of the agent left and no task it holds accounts for
  // (a leader that died, a task spawned just before a crash, a process that
  // left its task's process group) must not run on.
  std::set<std::string> running_cgroups;
  std::set<pid_t> ours;
  for (const auto& [uid, task] : tasks_) {
    if (task.phase != Phase::running || task.process.pid <= 0) continue;
    ours.insert(task.process.pid);
    ours.insert(task.process.pgid);
    if (!task.process.cgroup.empty()) running_cgroups.insert(task.process.cgroup);
  }
  if (cgroups_) {
    // Found by cgroup: nothing a task does to itself hides it from this.
    for (const std::string& name : cgroups_->list()) {
      if (running_cgroups.count(cgroups_->path_of(name))) continue;
      spdlog::warn("killing what is left in cgroup {} (task {}): left behind by an earlier run of the agent",
                   cgroups_->path_of(name), name);
      if (auto destroyed = cgroups_->destroy(name, 2s); !destroyed) spdlog::error("{}", destroyed.error().message);
    }
  }
  // Found by the mark in the environment: tasks of an agent that ran without
  // cgroups. (Shims carry no mark: started as spares, before their task was
  // known. A shim whose task is killed here records its end and exits.)
  const std::string mark = "K8S4R_AGENT_WORK_DIR=" + config_.work_dir;
  DIR* proc = opendir("/proc");
  if (!proc) return;
  while (dirent* item = readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(item->d_name, &end, 10);
    if (*end != '\0' || pid <= 0 || pid == getpid()) continue;
    const auto read = read_file("/proc/" + std::string(item->d_name) + "/environ");
    const std::string variables = read ? read.value() : std::string();
    bool marked = false;
    std::string task_uid;
    for (std::size_t start = 0; start < variables.size();) {
      std::size_t stop = variables.find('\0', start);
      if (stop == std::string::npos) stop = variables.size();
      const std::string_view variable(variables.data() + start, stop - start);
      if (variable == mark) marked = true;
      if (variable.rfind("K8S4R_TASK_UID=", 0) == 0) task_uid = std::string(variable.substr(15));
      start = stop + 1;
    }
    if (!marked) continue;
    const pid_t group = getpgid(static_cast<pid_t>(pid));
    if (ours.count(group) || ours.count(static_cast<pid_t>(pid))) continue;  // part of a task we watch again
    if (cgroups_ && cgroups_->holds(static_cast<int>(pid))) continue;        // the sweep above decided
    spdlog::warn("killing pid {} (task {}): left behind by an earlier run of the agent", pid, task_uid);
    kill(static_cast<pid_t>(pid), SIGKILL);
  }
  closedir(proc);
}

// ---- containment: the task shim and task cgroups ------------------------------------

void Agent::set_up_containment() {
  exits_dir_ = (fs::path(config_.work_dir) / "exits").string();
  std::error_code error;
  fs::create_directories(exits_dir_, error);
  if (error || ::chmod(exits_dir_.c_str(), 0700) != 0) {
    throw std::runtime_error("cannot make " + exits_dir_ + ": " + (error ? error.message() : std::strerror(errno)));
  }
  shim_path_ = config_.task_shim;
  if (shim_path_.empty()) {
    shim_path_ = (fs::read_symlink("/proc/self/exe", error).parent_path() / "k8s4r-task-shim").string();
  }
  if (::access(shim_path_.c_str(), X_OK) != 0) {
    throw std::runtime_error("the task shim " + shim_path_ + " is missing or not executable (" + std::strerror(errno) +
                             "): install k8s4r-task-shim next to k8s4r-agent, or set task-shim");
  }
  spares_ = std::make_unique<SpareShims>(shim_path_);
  if (config_.task_cgroups == "off") {
    spdlog::info("task-cgroups is off: tasks are contained by process group and their shim only");
    return;
  }
  auto parent = config_.cgroup_parent.empty() ? TaskCgroups::default_parent(config_.work_dir)
                                              : Result<std::string>(config_.cgroup_parent);
  auto cgroups = parent ? TaskCgroups::open(parent.value()) : Result<TaskCgroups>(parent.error());
  if (!cgroups) {
    if (config_.task_cgroups == "on") {
      throw std::runtime_error("task-cgroups is on, but " + cgroups.error().message);
    }
    spdlog::warn(
        "tasks get no cgroup ({}); a process a task starts in a new session outlives the task unless it "
        "stays below the task's shim. Under systemd, give the unit Delegate=yes",
        cgroups.error().message);
    return;
  }
  cgroups_.emplace(std::move(cgroups).value());
  spdlog::info("each task runs in a cgroup of its own in {}", cgroups_->parent());
}

Result<ShimSpec> Agent::shim_for(const Task& task) {
  ShimSpec shim;
  shim.path = shim_path_;
  shim.spares = spares_.get();
  // One record per run: a run's record may still wait for the commit that
  // makes its end durable when the next run starts.
  shim.exit_file = exits_dir_ + "/" + task.uid + "." +
                   std::to_string(task.earlier_restarts + task.restarts.restart_count()) + ".json";
  ::unlink(shim.exit_file.c_str());
  if (cgroups_) {
    auto cgroup = cgroups_->create(task.uid);
    if (!cgroup) return cgroup.error();
    shim.cgroup = cgroup.value();
  }
  return shim;
}

void Agent::remove_exit_records(bool at_start) {
  if (!at_start) {
    for (const std::string& path : exit_records_done_) ::unlink(path.c_str());
    exit_records_done_.clear();
    return;
  }
  // Those of running tasks are still to be read; those read while restoring
  // go after the next commit.
  std::set<std::string> needed(exit_records_done_.begin(), exit_records_done_.end());
  for (const auto& [uid, task] : tasks_) {
    if (!task.process.exit_file.empty()) needed.insert(task.process.exit_file);
  }
  std::error_code error;
  for (const auto& item : fs::directory_iterator(exits_dir_, error)) {
    if (!needed.count(item.path().string())) fs::remove(item.path(), error);
  }
}

// ---- shutdown ----------------------------------------------------------------------

void Agent::shutdown() {
  if (shutting_down_) return;
  shutting_down_ = true;
  inbox_.close();  // a callback waiting for room must not hold up the disconnect
  spdlog::info("shutting down: stopping {} task(s)", std::count_if(tasks_.begin(), tasks_.end(), [](const auto& item) {
                 return item.second.phase != Phase::finished;
               }));
  if (hooks_.notify) hooks_.notify("STOPPING=1");
  loop_.cancel(reconnect_timer_);
  reconnect_timer_ = 0;
  loop_.cancel(retention_timer_);
  retention_timer_ = 0;
  std::vector<std::string> active;
  for (auto& [uid, task] : tasks_) {
    if (task.phase != Phase::finished) active.push_back(uid);
  }
  for (const std::string& uid : active) stop(tasks_.at(uid), StopReason::shutdown);
  check_shutdown_progress();
}

void Agent::check_shutdown_progress() {
  if (!shutting_down_ || shutdown_finished_) return;
  for (const auto& [uid, task] : tasks_) {
    if (task.phase != Phase::finished) return;  // waiting for exits
  }
  if (!flush_deadline_) {
    flush_deadline_ = daemon::EventLoop::Clock::now() + kFlushTimeout;
    loop_.at(*flush_deadline_, [this] { finish_shutdown(); });
  }
  if (store_->queued_reports() == 0 || !connected_) finish_shutdown();
}

void Agent::finish_shutdown() {
  if (shutdown_finished_) return;
  shutdown_finished_ = true;
  // Acknowledgements not yet committed would only be resent after the
  // restart; committing them here spares the broker that. The run clock too,
  // so the time this agent ran counts towards the retention.
  if (store_->finished_tasks() > 0) store_->note_clock(run_clock());
  if (auto committed = store_->commit(); !committed) spdlog::error("{}", committed.error().message);
  if (store_->queued_reports() > 0) {
    spdlog::warn("{} status report(s) not yet acknowledged; they stay queued on disk for the next start",
                 store_->queued_reports());
  }
  if (!connected_) {
    loop_.stop();
    return;
  }
  // A clean shutdown says offline itself; the broker then drops the will.
  publish_presence(false, [this](bool, const std::string&) {
    loop_.post([this] {
      link_->disconnect(2s);
      spdlog::info("disconnected; bye");
      loop_.stop();
    });
  });
  loop_.after(3s, [this] {
    link_->disconnect(1s);
    loop_.stop();
  });
}

}  // namespace k8s4r::agent
