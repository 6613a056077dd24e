// Reading an engine's Prometheus page for the deployment controller: sums of samples, a label,
// and the latency histograms (vllm:time_to_first_token_seconds, vllm:inter_token_latency_seconds)
// that, with the token counters, it turns into rates and percentiles over a window by
// subtracting an earlier scrape, as a Prometheus rate() / histogram_quantile() query would.
//
//   LatencyHistogram now = ParseHistogram(page, "vllm:time_to_first_token_seconds");
//   LatencyHistogram last_minute = now.Minus(a_minute_ago);
//   double p99_s = last_minute.Quantile(0.99);       // -1 when nothing was observed
//   double within = last_minute.ShareAtMost(2.0);     // share of TTFTs <= 2 s
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace aicloud::control {

// A cumulative histogram summed over label sets: observations <= le[i] in cumulative[i], all of
// them (the +Inf bucket) in count.
struct LatencyHistogram {
  std::vector<double> le;          // finite upper bounds, ascending
  std::vector<double> cumulative;  // same length as le
  double count = 0;

  bool empty() const { return count <= 0; }
  // Bucket by bucket this - earlier: what was observed between the two scrapes; all of this one
  // when the earlier had no lines yet. Empty when the earlier histogram has other bounds or
  // larger counts (the engine restarted): nothing known.
  LatencyHistogram Minus(const LatencyHistogram& earlier) const;
  // The q-quantile (0 < q <= 1), linear inside its bucket from the bucket below's bound (0 for
  // the first), as Prometheus' histogram_quantile; the largest finite bound when it falls in the
  // +Inf bucket; -1 when empty.
  double Quantile(double q) const;
  // Share of observations <= x, linear inside the bucket holding x; 1 when empty.
  double ShareAtMost(double x) const;
};

// The histogram `name` (its name_bucket lines, le="..." label) from a Prometheus text page; an
// empty histogram when absent or malformed.
LatencyHistogram ParseHistogram(std::string_view text, std::string_view name);

// Sum of a metric's samples over all label sets ("name{...} value" or "name value" lines); 0 when
// absent.
double SumMetric(std::string_view text, std::string_view name);

// The value of label `label` on the first sample line of metric `name` ("" when none), with
// Prometheus' escapes (\\, \", \n) undone.
std::string FirstLabel(std::string_view text, std::string_view name, std::string_view label);

}  // namespace aicloud::control
