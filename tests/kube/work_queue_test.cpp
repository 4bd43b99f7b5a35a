// The keyed work queue: one entry per key, one worker per key, retries with
// backoff, and nothing lost when a key is added while a worker holds it.
#include "k8s4r/kube/work_queue.h"

#include "k8s4r/testing/manual_clock.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <map>
#include <set>
#include <thread>
#include <vector>

namespace k8s4r::kube {
namespace {

using namespace std::chrono_literals;

TEST(WorkQueue, AKeyAddedManyTimesIsHandedOutOnce) {
  WorkQueue queue;
  for (int i = 0; i < 100; ++i) queue.add("tasks/default/a");
  queue.add("tasks/default/b");
  EXPECT_EQ(queue.metrics().depth, 2u);
  EXPECT_EQ(queue.get(), "tasks/default/a");
  EXPECT_EQ(queue.get(), "tasks/default/b");
  EXPECT_EQ(queue.metrics().depth, 0u);
  EXPECT_EQ(queue.metrics().in_progress, 2u);
}

TEST(WorkQueue, AKeyAddedWhileHeldComesBackOnlyAfterDone) {
  WorkQueue queue;
  queue.add("k");
  ASSERT_EQ(queue.get(), "k");
  queue.add("k");  // newer data arrived while the worker writes
  queue.add("other");
  EXPECT_EQ(queue.get(), "other");  // not "k": a worker holds it
  queue.done("other");
  queue.done("k");
  EXPECT_EQ(queue.get(), "k");  // handed out again, so the newer data is written
}

TEST(WorkQueue, UrgentKeysGoFirstEachKindInItsOwnOrder) {
  WorkQueueOptions options;
  options.urgent = [](const std::string& key) { return key.rfind("tasks/", 0) == 0; };
  WorkQueue queue(options);
  for (const char* key : {"robots/r1", "robots/r2", "tasks/t1", "robots/r3", "tasks/t2"}) queue.add(key);
  EXPECT_EQ(queue.metrics().depth, 5u);
  std::vector<std::string> order;
  for (int i = 0; i < 3; ++i) order.push_back(*queue.get());
  EXPECT_EQ(order, (std::vector<std::string>{"tasks/t1", "tasks/t2", "robots/r1"}));
  // An urgent key that comes back (re-added while held, or added again) goes first again.
  queue.add("tasks/t1");
  queue.done("tasks/t1");
  queue.done("tasks/t2");
  queue.add("tasks/t2");
  EXPECT_EQ(queue.get(), "tasks/t1");
  EXPECT_EQ(queue.get(), "tasks/t2");
  EXPECT_EQ(queue.get(), "robots/r2");
  EXPECT_EQ(queue.get(), "robots/r3");
}

TEST(WorkQueue, DelayedKeysComeOutInTimeOrderAndAnEarlierAddWins) {
  testing::ManualClock clock;
  WorkQueue queue({}, clock);
  queue.add_after("late", 60ms);
  queue.add_after("soon", 20ms);
  queue.add_after("late", 10min);  // later than pending: ignored
  EXPECT_EQ(queue.metrics().delayed, 2u);
  clock.advance(19ms);
  EXPECT_EQ(queue.metrics().delayed, 2u);
  clock.advance(1ms);
  EXPECT_EQ(queue.metrics().delayed, 1u);
  EXPECT_EQ(queue.get(), "soon");
  // A worker waiting for the next one is woken when its time comes.
  auto next = std::async(std::launch::async, [&] { return queue.get(); });
  clock.advance(40ms);
  EXPECT_EQ(next.get(), "late");
  queue.add_after("x", 10min);
  queue.add("x");  // an add now replaces the delayed one
  EXPECT_EQ(queue.get(), "x");
  EXPECT_EQ(queue.metrics().depth, 0u);
}

TEST(WorkQueue, BackoffDoublesPerFailureUpToTheCap) {
  WorkQueueOptions options{100ms, 30s, 0.5};
  EXPECT_EQ(backoff_delay(0, options), 0ms);
  EXPECT_EQ(backoff_delay(1, options), 100ms);
  EXPECT_EQ(backoff_delay(2, options), 200ms);
  EXPECT_EQ(backoff_delay(9, options), 25600ms);
  EXPECT_EQ(backoff_delay(10, options), 30s);
  EXPECT_EQ(backoff_delay(1'000'000, options), 30s);  // no overflow however long it fails
}

TEST(WorkQueue, RateLimitedRetriesWaitTheirJitteredBackoffAndForgetResets) {
  testing::ManualClock clock;
  WorkQueue queue(WorkQueueOptions{40ms, 1s, 0.5}, clock);
  queue.add("k");
  ASSERT_EQ(queue.get(), "k");
  queue.add_rate_limited("k");
  queue.done("k");
  EXPECT_EQ(queue.failures("k"), 1);
  clock.advance(29ms);  // 40 ms less at most a quarter
  EXPECT_EQ(queue.metrics().delayed, 1u);
  clock.advance(21ms);  // 40 ms more at most a quarter
  EXPECT_EQ(queue.metrics().delayed, 0u);
  ASSERT_EQ(queue.get(), "k");
  queue.add_rate_limited("k");
  EXPECT_EQ(queue.failures("k"), 2);
  queue.forget("k");
  EXPECT_EQ(queue.failures("k"), 0);
}

TEST(WorkQueue, ShutDownWakesEveryWaitingWorker) {
  WorkQueue queue;
  std::vector<std::thread> workers;
  std::atomic<int> ended{0};
  for (int i = 0; i < 3; ++i) {
    workers.emplace_back([&] {
      while (queue.get()) {
      }
      ++ended;
    });
  }
  queue.add_after("never", 10min);
  queue.shut_down();
  for (auto& worker : workers) worker.join();
  EXPECT_EQ(ended, 3);
  queue.add("late");  // ignored
  EXPECT_EQ(queue.get(), std::nullopt);
}

// Many producers and workers: every key's last add is processed after it
// was made, and no key is ever held by two workers at once.
TEST(WorkQueue, UnderConcurrencyNoKeyIsHeldTwiceAndNoAddIsLost) {
  WorkQueue queue;
  constexpr int kKeys = 50, kRounds = 200;
  std::mutex mutex;
  std::map<std::string, int> latest_added, latest_seen;
  std::set<std::string> held;
  std::atomic<bool> overlap{false};
  std::vector<std::thread> workers;
  for (int w = 0; w < 4; ++w) {
    workers.emplace_back([&] {
      while (auto key = queue.get()) {
        {
          std::lock_guard lock(mutex);
          if (!held.insert(*key).second) overlap = true;
          latest_seen[*key] = latest_added[*key];
        }
        std::this_thread::yield();
        {
          std::lock_guard lock(mutex);
          held.erase(*key);
        }
        queue.done(*key);
      }
    });
  }
  std::vector<std::thread> producers;
  for (int p = 0; p < 2; ++p) {
    producers.emplace_back([&, p] {
      for (int round = 1; round <= kRounds; ++round) {
        for (int k = p; k < kKeys; k += 2) {
          const std::string key = "key-" + std::to_string(k);
          {
            std::lock_guard lock(mutex);
            latest_added[key] = round;
          }
          queue.add(key);
        }
      }
    });
  }
  for (auto& producer : producers) producer.join();
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  for (;;) {
    {
      std::lock_guard lock(mutex);
      if (latest_seen == latest_added) break;
    }
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "a key's last add was never processed";
    std::this_thread::sleep_for(1ms);
  }
  queue.shut_down();
  for (auto& worker : workers) worker.join();
  EXPECT_FALSE(overlap);
  EXPECT_EQ(latest_seen.size(), static_cast<std::size_t>(kKeys));
}

}  // namespace
}  // namespace k8s4r::kube
