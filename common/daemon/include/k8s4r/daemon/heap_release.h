// What a daemon's heap gives back. glibc's malloc gives each busy thread an
// arena of its own (up to eight per core) and returns freed memory to the
// system only from the top of one: after a burst that many threads took
// part in (the bridge's MQTT, writer and informer threads through a
// registration storm), the freed memory stays resident, scattered over the
// arenas. Measured with three bridge replicas at 18,000 robots
// (docs/performance.md): steady RSS 86 MiB per replica as glibc leaves it,
// 51 MiB with two arenas and a trim every 10 s, as with jemalloc.
#pragma once

#include "k8s4r/daemon/event_loop.h"
#include "k8s4r/daemon/metrics.h"

#include <chrono>

namespace k8s4r::daemon {

// At most `arenas` malloc arenas for the whole process. Call first thing in
// main, before any thread starts.
void limit_malloc_arenas(int arenas);

// Every `every`, on the loop: malloc_trim(0), which hands the free pages of
// every arena back to the system. Counted in k8s4r_heap_trims_total and
// k8s4r_heap_trim_seconds_total.
void trim_heap_periodically(EventLoop& loop, Metrics& metrics, std::chrono::seconds every);

}  // namespace k8s4r::daemon
