#include "core/metrics.h"

#include <algorithm>
#include <cmath>
#include <tuple>
#include <sstream>

namespace aicloud {
namespace {

std::string Escape(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string LabelText(const std::vector<std::string>& names, const LabelValues& values,
                      const std::string& extra = "") {
  std::string s;
  for (size_t i = 0; i < names.size() && i < values.size(); ++i) {
    s += (s.empty() ? "" : ",") + names[i] + "=\"" + Escape(values[i]) + "\"";
  }
  if (!extra.empty()) s += (s.empty() ? "" : ",") + extra;
  return s.empty() ? "" : "{" + s + "}";
}

std::string Number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  std::ostringstream o;
  o.precision(12);
  o << v;
  return o.str();
}

}  // namespace

namespace {

// The series for `labels`, made (zero, or from `args`) the first time; the key is copied only
// then. Series are built in place: a Cell does not move.
template <class Map, class Labels, class... Args>
typename Map::mapped_type& SeriesOf(Map& m, const Labels& labels, const Args&... args) {
  auto it = m.find(labels);
  if (it == m.end()) {
    it = m.emplace(std::piecewise_construct, std::forward_as_tuple(labels.begin(), labels.end()),
                   std::forward_as_tuple(args...))
             .first;
  }
  return it->second;
}

}  // namespace

void Counter::Inc(LabelView labels, double by) {
  std::lock_guard<std::mutex> l(mu_);
  SeriesOf(values_, labels).Inc(by);
}

void Counter::Inc(const LabelValues& labels, double by) {
  std::lock_guard<std::mutex> l(mu_);
  SeriesOf(values_, labels).Inc(by);
}

double Counter::Value(const LabelValues& labels) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = values_.find(labels);
  return it == values_.end() ? 0 : it->second.Value();
}

Counter::Cell* Counter::Bind(LabelView labels) {
  std::lock_guard<std::mutex> l(mu_);
  return &SeriesOf(values_, labels);
}

void Gauge::Set(LabelView labels, double value) {
  std::lock_guard<std::mutex> l(mu_);
  SeriesOf(values_, labels) = value;
}

void Gauge::Set(const LabelValues& labels, double value) {
  std::lock_guard<std::mutex> l(mu_);
  SeriesOf(values_, labels) = value;
}

void Gauge::Add(LabelView labels, double by) {
  std::lock_guard<std::mutex> l(mu_);
  SeriesOf(values_, labels) += by;
}

void Gauge::Add(const LabelValues& labels, double by) {
  std::lock_guard<std::mutex> l(mu_);
  SeriesOf(values_, labels) += by;
}

double Gauge::Value(const LabelValues& labels) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = values_.find(labels);
  return it == values_.end() ? 0 : it->second;
}

Histogram::Cell::Cell(const std::vector<double>* bounds)
    : bounds_(bounds), buckets_(std::make_unique<std::atomic<uint64_t>[]>(bounds->size())) {}

void Histogram::Cell::Observe(double value) {
  const std::vector<double>& b = *bounds_;
  for (size_t i = 0; i < b.size(); ++i) {
    if (value <= b[i]) {
      buckets_[i].fetch_add(1, std::memory_order_relaxed);
      break;
    }
  }
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(value, std::memory_order_relaxed);
}

template <class Labels>
Histogram::Cell& Histogram::SeriesLocked(const Labels& labels) {
  return SeriesOf(series_, labels, &bounds_);
}

void Histogram::Observe(LabelView labels, double value) {
  std::lock_guard<std::mutex> l(mu_);
  SeriesLocked(labels).Observe(value);
}

void Histogram::Observe(const LabelValues& labels, double value) {
  std::lock_guard<std::mutex> l(mu_);
  SeriesLocked(labels).Observe(value);
}

Histogram::Cell* Histogram::Bind(LabelView labels) {
  std::lock_guard<std::mutex> l(mu_);
  return &SeriesLocked(labels);
}

uint64_t Histogram::Count(const LabelValues& labels) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = series_.find(labels);
  return it == series_.end() ? 0 : it->second.count_.load(std::memory_order_relaxed);
}

