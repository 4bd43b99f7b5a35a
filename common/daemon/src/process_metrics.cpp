#include "k8s4r/daemon/process_metrics.h"

#include <malloc.h>
#include <unistd.h>

#include <fstream>

namespace k8s4r::daemon {

namespace {

// The second field of /proc/self/statm, in pages; 0 if unreadable.
double resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  long size = 0, resident = 0;
  if (!(statm >> size >> resident)) return 0;
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE));
}

}  // namespace

void add_process_metrics(Metrics& metrics) {
  metrics.declare("process_resident_memory_bytes", Metrics::Type::gauge, "Resident memory size in bytes.");
  metrics.declare("k8s4r_heap_bytes", Metrics::Type::gauge,
                  "glibc malloc's heap: in_use, held by the program (mmapped blocks included); free, kept by "
                  "malloc for reuse and not returned to the system.");
  metrics.add_collector([](Metrics& m) {
    m.set("process_resident_memory_bytes", {}, resident_bytes());
    const struct mallinfo2 heap = mallinfo2();
    m.set("k8s4r_heap_bytes", {{"state", "in_use"}}, static_cast<double>(heap.uordblks + heap.hblkhd));
    m.set("k8s4r_heap_bytes", {{"state", "free"}}, static_cast<double>(heap.fordblks));
  });
}

}  // namespace k8s4r::daemon
