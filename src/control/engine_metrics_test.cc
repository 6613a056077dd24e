#include "control/engine_metrics.h"

#include <gtest/gtest.h>

#include <string>

namespace aicloud::control {
namespace {

// Two label sets (two models on one engine) are summed bucket by bucket.
const char kPage[] =
    "# TYPE vllm:time_to_first_token_seconds histogram\n"
    "vllm:time_to_first_token_seconds_bucket{model_name=\"a\",le=\"0.1\"} 2\n"
    "vllm:time_to_first_token_seconds_bucket{model_name=\"a\",le=\"1\"} 6\n"
    "vllm:time_to_first_token_seconds_bucket{model_name=\"a\",le=\"+Inf\"} 8\n"
    "vllm:time_to_first_token_seconds_bucket{model_name=\"b\",le=\"0.1\"} 0\n"
    "vllm:time_to_first_token_seconds_bucket{model_name=\"b\",le=\"1\"} 2\n"
    "vllm:time_to_first_token_seconds_bucket{model_name=\"b\",le=\"+Inf\"} 2\n"
    "vllm:time_to_first_token_seconds_sum{model_name=\"a\"} 9.5\n"
    "vllm:time_to_first_token_seconds_count{model_name=\"a\"} 8\n"
    "vllm:time_to_first_token_seconds_bucketx{le=\"1\"} 100\n";

TEST(LatencyHistogram, ParsesBucketsSummedOverLabelSets) {
  const LatencyHistogram h = ParseHistogram(kPage, "vllm:time_to_first_token_seconds");
  ASSERT_EQ(h.le, (std::vector<double>{0.1, 1}));
  EXPECT_EQ(h.cumulative, (std::vector<double>{2, 8}));
  EXPECT_EQ(h.count, 10);
  EXPECT_TRUE(ParseHistogram(kPage, "vllm:inter_token_latency_seconds").empty());
  // Malformed pages give nothing rather than a wrong histogram.
  EXPECT_TRUE(ParseHistogram("h_bucket{le=\"x\"} 1\n", "h").empty());
  EXPECT_TRUE(ParseHistogram("h_bucket{le=\"1\"} 5\nh_bucket{le=\"2\"} 3\nh_bucket{le=\"+Inf\"} 5\n", "h").empty());
  EXPECT_TRUE(ParseHistogram("h_bucket{le=\"1\"} 5\nh_bucket{le=\"+Inf\"} 4\n", "h").empty());
  EXPECT_TRUE(ParseHistogram("h_bucket{le=\"1\"} nan\nh_bucket{le=\"+Inf\"} 4\n", "h").empty());
  // A label whose name ends in "le" is not the bound; a timestamp after the value is not read as it.
  const LatencyHistogram t = ParseHistogram(
      "h_bucket{handle=\"9\",le=\"1\"} 3 1700000000000\nh_bucket{handle=\"9\",le=\"+Inf\"} 4 1700000000000\n", "h");
  EXPECT_EQ(t.le, (std::vector<double>{1}));
  EXPECT_EQ(t.cumulative, (std::vector<double>{3}));
  EXPECT_EQ(t.count, 4);
}

TEST(LatencyHistogram, QuantilesAndSharesInterpolateInsideABucket) {
  LatencyHistogram h{{0.1, 1, 10}, {50, 90, 100}, 100};
  EXPECT_DOUBLE_EQ(h.Quantile(0.5), 0.1);               // the 50th observation is the top of bucket 1
  EXPECT_NEAR(h.Quantile(0.25), 0.05, 1e-12);           // half way through the first bucket
  EXPECT_NEAR(h.Quantile(0.7), 0.1 + 0.9 * 0.5, 1e-12);  // half way through (0.1, 1]
  EXPECT_NEAR(h.Quantile(0.99), 1 + 9 * 0.9, 1e-12);
  EXPECT_DOUBLE_EQ(h.ShareAtMost(0.1), 0.5);
  EXPECT_NEAR(h.ShareAtMost(0.55), 0.7, 1e-12);
  EXPECT_DOUBLE_EQ(h.ShareAtMost(100), 1.0);
  // Observations above the last finite bound: the quantile is that bound, the share excludes them.
  LatencyHistogram tail{{1}, {90}, 100};
  EXPECT_DOUBLE_EQ(tail.Quantile(0.99), 1);
  EXPECT_DOUBLE_EQ(tail.ShareAtMost(5), 0.9);
  EXPECT_EQ(LatencyHistogram{}.Quantile(0.99), -1);
  EXPECT_EQ(LatencyHistogram{}.ShareAtMost(1), 1);
}

TEST(LatencyHistogram, MinusGivesWhatWasObservedBetweenTwoScrapes) {
  const LatencyHistogram before{{0.1, 1}, {2, 6}, 8};
  const LatencyHistogram after{{0.1, 1}, {3, 10}, 14};
  const LatencyHistogram d = after.Minus(before);
  EXPECT_EQ(d.cumulative, (std::vector<double>{1, 4}));
  EXPECT_EQ(d.count, 6);
  // Before the first observation an engine writes no lines: everything since is new.
  EXPECT_EQ(after.Minus(LatencyHistogram{}).count, 14);
  // The engine restarted (counts fell) or its buckets changed: nothing is known.
  EXPECT_TRUE(before.Minus(after).empty());
  EXPECT_TRUE(after.Minus(LatencyHistogram{{0.5}, {1}, 1}).empty());
}

TEST(EngineMetricsPage, SumsSamplesAndReadsALabel) {
  const char page[] =
      "# HELP m a metric\n"
      "m{a=\"1\"} 2\n"
      "m{a=\"x y\"} 3 1700000000000\n"  // a label value with a space, and a timestamp
      "m 4\n"
      "mm{a=\"1\"} 100\n"               // another metric whose name starts the same
      "m{a=\"q\\\"z\"} 1\n";
  EXPECT_EQ(SumMetric(page, "m"), 10);
  EXPECT_EQ(SumMetric(page, "absent"), 0);
  EXPECT_EQ(FirstLabel(page, "m", "a"), "1");
  EXPECT_EQ(FirstLabel("m{b=\"1\",a=\"q\\\"z\"} 1\n", "m", "a"), "q\"z");
  EXPECT_EQ(FirstLabel("m{ba=\"1\"} 1\n", "m", "a"), "");
}

}  // namespace
}  // namespace aicloud::control