std::vector<double> Histogram::LatencyBuckets() {
  return {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
}

Counter* Metrics::AddCounter(std::string name, std::string help, std::vector<std::string> labels) {
  auto f = std::make_unique<Family>();
  f->name = std::move(name);
  f->help = std::move(help);
  f->type = "counter";
  f->labels = std::move(labels);
  f->counter = std::make_unique<Counter>();
  Counter* c = f->counter.get();
  std::lock_guard<std::mutex> l(mu_);
  families_.push_back(std::move(f));
  return c;
}

Gauge* Metrics::AddGauge(std::string name, std::string help, std::vector<std::string> labels) {
  auto f = std::make_unique<Family>();
  f->name = std::move(name);
  f->help = std::move(help);
  f->type = "gauge";
  f->labels = std::move(labels);
  f->gauge = std::make_unique<Gauge>();
  Gauge* g = f->gauge.get();
  std::lock_guard<std::mutex> l(mu_);
  families_.push_back(std::move(f));
  return g;
}

Histogram* Metrics::AddHistogram(std::string name, std::string help,
                                 std::vector<std::string> labels, std::vector<double> bounds) {
  auto f = std::make_unique<Family>();
  f->name = std::move(name);
  f->help = std::move(help);
  f->type = "histogram";
  f->labels = std::move(labels);
  f->histogram = std::make_unique<Histogram>(std::move(bounds));
  Histogram* h = f->histogram.get();
  std::lock_guard<std::mutex> l(mu_);
  families_.push_back(std::move(f));
  return h;
}

void Metrics::AddGaugeFn(std::string name, std::string help, std::vector<std::string> labels,
                         GaugeFn fn) {
  auto f = std::make_unique<Family>();
  f->name = std::move(name);
  f->help = std::move(help);
  f->type = "gauge";
  f->labels = std::move(labels);
  f->fn = std::move(fn);
  std::lock_guard<std::mutex> l(mu_);
  families_.push_back(std::move(f));
}

std::string Metrics::Render() const {
  std::lock_guard<std::mutex> l(mu_);
  std::string out;
  for (const auto& f : families_) {
    out += "# HELP " + f->name + " " + f->help + "\n# TYPE " + f->name + " " + f->type + "\n";
    if (f->counter) {
      std::lock_guard<std::mutex> cl(f->counter->mu_);
      for (const auto& [lv, v] : f->counter->values_) {
        out += f->name + LabelText(f->labels, lv) + " " + Number(v.Value()) + "\n";
      }
    } else if (f->gauge) {
      std::lock_guard<std::mutex> gl(f->gauge->mu_);
      for (const auto& [lv, v] : f->gauge->values_) {
        out += f->name + LabelText(f->labels, lv) + " " + Number(v) + "\n";
      }
    } else if (f->fn) {
      for (const auto& [lv, v] : f->fn()) {
        out += f->name + LabelText(f->labels, lv) + " " + Number(v) + "\n";
      }
    } else if (f->histogram) {
      const Histogram& h = *f->histogram;
      std::lock_guard<std::mutex> hl(h.mu_);
      for (const auto& [lv, s] : h.series_) {
        // The count first: observations landing meanwhile can only raise the buckets read
        // after it, so the total is lifted to their sum if needed (never below a bucket).
        uint64_t count = s.count_.load(std::memory_order_relaxed);
        const double sum = s.sum_.load(std::memory_order_relaxed);
        uint64_t cum = 0;
        for (size_t i = 0; i < h.bounds_.size(); ++i) {
          cum += s.buckets_[i].load(std::memory_order_relaxed);
          out += f->name + "_bucket" + LabelText(f->labels, lv, "le=\"" + Number(h.bounds_[i]) + "\"") +
                 " " + std::to_string(cum) + "\n";
        }
        count = std::max(count, cum);
        out += f->name + "_bucket" + LabelText(f->labels, lv, "le=\"+Inf\"") + " " +
               std::to_string(count) + "\n";
        out += f->name + "_sum" + LabelText(f->labels, lv) + " " + Number(sum) + "\n";
        out += f->name + "_count" + LabelText(f->labels, lv) + " " + std::to_string(count) + "\n";
      }
    }
  }
  return out;
}

}  // namespace aicloud
