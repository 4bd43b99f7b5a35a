#include "k8s4r/daemon/heap_release.h"

#include <malloc.h>

#include <memory>

namespace k8s4r::daemon {

void limit_malloc_arenas(int arenas) { mallopt(M_ARENA_MAX, arenas); }

void trim_heap_periodically(EventLoop& loop, Metrics& metrics, std::chrono::seconds every) {
  metrics.declare("k8s4r_heap_trims_total", Metrics::Type::counter, "Times free heap memory was handed back.");
  metrics.declare("k8s4r_heap_trim_seconds_total", Metrics::Type::counter, "Time spent handing it back.");
  // The timer holds the only reference: it lives as long as the loop runs it.
  auto trim = std::make_shared<std::function<void()>>();
  *trim = [&loop, &metrics, every, weak = std::weak_ptr<std::function<void()>>(trim)] {
    const auto started = std::chrono::steady_clock::now();
    malloc_trim(0);
    metrics.add("k8s4r_heap_trims_total");
    metrics.add("k8s4r_heap_trim_seconds_total", {},
                std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
    if (auto again = weak.lock()) loop.after(every, [again] { (*again)(); });
  };
  loop.after(every, [trim] { (*trim)(); });
}

}  // namespace k8s4r::daemon
