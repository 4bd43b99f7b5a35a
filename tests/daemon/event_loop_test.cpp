#include "k8s4r/daemon/event_loop.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace k8s4r::daemon {
namespace {

TEST(EventLoop, RunsTimersInDeadlineOrderAndSkipsCancelledOnes) {
  EventLoop loop;
  std::vector<int> order;
  const auto now = real_clock().steady();
  loop.at(now + std::chrono::milliseconds(3), [&] { order.push_back(3); });
  loop.at(now + std::chrono::milliseconds(1), [&] { order.push_back(1); });
  const auto cancelled = loop.at(now + std::chrono::milliseconds(2), [&] { order.push_back(2); });
  loop.cancel(cancelled);
  loop.cancel(0);  // no such timer: nothing happens
  loop.at(now + std::chrono::milliseconds(4), [&] { loop.stop(); });
  loop.run();
  EXPECT_EQ(order, (std::vector<int>{1, 3}));
}

TEST(EventLoop, RunsWorkPostedFromOtherThreadsInOrder) {
  EventLoop loop;
  std::vector<int> seen;
  std::thread poster([&] {
    for (int i = 0; i < 1000; ++i) loop.post([&seen, i] { seen.push_back(i); });
    loop.post([&] { loop.stop(); });
  });
  loop.run();
  poster.join();
  ASSERT_EQ(seen.size(), 1000u);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(seen[static_cast<std::size_t>(i)], i);
}

TEST(EventLoop, ATimerMayScheduleAnother) {
  EventLoop loop;
  int fired = 0;
  std::function<void()> again = [&] {
    if (++fired == 3) return loop.stop();
    loop.after(std::chrono::milliseconds(0), again);
  };
  loop.after(std::chrono::milliseconds(0), again);
  loop.run();
  EXPECT_EQ(fired, 3);
}

}  // namespace
}  // namespace k8s4r::daemon
