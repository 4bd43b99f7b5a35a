#include "k8s4r/daemon/metrics.h"

#include <cmath>
#include <sstream>

namespace k8s4r::daemon {

std::string render_labels(const Labels& labels) {
  if (labels.empty()) return "";
  std::string text = "{";
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (i > 0) text += ',';
    text += labels[i].first + "=\"";
    for (char c : labels[i].second) {
      if (c == '\\' || c == '"') {
        text += '\\';
        text += c;
      } else if (c == '\n') {
        text += "\\n";
      } else {
        text += c;
      }
    }
    text += '"';
  }
  return text + "}";
}

namespace {

std::string number(double value) {
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  std::ostringstream out;
  out.precision(17);
  out << value;
  return out.str();
}

// Labels plus one more, for the le label of histogram buckets.
std::string with_label(const std::string& rendered, const std::string& name, const std::string& value) {
  const std::string extra = name + "=\"" + value + "\"";
  if (rendered.empty()) return "{" + extra + "}";
  return rendered.substr(0, rendered.size() - 1) + "," + extra + "}";
}

}  // namespace

Metrics::Family& Metrics::family(const std::string& name) { return families_[name]; }

void Metrics::declare(const std::string& name, Type type, const std::string& help, std::vector<double> buckets) {
  std::lock_guard lock(mutex_);
  Family& entry = family(name);
  entry.type = type;
  entry.help = help;
  entry.buckets = std::move(buckets);
}

void Metrics::add(const std::string& name, const Labels& labels, double value) {
  std::lock_guard lock(mutex_);
  family(name).values[render_labels(labels)] += value;
}

void Metrics::set(const std::string& name, const Labels& labels, double value) {
  std::lock_guard lock(mutex_);
  family(name).values[render_labels(labels)] = value;
}

void Metrics::observe(const std::string& name, const Labels& labels, double value) {
  std::lock_guard lock(mutex_);
  Family& entry = family(name);
  Histogram& histogram = entry.histograms[render_labels(labels)];
  histogram.counts.resize(entry.buckets.size() + 1);
  std::size_t bucket = 0;
  while (bucket < entry.buckets.size() && value > entry.buckets[bucket]) ++bucket;
  ++histogram.counts[bucket];
  ++histogram.count;
  histogram.sum += value;
}

void Metrics::add_collector(std::function<void(Metrics&)> collector) {
  std::lock_guard lock(collect_mutex_);
  collectors_.push_back(std::move(collector));
}

double Metrics::value(const std::string& name, const Labels& labels) const {
  std::lock_guard lock(mutex_);
  auto found = families_.find(name);
  if (found == families_.end()) return 0;
  auto series = found->second.values.find(render_labels(labels));
  return series == found->second.values.end() ? 0 : series->second;
}

std::string Metrics::render() {
  {
    std::lock_guard lock(collect_mutex_);
    for (auto& collector : collectors_) collector(*this);
  }
  std::lock_guard lock(mutex_);
  std::string text;
  for (const auto& [name, entry] : families_) {
    static const char* const kTypes[] = {"counter", "gauge", "histogram"};
    text += "# HELP " + name + " " + entry.help + "\n";
    text += "# TYPE " + name + " " + kTypes[static_cast<int>(entry.type)] + "\n";
    for (const auto& [labels, value] : entry.values) text += name + labels + " " + number(value) + "\n";
    for (const auto& [labels, histogram] : entry.histograms) {
      std::uint64_t cumulative = 0;
      for (std::size_t i = 0; i < entry.buckets.size(); ++i) {
        cumulative += histogram.counts[i];
        text += name + "_bucket" + with_label(labels, "le", number(entry.buckets[i])) + " " +
                std::to_string(cumulative) + "\n";
      }
      text += name + "_bucket" + with_label(labels, "le", "+Inf") + " " + std::to_string(histogram.count) + "\n";
      text += name + "_sum" + labels + " " + number(histogram.sum) + "\n";
      text += name + "_count" + labels + " " + std::to_string(histogram.count) + "\n";
    }
  }
  return text;
}

}  // namespace k8s4r::daemon
