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
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace aicloud {

using LabelValues = std::vector<std::string>;

class Counter {
 public:
  void Inc(const LabelValues& labels = {}, double by = 1);
  double Value(const LabelValues& labels = {}) const;

 private:
  friend class Metrics;
  mutable std::mutex mu_;
  std::map<LabelValues, double> values_;
};

class Gauge {
 public:
  void Set(const LabelValues& labels, double value);
  void Add(const LabelValues& labels, double by);
  double Value(const LabelValues& labels = {}) const;

 private:
  friend class Metrics;
  mutable std::mutex mu_;
  std::map<LabelValues, double> values_;
};

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)) {}
  void Observe(const LabelValues& labels, double value);
  // 0.5 ms .. 10 s, roughly ×2.5 per step.
  static std::vector<double> LatencyBuckets();
  // Total observations for `labels`.
  uint64_t Count(const LabelValues& labels = {}) const;

 private:
  friend class Metrics;
  struct Series {
    std::vector<uint64_t> buckets;  // per bound, not cumulative
    uint64_t count = 0;
    double sum = 0;
  };
  std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::map<LabelValues, Series> series_;
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
