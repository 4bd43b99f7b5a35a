// mqtt::Link over Paho MQTT C++ (async_client, MQTT 5), connecting with
// make_connect_options.
//
// Paho's C client calls the message callback with its own mutex held, the
// one every connect, subscribe and publish takes. A daemon whose callback
// waits for room in its inbox (backpressure) would then deadlock with its own
// loop publishing. So the link never calls Paho from the caller's thread:
// connect, subscribe, publish and disconnect go, in order (subscriptions
// ahead of publishes still queued), to one command thread of the link's, and
// the caller never waits (but in disconnect()).
#include "k8s4r/mqtt/connect_options.h"
#include "k8s4r/mqtt/link.h"
#include "k8s4r/mqtt/tcp_nodelay.h"
#include "k8s4r/mqtt/tls_check.h"

#include <mqtt/async_client.h>

#include <condition_variable>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>

namespace k8s4r::mqtt {

namespace {

constexpr std::chrono::milliseconds kRoomPoll{5};
constexpr std::chrono::milliseconds kMaxWaitForRoom{30'000};
constexpr std::chrono::milliseconds kTlsDiagnosisTimeout{3'000};

// The MQTT 5 reason codes a daemon meets when the broker says no, in words.
std::string reason_words(int code) {
  switch (code) {
    case 128:
      return "unspecified error";
    case 133:
      return "client identifier not valid";
    case 134:
      return "bad user name or password";
    case 135:
      return "not authorized";
    case 136:
      return "server unavailable";
    case 137:
      return "server busy";
    case 138:
      return "banned";
    case 142:
      return "session taken over (another client connected with this client id)";
    case 151:
      return "quota exceeded";
    case 152:
      return "administrative action (the client was removed or disabled)";
    case 156:
      return "use another server";
    case 159:
      return "connection rate exceeded";
    default:
      return "";
  }
}

std::string reason_text(int code) {
  const std::string words = reason_words(code);
  return "reason code " + std::to_string(code) + (words.empty() ? "" : " (" + words + ")");
}

class PahoLink final : public Link, private ::mqtt::iaction_listener {
 public:
  PahoLink(const LinkSettings& settings, LinkEvents events)
      : settings_(settings),
        events_(std::move(events)),
        // No Paho persistence: what must survive a restart, each daemon keeps
        // itself (the agent's report queue, the bridge's resources).
        client_(settings.broker_url, settings.client_id, ::mqtt::create_options(MQTTVERSION_5), nullptr) {
    client_.set_connected_handler([this](const std::string&) {
      disable_nagle_towards(settings_.broker_url);
      if (events_.connected) events_.connected();
    });
    client_.set_connection_lost_handler([this](const std::string& cause) {
      if (events_.connection_lost) events_.connection_lost(cause.empty() ? "connection lost" : cause);
    });
    client_.set_disconnected_handler([this](const ::mqtt::properties&, ::mqtt::ReasonCode code) {
      if (events_.connection_lost) {
        events_.connection_lost("the broker disconnected us, " + reason_text(static_cast<int>(code)));
      }
    });
    client_.set_message_callback([this](::mqtt::const_message_ptr message) {
      if (events_.message) events_.message(message->get_topic(), message->get_payload_str());
    });
    commander_ = std::thread([this] { run_commands(); });
  }

  ~PahoLink() override {
    // No callback may run into a half-destroyed link: Paho's C callbacks are
    // switched off first, and the completions still pending are dropped
    // under the lock that finish() takes. Paho refuses to switch them off
    // while a connect is in progress (a TLS handshake with a broker that does
    // not answer): then they stay on until the client is destroyed, which
    // they survive (events_ and mutex_ outlive client_), and a shutdown in
    // that state ends cleanly instead of throwing out of a destructor.
    try {
      client_.disable_callbacks();
    } catch (const ::mqtt::exception&) {
    }
    {
      std::lock_guard lock(commands_mutex_);
      stopping_ = true;
      commands_.clear();
      controls_.clear();
    }
    commands_ready_.notify_one();
    commander_.join();
    std::lock_guard lock(mutex_);
    closed_ = true;
    pending_.clear();
  }

  void connect() override {
    const std::uint64_t id = remember([this](bool ok, const std::string& error) {
      if (!ok && events_.connect_failed) events_.connect_failed(error);
    });
    command(id, [this, id] { client_.connect(make_connect_options(settings_), context_of(id), *this); });
  }

  void subscribe(const std::vector<Subscription>& subscriptions, Completion done) override {
    const std::uint64_t id = remember(std::move(done));
    auto topics = std::make_shared<::mqtt::string_collection>();
    ::mqtt::iasync_client::qos_collection qoses;
    for (const Subscription& subscription : subscriptions) {
      topics->push_back(subscription.filter);
      qoses.push_back(subscription.qos);
    }
    command(
        id, [this, id, topics, qoses] { client_.subscribe(topics, qoses, context_of(id), *this); }, Lane::control);
  }

  void unsubscribe(const std::vector<std::string>& filters, Completion done) override {
    const std::uint64_t id = remember(std::move(done));
    auto topics = std::make_shared<::mqtt::string_collection>(filters);
    command(
        id, [this, id, topics] { client_.unsubscribe(topics, context_of(id), *this); }, Lane::control);
  }

  void publish(const std::string& topic, const std::string& payload, int qos, bool retain, Completion done) override {
    const std::uint64_t id = remember(std::move(done));
    command(id, [this, id, topic, payload, qos, retain] {
      client_.publish(topic, payload.data(), payload.size(), qos, retain, context_of(id), *this);
    });
  }

  void disconnect(std::chrono::milliseconds timeout) override {
    // After what was handed over before it has reached Paho (Paho does not
    // wait for its delivery: a daemon waits for the completions it needs).
    auto done = std::make_shared<std::promise<void>>();
    auto finished = done->get_future();
    command(0, [this, timeout, done] {
      try {
        client_.disconnect(static_cast<int>(timeout.count()))->wait_for(timeout + std::chrono::seconds(1));
      } catch (const ::mqtt::exception&) {
        // Not connected: nothing to close.
      }
      done->set_value();
    });
    finished.wait_for(timeout + std::chrono::seconds(2));
  }

  LinkBacklog backlog() const override {
    LinkBacklog counts;
    {
      std::lock_guard lock(commands_mutex_);
      counts.queued = commands_.size() + controls_.size();
    }
    std::lock_guard lock(mutex_);
    counts.unacknowledged = pending_.size();
    return counts;
  }

 private:
  // Subscriptions go ahead of queued publishes (in their own order): a
  // daemon with thousands of publishes queued (a registration storm) must
  // not wait for all of them to be acknowledged before it hears a robot.
  // Nothing depends on a subscription waiting for an earlier publish.
  enum class Lane { ordered, control };

  // Hands a call into Paho to the command thread; a Paho exception fails the
  // completion `id` (0: none).
  void command(std::uint64_t id, std::function<void()> call, Lane lane = Lane::ordered) {
    {
      std::lock_guard lock(commands_mutex_);
      if (stopping_) return;
      (lane == Lane::control ? controls_ : commands_).push_back([this, id, call = std::move(call)] {
        // Paho holds at most 100 publishes and refuses more; a burst waits
        // here for room (the commands after it too, so order holds) instead
        // of failing.
        for (auto waited = std::chrono::milliseconds(0);; waited += kRoomPoll) {
          try {
            call();
            return;
          } catch (const ::mqtt::exception& error) {
            const int code = error.get_return_code();
            const bool full = code == MQTTASYNC_MAX_BUFFERED_MESSAGES || code == MQTTASYNC_MAX_MESSAGES_INFLIGHT;
            if (!full || waited >= kMaxWaitForRoom || !pause(kRoomPoll)) {
              if (id != 0) fail(id, error.what());
              return;
            }
          }
        }
      });
    }
    commands_ready_.notify_one();
  }

  // Waits `how_long` unless the link is closing; false when it is.
  bool pause(std::chrono::milliseconds how_long) {
    std::unique_lock lock(commands_mutex_);
    return !commands_ready_.wait_for(lock, how_long, [this] { return stopping_; });
  }

  void run_commands() {
    std::unique_lock lock(commands_mutex_);
    while (true) {
      commands_ready_.wait(lock, [this] { return stopping_ || !commands_.empty() || !controls_.empty(); });
      if (stopping_) return;
      auto& lane = controls_.empty() ? commands_ : controls_;
      auto next = std::move(lane.front());
      lane.pop_front();
      lock.unlock();
      next();
      lock.lock();
    }
  }

  static void* context_of(std::uint64_t id) { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(id)); }

  std::uint64_t remember(Completion done) {
    std::lock_guard lock(mutex_);
    const std::uint64_t id = next_id_++;
    pending_.emplace(id, std::move(done));
    return id;
  }

  void finish(std::uint64_t id, bool ok, const std::string& error) {
    Completion done;
    {
      std::lock_guard lock(mutex_);
      if (closed_) return;
      auto found = pending_.find(id);
      if (found == pending_.end()) return;
      done = std::move(found->second);
      pending_.erase(found);
    }
    if (done) done(ok, error);
  }
  void fail(std::uint64_t id, const std::string& error) { finish(id, false, error); }

  static std::uint64_t id_of(const ::mqtt::token& token) {
    return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(token.get_user_context()));
  }
  void on_success(const ::mqtt::token& token) override {
    // Paho C calls a SUBSCRIBE of several filters a success whatever the
    // broker granted: a filter it refused (an ACL) fails the subscription
    // here instead of leaving the daemon deaf to it.
    if (token.get_type() == ::mqtt::token::SUBSCRIBE) {
      const ::mqtt::subscribe_response response = token.get_subscribe_response();  // a copy: keep it
      const std::vector<::mqtt::ReasonCode> codes = response.get_reason_codes();
      const auto topics = token.get_topics();
      for (std::size_t i = 0; i < codes.size(); ++i) {
        const int code = static_cast<int>(codes[i]);
        if (code < 0x80) continue;
        const std::string filter = topics && i < topics->size() ? (*topics)[i] : "a filter";
        return finish(id_of(token), false,
                      "the broker refused the subscription to " + filter + ", " + reason_text(code));
      }
    }
    finish(id_of(token), true, "");
  }
  void on_failure(const ::mqtt::token& token) override {
    // A CONNACK or PUBACK refusal comes as its MQTT 5 reason code (>= 128).
    const int code = token.get_return_code();
    std::string why =
        code >= 128 ? "refused by the broker, " + reason_text(code) : "failed, return code " + std::to_string(code);
    if (token.get_reason_code() != ::mqtt::ReasonCode::SUCCESS && static_cast<int>(token.get_reason_code()) != code)
      why += ", " + reason_text(static_cast<int>(token.get_reason_code()));
    const std::uint64_t id = id_of(token);
    if (token.get_type() == ::mqtt::token::CONNECT && token.get_return_code() == MQTTASYNC_FAILURE &&
        is_tls_url(settings_.broker_url)) {
      // Paho's "TCP/TLS connect failure" says nothing of the cause: a
      // handshake of our own does, off Paho's thread.
      command(0, [this, id, why] {
        const std::string cause = diagnose_tls(
            settings_.broker_url, {settings_.ca_file, settings_.cert_file, settings_.key_file}, kTlsDiagnosisTimeout);
        finish(id, false, cause.empty() ? why : why + ": " + cause);
      });
      return;
    }
    finish(id, false, why);
  }

  // Declared before client_, so they outlive Paho's threads, which the
  // client's destructor stops.
  LinkSettings settings_;
  LinkEvents events_;
  mutable std::mutex mutex_;
  bool closed_ = false;
  std::uint64_t next_id_ = 1;
  std::map<std::uint64_t, Completion> pending_;
  mutable std::mutex commands_mutex_;
  std::condition_variable commands_ready_;
  std::deque<std::function<void()>> commands_, controls_;
  bool stopping_ = false;
  ::mqtt::async_client client_;
  std::thread commander_;  // started last, joined first
};

}  // namespace

std::unique_ptr<Link> make_paho_link(const LinkSettings& settings, LinkEvents events) {
  try {
    return std::make_unique<PahoLink>(settings, std::move(events));
  } catch (const ::mqtt::exception& error) {
    throw std::invalid_argument("MQTT client for " + settings.broker_url + ": " + error.what());
  }
}

}  // namespace k8s4r::mqtt
