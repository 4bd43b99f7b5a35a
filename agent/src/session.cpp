#include "session.h"

#include "k8s4r/agent/device_info.h"
#include "k8s4r/common/topics.h"

#include <spdlog/spdlog.h>

#include <random>
#include <utility>

namespace k8s4r::agent {

using namespace std::chrono_literals;

#ifndef K8S4R_VERSION
#define K8S4R_VERSION "0.0.0"
#endif

Session::Session(const AgentConfig& config, daemon::EventLoop& loop, mqtt::Link& link, RobotReport report,
                 SessionListener listener)
    : config_(config), loop_(loop), link_(link), report_(std::move(report)), listener_(std::move(listener)) {}

Session::~Session() {
  for (auto timer : {reconnect_timer_, register_timer_, heartbeat_timer_}) loop_.cancel(timer);
}

std::chrono::milliseconds Session::next_backoff(std::chrono::milliseconds& backoff, std::chrono::milliseconds first,
                                                std::chrono::milliseconds cap) {
  // Doubles up to `cap`, with ±20% jitter so a fleet that lost its broker
  // together does not come back in lockstep.
  backoff = backoff.count() == 0 ? first : std::min(cap, backoff * 2);
  static thread_local std::mt19937 random{std::random_device{}()};
  std::uniform_real_distribution<double> jitter(0.8, 1.2);
  return std::chrono::milliseconds(static_cast<long long>(static_cast<double>(backoff.count()) * jitter(random)));
}

void Session::connect() {
  reconnect_timer_ = 0;
  if (stopped_) return;
  spdlog::info("connecting to {}", config_.broker_url);
  link_.connect();
}

void Session::schedule_reconnect() {
  if (stopped_ || reconnect_timer_ != 0) return;
  const auto wait = next_backoff(reconnect_backoff_, 500ms, kMaxReconnectBackoff);
  reconnect_timer_ = loop_.after(wait, [this] { connect(); });
}

void Session::on_connect_failed(const std::string& cause) {
  spdlog::warn("cannot connect to {}: {}", config_.broker_url, cause);
  schedule_reconnect();
}

void Session::on_connection_lost(const std::string& cause) {
  if (!connected_) return;
  spdlog::warn("lost the broker: {}", cause);
  connected_ = false;
  registered_ = false;
  for (auto* timer : {&register_timer_, &heartbeat_timer_}) {
    loop_.cancel(*timer);
    *timer = 0;
  }
  if (listener_.down) listener_.down();
  schedule_reconnect();
}

void Session::on_connected() {
  connected_ = true;
  ++generation_;
  reconnect_backoff_ = {};
  register_backoff_ = {};
  connected_at_ = loop_.clock().wall();
  spdlog::info("connected to {}", config_.broker_url);
  if (config_.token.empty() && config_.cert_file.empty() && !std::exchange(warned_anonymous_, true)) {
    spdlog::warn(
        "connected with neither a token nor a certificate: this broker lets anonymous clients in, and any of them "
        "can publish as this robot; give the agent --token-file and the broker a login per robot (docs/security.md)");
  }
  subscribe();
  publish_presence(true, nullptr);
  send_register();
  send_heartbeat();
  if (listener_.up) listener_.up();
}

void Session::subscribe() {
  const std::uint64_t generation = generation_;
  // Subscriptions survive in a persistent session, but not a broker restart
  // without persistence; subscribing again is harmless.
  std::vector<mqtt::Subscription> subscriptions{{topics::response(config_.robot_id).value(), 1},
                                                {topics::dispatch(config_.robot_id).value(), 1}};
  // A Go K8s4r server (legacy-topics) sends no acknowledgements.
  if (!config_.legacy_topics) {
    subscriptions.push_back({topics::acks(config_.robot_id).value(), 1});
    subscriptions.push_back({topics::artifacts(config_.robot_id).value(), 1});
    subscriptions.push_back({topics::log_request(config_.robot_id).value(), 1});
  }
  link_.subscribe(subscriptions, [this, generation](bool ok, const std::string& error) {
    loop_.post([this, generation, ok, error] {
      if (generation != generation_ || !connected_) return;
      if (!ok) {
        spdlog::error("subscribing to this robot's topics failed: {}; trying again in 5s", error);
        loop_.after(5s, [this, generation] {
          if (generation == generation_ && connected_) subscribe();
        });
        return;
      }
      if (!ready_notified_ && listener_.notify) listener_.notify("READY=1\nSTATUS=connected");
      ready_notified_ = true;
    });
  });
}

void Session::publish_presence(bool online, mqtt::Completion done) {
  Presence presence{config_.robot_id, online, connected_at_, online ? report_.storage_error() : std::nullopt};
  link_.publish(topics::presence(config_.robot_id).value(), encode(presence), 1, true,
                done ? std::move(done) : mqtt::Completion([](bool, const std::string&) {}));
}

void Session::send_register() {
  register_timer_ = 0;
  if (!connected_ || registered_ || stopped_) return;
  Register message;
  message.robot_id = config_.robot_id;
  message.token = config_.token;
  message.agent_version = K8S4R_VERSION;
  message.labels = config_.labels;
  message.device_info = collect_device_info();
  message.timestamp = loop_.clock().wall();
  message.running_tasks = report_.held_tasks();
  if (report_.knowledge) message.knows = report_.knowledge();
  const std::string topic =
      config_.legacy_topics ? std::string(topics::kRegister) : topics::robot_register(config_.robot_id).value();
  link_.publish(topic, encode(message), 1, false, [](bool ok, const std::string& error) {
    if (!ok) spdlog::warn("publishing register failed: {}", error);
  });
  // Until a RegisterResponse arrives, ask again with backoff.
  const auto wait = next_backoff(register_backoff_, 2s, kMaxRegisterBackoff);
  register_timer_ = loop_.after(wait, [this] { send_register(); });
}

void Session::send_heartbeat() {
  loop_.cancel(heartbeat_timer_);
  heartbeat_timer_ = 0;
  if (!connected_ || stopped_) return;
  Heartbeat beat;
  beat.robot_id = config_.robot_id;
  // No token: it is the robot's login, checked by the broker at connect, and a
  // heartbeat is what operators tail; the manager judges the register's.
  beat.timestamp = loop_.clock().wall();
  beat.running_tasks = report_.running_tasks();
  if (report_.ended_tasks) beat.ended_tasks = report_.ended_tasks(beat.ended_tasks_truncated);
  beat.storage_error = report_.storage_error();
  if (report_.knowledge) beat.knows = report_.knowledge();
  // Not to a Go K8s4r server: it acknowledges nothing, so the list would go
  // in every beat.
  if (report_.artifacts && !config_.legacy_topics) {
    beat.artifacts = report_.artifacts();
    if (beat.artifacts && beat.artifacts->fingerprint == artifacts_acknowledged_) {
      beat.artifacts->held.reset();  // the bridge has it
      beat.artifacts->truncated = false;
    } else if (beat.artifacts) {
      artifacts_sent_[*beat.timestamp] = beat.artifacts->fingerprint;
      while (artifacts_sent_.size() > 8) artifacts_sent_.erase(artifacts_sent_.begin());
    }
  }
  const std::string topic =
      config_.legacy_topics ? std::string(topics::kHeartbeat) : topics::robot_heartbeat(config_.robot_id).value();
  const SteadyTime sent = loop_.clock().steady();
  const std::uint64_t number = ++beats_made_;
  beats_sent_[number] = BeatSent{*beat.timestamp, sent};
  while (beats_sent_.size() > 32) beats_sent_.erase(beats_sent_.begin());
  link_.publish(topic, encode(beat), 1, false,
                [this, generation = generation_, sent, number](bool ok, const std::string& error) {
                  if (!ok) spdlog::warn("publishing heartbeat failed: {}", error);
                  // A Go K8s4r server sends no Ack: the broker taking a
                  // heartbeat is all the contact there is.
                  if (ok && config_.legacy_topics) {
                    loop_.post([this, generation, sent, number] {
                      if (generation == generation_ && listener_.contact) listener_.contact(sent, number);
                    });
                  }
                });
  heartbeat_sent_ = sent;
  heartbeat_due_ = heartbeat_sent_ + std::chrono::duration_cast<SteadyTime::duration>(heartbeat_every());
  heartbeat_timer_ = loop_.at(heartbeat_due_, [this] { send_heartbeat(); });
}

std::chrono::nanoseconds Session::heartbeat_every() const {
  std::chrono::nanoseconds every = config_.heartbeat_interval;
  if (report_.shortest_stop_window) {
    if (const auto window = report_.shortest_stop_window(); window && *window > std::chrono::nanoseconds::zero())
      every = std::min(every, std::max<std::chrono::nanoseconds>(1s, *window / 4));
  }
  return every;
}

void Session::ask_for_contact(std::uint64_t beat) {
  asked_beat_ = std::max(asked_beat_, beat);
  if (ask_posted_) return;
  // Once per turn of the loop: a burst of tasks held together is one
  // heartbeat, not one each.
  ask_posted_ = true;
  loop_.post([this] {
    ask_posted_ = false;
    if (connected_ && !stopped_ && beats_made_ < asked_beat_) send_heartbeat();
  });
}

void Session::heartbeat_cadence_changed() {
  if (!connected_ || stopped_ || heartbeat_timer_ == 0) return;
  const SteadyTime due = heartbeat_sent_ + std::chrono::duration_cast<SteadyTime::duration>(heartbeat_every());
  if (due >= heartbeat_due_) return;
  loop_.cancel(heartbeat_timer_);
  heartbeat_due_ = due;
  heartbeat_timer_ = loop_.at(due, [this] { send_heartbeat(); });
}

void Session::tell_storage_state() {
  // At once, not at the next heartbeat: the bridge writes the Robot's
  // StorageReady condition, and an operator tailing MQTT sees the presence.
  if (!connected_ || stopped_) return;
  send_heartbeat();
  publish_presence(true, nullptr);
}

void Session::on_message(const std::string& topic, const std::string& payload) {
  auto parsed = topics::parse_topic(topic);
  if (!parsed || parsed.value().robot_id != config_.robot_id) {
    spdlog::warn("ignoring a message on {}: not one of this robot's topics", topic);
    return;
  }
  switch (parsed.value().kind) {
    case topics::TopicKind::response:
      on_register_response(payload);
      break;
    case topics::TopicKind::artifacts:
      if (listener_.prefetch) listener_.prefetch(payload);
      break;
    case topics::TopicKind::dispatch:
      if (listener_.dispatch) listener_.dispatch(payload);
      break;
    case topics::TopicKind::log_request:
      if (listener_.log_request) listener_.log_request(payload);
      break;
    case topics::TopicKind::acks: {
      auto ack = parse_ack(payload);
      if (!ack || ack.value().robot_id != config_.robot_id) {
        spdlog::warn("ignoring an acknowledgement: {}",
                     ack ? "it names robot " + ack.value().robot_id : ack.error().to_string());
        return;
      }
      if (ack.value().heartbeat) {
        // The oldest with that timestamp (a clock stepped back may repeat
        // one): it proves the least. None once the session stopped (a
        // hand-over): what is held waits for the next agent.
        for (auto beat = beats_sent_.begin(); beat != beats_sent_.end() && !stopped_; ++beat) {
          if (beat->second.timestamp != *ack.value().heartbeat) continue;
          const std::uint64_t number = beat->first;
          const SteadyTime sent = beat->second.sent;
          beats_sent_.erase(beats_sent_.begin(), std::next(beat));
          if (listener_.contact) listener_.contact(sent, number);
          break;
        }
        if (auto carried = artifacts_sent_.find(*ack.value().heartbeat); carried != artifacts_sent_.end()) {
          artifacts_acknowledged_ = carried->second;
          artifacts_sent_.erase(artifacts_sent_.begin(), std::next(carried));
        }
      }
      if (ack.value().resend_artifacts) artifacts_acknowledged_.clear();  // the next beat carries the list
      if (listener_.ack) listener_.ack(ack.value());
      break;
    }
    default:
      spdlog::warn("ignoring a message on {}", topic);
  }
}

void Session::on_register_response(const std::string& payload) {
  auto response = parse_register_response(payload);
  if (!response) {
    spdlog::warn("ignoring a register response: {}: {}", response.error().field, response.error().message);
    return;
  }
  if (!response.value().robot_id.empty() && response.value().robot_id != config_.robot_id) {
    spdlog::warn("ignoring a register response for robot {}", response.value().robot_id);
    return;
  }
  if (!response.value().success) {
    spdlog::warn("the bridge refused registration: {}; trying again", response.value().message);
    if (registered_) {
      // Registered before, and the bridge no longer knows this robot (its
      // Robot was deleted, say): register again now, then with backoff.
      registered_ = false;
      register_backoff_ = {};
      send_register();
    }
    return;  // the register timer asks again, with backoff
  }
  registered_ = true;
  loop_.cancel(register_timer_);
  register_timer_ = 0;
  register_backoff_ = {};
  spdlog::info("registered{}{}", response.value().message.empty() ? "" : ": ", response.value().message);
  if (listener_.registered) listener_.registered();
}

void Session::stop() {
  stopped_ = true;
  for (auto* timer : {&reconnect_timer_, &register_timer_, &heartbeat_timer_}) {
    loop_.cancel(*timer);
    *timer = 0;
  }
}

void Session::say_offline(std::function<void()> done) {
  // A clean shutdown says offline itself; the broker then drops the will.
  publish_presence(false, [this, done = std::move(done)](bool, const std::string&) { loop_.post(done); });
}

}  // namespace k8s4r::agent
