// The Paho link against a real Mosquitto: the Link contract that a daemon's
// backpressure depends on.
#include "k8s4r/mqtt/link.h"

#include "k8s4r/testing/temp_dir.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <atomic>
#include <condition_variable>
#include <fstream>
#include <future>
#include <mutex>
#include <thread>

namespace k8s4r::mqtt {
namespace {

using namespace std::chrono_literals;

int free_port() {
  const int probe = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(probe, reinterpret_cast<sockaddr*>(&address), sizeof address);
  socklen_t length = sizeof address;
  ::getsockname(probe, reinterpret_cast<sockaddr*>(&address), &length);
  ::close(probe);
  return ntohs(address.sin_port);
}

// Mosquitto on a free loopback port, killed and reaped with the object.
class Broker {
 public:
  explicit Broker(const std::filesystem::path& dir) : port_(free_port()) {
    const auto conf = dir / "mosquitto.conf";
    std::ofstream(conf) << "listener " << port_ << " 127.0.0.1\nallow_anonymous true\n";
    pid_ = ::fork();
    if (pid_ == 0) {
      const int null = ::open("/dev/null", O_WRONLY);
      ::dup2(null, 1);
      ::dup2(null, 2);
      ::execlp("mosquitto", "mosquitto", "-c", conf.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    // Listening before a client tries: a refused first attempt costs Paho seconds.
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (std::chrono::steady_clock::now() < deadline) {
      const int probe = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in address{};
      address.sin_family = AF_INET;
      address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      address.sin_port = htons(static_cast<std::uint16_t>(port_));
      const bool up = ::connect(probe, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
      ::close(probe);
      if (up) break;
      std::this_thread::sleep_for(10ms);
    }
  }
  ~Broker() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  std::string url() const { return "tcp://127.0.0.1:" + std::to_string(port_); }

 private:
  int port_;
  pid_t pid_ = -1;
};

// A link whose events are recorded; connect() retries until the broker is up.
struct Client {
  std::mutex mutex;
  std::condition_variable changed;
  bool connected = false;
  std::unique_ptr<Link> link;

  Client(const std::string& url, const std::string& id, std::function<void(const std::string&)> on_message) {
    LinkEvents events;
    events.connected = [this] {
      std::lock_guard lock(mutex);
      connected = true;
      changed.notify_all();
    };
    events.connect_failed = [this](const std::string&) { changed.notify_all(); };
    events.message = [on_message = std::move(on_message)](const std::string&, const std::string& payload) {
      on_message(payload);
    };
    link = make_paho_link({url, id}, std::move(events));
  }
  bool connect() {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    std::unique_lock lock(mutex);
    while (!connected && std::chrono::steady_clock::now() < deadline) {
      lock.unlock();
      link->connect();
      lock.lock();
      changed.wait_for(lock, 500ms, [this] { return connected; });
    }
    return connected;
  }
};

// Future a Completion resolves.
std::future<bool> completion(Completion& done) {
  auto promise = std::make_shared<std::promise<bool>>();
  done = [promise](bool ok, const std::string&) { promise->set_value(ok); };
  return promise->get_future();
}

// What a client received, in order, to wait on.
struct Received {
  std::mutex mutex;
  std::condition_variable arrived;
  std::vector<std::string> payloads;
  std::function<void(const std::string&)> recorder() {
    return [this](const std::string& payload) {
      std::lock_guard lock(mutex);
      payloads.push_back(payload);
      arrived.notify_all();
    };
  }
  // Waits until `count` arrived (at most 10 s); what arrived.
  std::vector<std::string> wait_for(std::size_t count) {
    std::unique_lock lock(mutex);
    arrived.wait_for(lock, 10s, [&] { return payloads.size() >= count; });
    return payloads;
  }
};

// Subscribes and waits for the broker's answer.
bool subscribe(Client& client, const std::vector<Subscription>& subscriptions) {
  Completion done;
  auto subscribed = completion(done);
  client.link->subscribe(subscriptions, std::move(done));
  return subscribed.wait_for(10s) == std::future_status::ready && subscribed.get();
}

TEST(PahoLink, PublishingNeverWaitsForAMessageCallbackThatIsWaiting) {
  // Paho calls the message callback holding the mutex every publish takes; a
  // daemon's inbox makes that callback wait for the daemon's loop. Were
  // publish to call Paho directly, the loop publishing would wait for the
  // callback and the callback for the loop: a deadlock, seen in the agent
  // with a burst of 1,000 dispatches.
  testing::TempDir dir;
  Broker broker(dir.path());
  std::promise<void> entered;
  std::atomic<bool> entered_once{false};
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  Client receiver(broker.url(), "receiver", [&](const std::string&) {
    if (!entered_once.exchange(true)) entered.set_value();
    released.wait();  // as a full inbox waits
  });
  ASSERT_TRUE(receiver.connect());
  ASSERT_TRUE(subscribe(receiver, {{"t/in", 1}}));

  Client sender(broker.url(), "sender", [](const std::string&) {});
  ASSERT_TRUE(sender.connect());
  sender.link->publish("t/in", "one", 1, false, [](bool, const std::string&) {});
  ASSERT_EQ(entered.get_future().wait_for(10s), std::future_status::ready);

  // The receiver's callback waits; its link still takes a publish at once...
  Completion published_done;
  auto published = completion(published_done);
  auto call = std::async(std::launch::async,
                         [&] { receiver.link->publish("t/out", "two", 1, false, std::move(published_done)); });
  const bool returned = call.wait_for(2s) == std::future_status::ready;
  release.set_value();
  EXPECT_TRUE(returned) << "publish waited for the message callback";
  // ...and sends it once the callback lets Paho go on.
  ASSERT_EQ(published.wait_for(10s), std::future_status::ready);
  EXPECT_TRUE(published.get());
  call.wait();
}

TEST(PahoLink, ABurstBeyondWhatPahoHoldsWaitsForRoomAndArrivesWholeInOrder) {
  // Paho refuses a publish when 100 wait in it already; the link waits for room.
  testing::TempDir dir;
  Broker broker(dir.path());
  Received received;
  Client watcher(broker.url(), "watcher", received.recorder());
  ASSERT_TRUE(watcher.connect());
  ASSERT_TRUE(subscribe(watcher, {{"t/order", 1}}));

  Client sender(broker.url(), "sender", [](const std::string&) {});
  ASSERT_TRUE(sender.connect());
  std::atomic<int> acknowledged{0}, refused{0};
  for (int i = 0; i < 150; ++i) {
    sender.link->publish("t/order", std::to_string(i), 1, false, [&](bool ok, const std::string&) {
      if (ok) ++acknowledged;
      if (!ok) ++refused;
    });
  }
  const std::vector<std::string> arrived = received.wait_for(150);
  ASSERT_EQ(arrived.size(), 150u) << acknowledged << " acknowledged, " << refused << " refused";
  for (int i = 0; i < 150; ++i) EXPECT_EQ(arrived[static_cast<std::size_t>(i)], std::to_string(i));
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (acknowledged < 150 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(acknowledged, 150);
  sender.link->disconnect(2s);
}

TEST(PahoLink, UnsubscribingStopsThatFilterAloneAndAFilterNeverHeldIsNoError) {
  testing::TempDir dir;
  Broker broker(dir.path());
  Received received;
  Client watcher(broker.url(), "watcher", received.recorder());
  ASSERT_TRUE(watcher.connect());
  ASSERT_TRUE(subscribe(watcher, {{"t/a", 1}, {"t/b", 1}}));
  Completion unsubscribed_done;
  auto unsubscribed = completion(unsubscribed_done);
  watcher.link->unsubscribe({"t/a", "t/never"}, std::move(unsubscribed_done));
  ASSERT_EQ(unsubscribed.wait_for(10s), std::future_status::ready);
  EXPECT_TRUE(unsubscribed.get());

  Client sender(broker.url(), "sender", [](const std::string&) {});
  ASSERT_TRUE(sender.connect());
  // In order on one connection: once "b" arrived, "a" would have too.
  sender.link->publish("t/a", "a", 1, false, [](bool, const std::string&) {});
  sender.link->publish("t/b", "b", 1, false, [](bool, const std::string&) {});
  EXPECT_EQ(received.wait_for(1), std::vector<std::string>{"b"});
}

TEST(PahoLink, ASubscriptionGoesAheadOfABurstOfQueuedPublishes) {
  // A bridge in a registration storm queues thousands of publishes; a robot
  // it must follow now is not heard until its SUBSCRIBE is sent.
  testing::TempDir dir;
  Broker broker(dir.path());
  Client client(broker.url(), "busy", [](const std::string&) {});
  ASSERT_TRUE(client.connect());
  constexpr int kBurst = 20000;
  std::atomic<int> acknowledged{0};
  for (int i = 0; i < kBurst; ++i)
    client.link->publish("t/burst", std::to_string(i), 1, false, [&](bool ok, const std::string&) {
      if (ok) ++acknowledged;
    });
  Completion done;
  auto subscribed = completion(done);
  client.link->subscribe({{"t/now", 1}}, std::move(done));
  ASSERT_EQ(subscribed.wait_for(30s), std::future_status::ready);
  EXPECT_TRUE(subscribed.get());
  // At most what Paho already held (100) and the broker's window went first.
  EXPECT_LT(acknowledged.load(), kBurst / 2);
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (acknowledged < kBurst && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(acknowledged, kBurst);
}

}  // namespace
}  // namespace k8s4r::mqtt
