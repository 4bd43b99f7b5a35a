// What a daemon tells of its memory, and the trim that gives freed heap back.
#include "k8s4r/daemon/heap_release.h"
#include "k8s4r/daemon/process_metrics.h"
#include "k8s4r/testing/manual_clock.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>

namespace k8s4r::daemon {
namespace {

using namespace std::chrono_literals;

TEST(ProcessMetrics, AHeldBufferShowsInTheResidentSetAndTheHeapInUse) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the sanitizer's allocator, not glibc's, holds the heap";
#endif
  Metrics metrics;
  add_process_metrics(metrics);
  metrics.render();
  const double resident_before = metrics.value("process_resident_memory_bytes");
  const double in_use_before = metrics.value("k8s4r_heap_bytes", {{"state", "in_use"}});
  constexpr std::size_t kSize = 32u << 20;
  auto buffer = std::make_unique<char[]>(kSize);
  std::memset(buffer.get(), 1, kSize);  // resident once touched
  metrics.render();
  EXPECT_GE(metrics.value("process_resident_memory_bytes") - resident_before, kSize * 0.9);
  EXPECT_GE(metrics.value("k8s4r_heap_bytes", {{"state", "in_use"}}) - in_use_before, kSize);
}

TEST(HeapRelease, TheHeapIsTrimmedOnceEachIntervalOnTheLoop) {
  testing::ManualClock clock;
  EventLoop loop{clock};
  Metrics metrics;
  trim_heap_periodically(loop, metrics, 10s);
  testing::advance(clock, loop, 9s);
  EXPECT_EQ(metrics.value("k8s4r_heap_trims_total"), 0);
  testing::advance(clock, loop, 1s);
  EXPECT_EQ(metrics.value("k8s4r_heap_trims_total"), 1);
  testing::advance(clock, loop, 25s);
  EXPECT_EQ(metrics.value("k8s4r_heap_trims_total"), 3);
}

}  // namespace
}  // namespace k8s4r::daemon
