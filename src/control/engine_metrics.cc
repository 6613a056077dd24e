#include "control/engine_metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <string>

namespace aicloud::control {

namespace {

// Calls fn(line) for each line of a Prometheus text page, without its '\n'; stops early when fn
// returns false.
template <class Fn>
void ForEachLine(std::string_view text, Fn fn) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    if (!fn(text.substr(pos, end - pos))) return;
    pos = end + 1;
  }
}

}  // namespace

double SumMetric(std::string_view text, std::string_view name) {
  double sum = 0;
  ForEachLine(text, [&](std::string_view line) {
    if (line.empty() || line[0] == '#' || line.substr(0, name.size()) != name) return true;
    if (line.size() > name.size() && line[name.size()] != '{' && line[name.size()] != ' ') return true;
    // The value: the first field after the label set (a timestamp may follow it).
    size_t at = line[name.size()] == '{' ? line.find("} ", name.size()) : name.size();
    if (at == std::string_view::npos) return true;
    at = line.find_first_not_of(" }", at);
    if (at == std::string_view::npos) return true;
    const std::string_view field = line.substr(at, line.find(' ', at) - at);
    sum += std::strtod(std::string(field).c_str(), nullptr);
    return true;
  });
  return sum;
}

std::string FirstLabel(std::string_view text, std::string_view name, std::string_view label) {
  const std::string key = std::string(name) + "{";
  const std::string want = std::string(label) + "=\"";
  std::string value;
  ForEachLine(text, [&](std::string_view line) {
    if (!line.starts_with(key)) return true;
    size_t at = line.find(want, key.size());
    while (at != std::string_view::npos && line[at - 1] != '{' && line[at - 1] != ',') at = line.find(want, at + 1);
    if (at == std::string_view::npos) return false;
    for (size_t i = at + want.size(); i < line.size() && line[i] != '"'; ++i) {
      if (line[i] == '\\' && i + 1 < line.size()) {
        ++i;
        value += line[i] == 'n' ? '\n' : line[i];
      } else {
        value += line[i];
      }
    }
    return false;
  });
  return value;
}

LatencyHistogram LatencyHistogram::Minus(const LatencyHistogram& earlier) const {
  if (earlier.le.empty() && earlier.count == 0) return *this;  // nothing observed before (no lines yet)
  if (earlier.le != le || earlier.count > count) return {};
  LatencyHistogram d = *this;
  for (size_t i = 0; i < le.size(); ++i) {
    if (earlier.cumulative[i] > cumulative[i]) return {};
    d.cumulative[i] -= earlier.cumulative[i];
  }
  d.count -= earlier.count;
  return d;
}

double LatencyHistogram::Quantile(double q) const {
  if (empty() || le.empty()) return -1;
  const double rank = std::clamp(q, 0.0, 1.0) * count;
  double below = 0, lower = 0;
  for (size_t i = 0; i < le.size(); ++i) {
    if (cumulative[i] >= rank) {
      const double in_bucket = cumulative[i] - below;
      if (in_bucket <= 0) return le[i];
      return lower + (le[i] - lower) * (rank - below) / in_bucket;
    }
    below = cumulative[i];
    lower = le[i];
  }
  return le.back();
}

double LatencyHistogram::ShareAtMost(double x) const {
  if (empty()) return 1;
  double below = 0, lower = 0;
  for (size_t i = 0; i < le.size(); ++i) {
    if (x <= le[i]) {
      const double part = le[i] > lower ? (x - lower) / (le[i] - lower) : 1;
      return std::clamp((below + (cumulative[i] - below) * std::max(part, 0.0)) / count, 0.0, 1.0);
    }
    below = cumulative[i];
    lower = le[i];
  }
  return std::clamp(below / count, 0.0, 1.0);  // x beyond the last bound: the +Inf bucket is unknown
}

LatencyHistogram ParseHistogram(std::string_view text, std::string_view name) {
  const std::string bucket = std::string(name) + "_bucket{";
  std::map<double, double> by_le;  // summed over label sets
  double inf = 0;
  bool malformed = false;
  auto bad = [&] {
    malformed = true;
    return false;  // stop reading
  };
  ForEachLine(text, [&](std::string_view line) {
    if (!line.starts_with(bucket)) return true;
    // The le label (a whole label name: after '{' or ','), and the value after the label set (an
    // optional timestamp may follow it).
    size_t at = line.find("le=\"", bucket.size() - 1);
    while (at != std::string_view::npos && line[at - 1] != '{' && line[at - 1] != ',') at = line.find("le=\"", at + 1);
    const size_t close = line.rfind('}');
    if (at == std::string_view::npos || close == std::string_view::npos || close + 2 > line.size() || line[close + 1] != ' ') {
      return bad();
    }
    const size_t quote = line.find('"', at + 4);
    if (quote == std::string_view::npos || quote > close) return bad();
    const std::string le(line.substr(at + 4, quote - at - 4));
    std::string_view rest = line.substr(close + 2);
    const std::string value(rest.substr(0, rest.find(' ')));
    char* value_end = nullptr;
    const double v = std::strtod(value.c_str(), &value_end);
    if (value_end == value.c_str() || !std::isfinite(v)) return bad();
    if (le == "+Inf") {
      inf += v;
      return true;
    }
    char* le_end = nullptr;
    const double bound = std::strtod(le.c_str(), &le_end);
    if (le_end == le.c_str() || !std::isfinite(bound)) return bad();
    by_le[bound] += v;
    return true;
  });
  if (malformed) return {};
  LatencyHistogram h;
  for (const auto& [bound, n] : by_le) {
    h.le.push_back(bound);
    h.cumulative.push_back(n);
  }
  h.count = inf;
  // Cumulative counts never fall with the bound, and the +Inf bucket holds them all.
  for (size_t i = 1; i < h.cumulative.size(); ++i) {
    if (h.cumulative[i] < h.cumulative[i - 1]) return {};
  }
  if (!h.cumulative.empty() && h.count < h.cumulative.back()) return {};
  return h;
}

}  // namespace aicloud::control
