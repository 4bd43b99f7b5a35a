// What the benchmarks share for reporting.
#pragma once

#include <algorithm>
#include <cstdio>
#include <vector>

namespace k8s4r::bench {

inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values.empty() ? 0 : values[values.size() / 2];
}

// " (runs: 1 2 3)" after a printed median.
inline void print_runs(const std::vector<double>& values) {
  std::printf("   (runs:");
  for (double value : values) std::printf(" %.0f", value);
  std::printf(")\n");
}

}  // namespace k8s4r::bench
