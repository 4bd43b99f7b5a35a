// What a daemon's process holds in memory, for its /metrics: the resident
// set (process_resident_memory_bytes, Prometheus' usual name) and glibc's
// heap split into what the program holds and what malloc keeps free
// (k8s4r_heap_bytes{state="in_use"|"free"}). A resident set far above the
// heap in use is fragmentation or freed memory malloc has not returned; one
// that follows the heap is something the program keeps.
#pragma once

#include "k8s4r/daemon/metrics.h"

namespace k8s4r::daemon {

// Declares the families and reads them at each scrape.
void add_process_metrics(Metrics& metrics);

}  // namespace k8s4r::daemon
