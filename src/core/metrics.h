// Metrics in the Prometheus text exposition format (version 0.0.4): counters, gauges and
// histograms with labels, registered once and updated from any thread.
//
//   Metrics m;
//   Counter* requests = m.AddCounter("aicloud_api_requests_total", "API requests", {"code"});
//   requests->Inc({"200"});
//   Histogram* latency = m.AddHistogram("aicloud_api_request_seconds", "API latency",
//                                       {"route"}, Histogram::LatencyBuckets());
//   latency->Observe({"/api/v1/jobs"}, 0.0031);
//   std::string text = m.Render();   // served at /metrics
//
// Gauges computed on demand (queue depth, allocation) register a callback instead; it is called
// by Render() and returns (label values, value) rows.
//
// A hot path binds its series once and then updates them without a lookup or a lock:
//
//   Counter::Cell* ok = requests->Bind({"200"});   // lives as long as the counter
//   ok->Inc();
//   Histogram::Cell* route_latency = latency->Bind({"/api/v1/jobs"});
//   route_latency->Observe(0.0031);
#pragma once

#include <algorithm>
#include <atomic>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace aicloud {

using LabelValues = std::vector<std::string>;
// Label values as a caller writes them, Inc({"200"}), Observe({route}, v): looked up without
// copying, and copied into a series' key only the first time that combination is seen.
using LabelView = std::initializer_list<std::string_view>;

// Orders label value lists lexicographically, whichever of the two forms each side is.
struct LabelsLess {
  using is_transparent = void;
  template <class A, class B>
  bool operator()(const A& a, const B& b) const {
    return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end(),
                                        [](std::string_view x, std::string_view y) { return x < y; });
  }
};

class Counter {
 public:
  // One series, updated lock-free.
  class Cell {
   public:
    void Inc(double by = 1) { value_.fetch_add(by, std::memory_order_relaxed); }
    double Value() const { return value_.load(std::memory_order_relaxed); }

   private:
    std::atomic<double> value_{0};
  };

  void Inc(LabelView labels = {}, double by = 1);
  void Inc(const LabelValues& labels, double by = 1);
  double Value(const LabelValues& labels = {}) const;
  // The series of `labels` (made at zero if new); valid as long as this counter.
  Cell* Bind(LabelView labels);

 private:
  friend class Metrics;
  mutable std::mutex mu_;
  std::map<LabelValues, Cell, LabelsLess> values_;
};

class Gauge {
 public:
  void Set(LabelView labels, double value);
  void Set(const LabelValues& labels, double value);
  void Add(LabelView labels, double by);
  void Add(const LabelValues& labels, double by);
  double Value(const LabelValues& labels = {}) const;

 private:
  friend class Metrics;
  mutable std::mutex mu_;
  std::map<LabelValues, double, LabelsLess> values_;
};

class Histogram {
 public:
  // One series, updated lock-free. Render keeps a scrape consistent (the +Inf bucket and the
  // count are never below a finite bucket) while observations land.
  class Cell {
   public:
    explicit Cell(const std::vector<double>* bounds);
    void Observe(double value);

   private:
    friend class Histogram;
    friend class Metrics;
    const std::vector<double>* bounds_;
    std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // per bound, not cumulative
    std::atomic<uint64_t> count_{0};
    std::atomic<double> sum_{0};
  };

  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)) {}
  void Observe(LabelView labels, double value);
  void Observe(const LabelValues& labels, double value);
  // The series of `labels` (made empty if new); valid as long as this histogram.
  Cell* Bind(LabelView labels);
  // 0.5 ms .. 10 s, roughly ×2.5 per step.
  static std::vector<double> LatencyBuckets();
  // Total observations for `labels`.
  uint64_t Count(const LabelValues& labels = {}) const;

 private:
  friend class Metrics;
  std::vector<double> bounds_;
  mutable std::mutex mu_;
  template <class Labels>
  Cell& SeriesLocked(const Labels& labels);
  std::map<LabelValues, Cell, LabelsLess> series_;
};

class Metrics {
 public:
  using GaugeFn = std::function<std::vector<std::pair<LabelValues, double>>()>;

  Counter* AddCounter(std::string name, std::string help, std::vector<std::string> labels = {});
  Gauge* AddGauge(std::string name, std::string help, std::vector<std::string> labels = {});
  Histogram* AddHistogram(std::string name, std::string help, std::vector<std::string> labels,
                          std::vector<double> bounds);
  void AddGaugeFn(std::string name, std::string help, std::vector<std::string> labels, GaugeFn fn);

  std::string Render() const;

 private:
  struct Family {
    std::string name, help, type;
    std::vector<std::string> labels;
    std::unique_ptr<Counter> counter;
    std::unique_ptr<Gauge> gauge;
    std::unique_ptr<Histogram> histogram;
    GaugeFn fn;
  };
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Family>> families_;
};

}  // namespace aicloud
