// A daemon's metrics in the Prometheus text format (version 0.0.4):
// counters, gauges and histograms, each family declared once with its help
// text, each series named by its label values. Gauges that mirror another
// component's state (a work queue's depth) are read at scrape time through
// collectors.
//
// Threading: every method may be called from any thread.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace k8s4r::daemon {

using Labels = std::vector<std::pair<std::string, std::string>>;

class Metrics {
 public:
  enum class Type { counter, gauge, histogram };

  void declare(const std::string& name, Type type, const std::string& help, std::vector<double> buckets = {});
  void add(const std::string& name, const Labels& labels = {}, double value = 1);
  void set(const std::string& name, const Labels& labels, double value);
  void observe(const std::string& name, const Labels& labels, double value);
  // Called at each render(), before the families are written.
  void add_collector(std::function<void(Metrics&)> collector);

  // The value of one counter or gauge series (tests, benchmarks); 0 when unset.
  double value(const std::string& name, const Labels& labels = {}) const;
  std::string render();

 private:
  struct Histogram {
    std::vector<std::uint64_t> counts;  // per bucket, not cumulative
    std::uint64_t count = 0;
    double sum = 0;
  };
  struct Family {
    Type type = Type::counter;
    std::string help;
    std::vector<double> buckets;
    std::map<std::string, double> values;         // rendered labels -> value
    std::map<std::string, Histogram> histograms;  // rendered labels -> histogram
  };
  Family& family(const std::string& name);

  mutable std::mutex mutex_;
  std::map<std::string, Family> families_;
  std::vector<std::function<void(Metrics&)>> collectors_;
  std::mutex collect_mutex_;
};

// {a="x",b="y"}, with \, " and newlines escaped; "" for no labels.
std::string render_labels(const Labels& labels);

}  // namespace k8s4r::daemon
