// The inbox between an MQTT callback thread and the event loop: a burst
// waits in the sender, not in the loop, and shutdown never deadlocks.
#include "k8s4r/daemon/inbox.h"

#include "k8s4r/daemon/event_loop.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

namespace k8s4r::daemon {
namespace {

using namespace std::chrono_literals;

TEST(Inbox, ABurstWaitsInTheSenderAndEveryMessageIsHandledInOrder) {
  constexpr int kMessages = 1000;
  constexpr std::size_t kLimit = 16;
  EventLoop loop;
  Inbox inbox(kLimit);
  std::vector<int> handled;
  std::atomic<std::size_t> deepest{0};
  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  std::thread sender([&] {
    for (int i = 0; i < kMessages; ++i) {
      inbox.enter();
      const std::size_t depth = inbox.depth();
      std::size_t seen = deepest.load();
      while (depth > seen && !deepest.compare_exchange_weak(seen, depth)) {
      }
      loop.post([&, i] {
        opened.wait();  // the loop is busy at first: the sender must wait
        inbox.leave();
        handled.push_back(i);
        if (i == kMessages - 1) loop.stop();
      });
    }
  });
  // The sender fills the inbox and then blocks, until the loop takes some.
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (inbox.waits() == 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  EXPECT_EQ(inbox.waits(), 1u);
  EXPECT_EQ(inbox.depth(), kLimit);
  gate.set_value();
  loop.run();
  sender.join();
  EXPECT_LE(deepest.load(), kLimit);
  ASSERT_EQ(handled.size(), static_cast<std::size_t>(kMessages));
  for (int i = 0; i < kMessages; ++i) ASSERT_EQ(handled[static_cast<std::size_t>(i)], i);
  EXPECT_EQ(inbox.depth(), 0u);
}

TEST(Inbox, CloseLetsABlockedSenderThroughSoShutdownNeverWaitsOnIt) {
  Inbox inbox(1);
  inbox.enter();
  auto blocked = std::async(std::launch::async, [&] { inbox.enter(); });
  EXPECT_EQ(blocked.wait_for(50ms), std::future_status::timeout) << "full: the sender waits";
  inbox.close();
  EXPECT_EQ(blocked.wait_for(10s), std::future_status::ready);
  inbox.enter();  // and never blocks again
  EXPECT_EQ(inbox.depth(), 3u);
}

TEST(Inbox, CountedInBytesAMessageWaitsUntilItFitsAndOneLargerThanTheLimitGoesInAlone) {
  Inbox inbox(100);
  inbox.enter(60);
  auto second = std::async(std::launch::async, [&] { inbox.enter(60); });
  EXPECT_EQ(second.wait_for(50ms), std::future_status::timeout) << "60 + 60 > 100: waits";
  inbox.leave(60);
  ASSERT_EQ(second.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(inbox.depth(), 60u);
  auto huge = std::async(std::launch::async, [&] { inbox.enter(500); });
  EXPECT_EQ(huge.wait_for(50ms), std::future_status::timeout) << "not while anything else waits";
  inbox.leave(60);
  ASSERT_EQ(huge.wait_for(10s), std::future_status::ready) << "alone, it may exceed the limit";
  EXPECT_EQ(inbox.depth(), 500u);
  EXPECT_EQ(inbox.waits(), 2u);
}

}  // namespace
}  // namespace k8s4r::daemon
