#include "core/metrics.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

namespace aicloud {
namespace {

TEST(MetricsTest, RendersCountersGaugesAndHistogramsInPrometheusFormat) {
  Metrics m;
  Counter* c = m.AddCounter("req_total", "Requests", {"code"});
  c->Inc({"200"});
  c->Inc({"200"}, 2);
  c->Inc({"404"});
  Gauge* g = m.AddGauge("queue_depth", "Depth", {"tenant"});
  g->Set({"a\"b"}, 5);
  Histogram* h = m.AddHistogram("lat_seconds", "Latency", {}, {0.1, 1});
  h->Observe({}, 0.05);
  h->Observe({}, 0.5);
  h->Observe({}, 5);
  m.AddGaugeFn("nodes", "Nodes", {"phase"}, [] {
    return std::vector<std::pair<LabelValues, double>>{{{"Ready"}, 3}};
  });
  const std::string text = m.Render();
  EXPECT_NE(text.find("# TYPE req_total counter\n"), std::string::npos);
  EXPECT_NE(text.find("req_total{code=\"200\"} 3\n"), std::string::npos);
  EXPECT_NE(text.find("req_total{code=\"404\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("queue_depth{tenant=\"a\\\"b\"} 5\n"), std::string::npos);
  EXPECT_NE(text.find("lat_seconds_bucket{le=\"0.1\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("lat_seconds_bucket{le=\"1\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("lat_seconds_bucket{le=\"+Inf\"} 3\n"), std::string::npos);
  EXPECT_NE(text.find("lat_seconds_sum 5.55\n"), std::string::npos);
  EXPECT_NE(text.find("lat_seconds_count 3\n"), std::string::npos);
  EXPECT_NE(text.find("nodes{phase=\"Ready\"} 3\n"), std::string::npos);
}

// Values written inline ({"a", "b"}) and held in a LabelValues reach the same series, whatever
// their length, and series render in label order.
TEST(MetricsTest, InlineAndHeldLabelValuesShareASeries) {
  Metrics m;
  Counter* c = m.AddCounter("calls_total", "Calls", {"model", "code"});
  const std::string model = "a-model-name-longer-than-the-small-string-buffer";
  c->Inc({model, std::to_string(200)});
  c->Inc(LabelValues{model, "200"}, 2);
  c->Inc({"b", "500"});
  c->Inc({"a", "200"});
  EXPECT_EQ(c->Value({model, "200"}), 3);
  EXPECT_EQ(c->Value({"b", "500"}), 1);
  EXPECT_EQ(c->Value({"b"}), 0);  // a prefix is another series
  Gauge* g = m.AddGauge("depth", "Depth", {"q"});
  g->Set({"x"}, 4);
  g->Add(LabelValues{"x"}, 1);
  g->Add({"x"}, 1);
  EXPECT_EQ(g->Value({"x"}), 6);
  Histogram* h = m.AddHistogram("lat_seconds", "Latency", {"route"}, {1});
  h->Observe({"/r"}, 0.5);
  h->Observe(LabelValues{"/r"}, 2);
  EXPECT_EQ(h->Count({"/r"}), 2u);
  const std::string text = m.Render();
  const size_t a = text.find("calls_total{model=\"a\",code=\"200\"} 1\n");
  const size_t long_name = text.find("calls_total{model=\"" + model + "\",code=\"200\"} 3\n");
  const size_t b = text.find("calls_total{model=\"b\",code=\"500\"} 1\n");
  ASSERT_NE(a, std::string::npos) << text;
  ASSERT_NE(long_name, std::string::npos) << text;
  ASSERT_NE(b, std::string::npos) << text;
  EXPECT_LT(a, long_name);
  EXPECT_LT(long_name, b);
}

TEST(MetricsTest, ConcurrentUpdatesAreNotLost) {
  Metrics m;
  Counter* c = m.AddCounter("n_total", "N");
  Histogram* h = m.AddHistogram("h", "H", {"k"}, Histogram::LatencyBuckets());
  std::vector<std::thread> ts;
  for (int t = 0; t < 8; ++t) {
    ts.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) {
        c->Inc();
        h->Observe({"x"}, 0.001 * i);
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(c->Value(), 8000);
  EXPECT_EQ(h->Count({"x"}), 8000u);
}

// A bound series is the one Inc/Observe with the same labels reach; updates through it are not
// lost under contention, and a scrape taken meanwhile never shows a cumulative bucket above
// +Inf or the count.
TEST(MetricsTest, BoundSeriesAreSharedAndScrapesStayConsistent) {
  Metrics m;
  Counter* c = m.AddCounter("req_total", "Requests", {"model", "code"});
  Counter::Cell* ok = c->Bind({"m", "200"});
  EXPECT_EQ(c->Bind({"m", "200"}), ok);  // the same series each time
  ok->Inc();
  c->Inc({"m", "200"}, 2);
  EXPECT_EQ(ok->Value(), 3);
  EXPECT_EQ(c->Value({"m", "200"}), 3);
  Histogram* h = m.AddHistogram("lat_seconds", "Latency", {"model"}, {0.1, 1});
  Histogram::Cell* lat = h->Bind({"m"});
  lat->Observe(0.05);
  h->Observe({"m"}, 5);
  EXPECT_EQ(h->Count({"m"}), 2u);
  const std::string text = m.Render();
  EXPECT_NE(text.find("req_total{model=\"m\",code=\"200\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("lat_seconds_bucket{model=\"m\",le=\"0.1\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("lat_seconds_bucket{model=\"m\",le=\"+Inf\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("lat_seconds_sum{model=\"m\"} 5.05\n"), std::string::npos) << text;

  std::atomic<bool> done{false};
  std::atomic<int> scrapes{0};
  int bad = 0;
  std::thread scraper([&] {
    while (!done.load()) {
      const std::string t = m.Render();
      scrapes.fetch_add(1);
      auto value = [&](const std::string& key) {
        const size_t at = t.find(key);
        return at == std::string::npos ? -1.0 : std::stod(t.substr(at + key.size()));
      };
      const double finite = value("lat_seconds_bucket{model=\"m\",le=\"1\"} ");
      const double inf = value("lat_seconds_bucket{model=\"m\",le=\"+Inf\"} ");
      const double count = value("lat_seconds_count{model=\"m\"} ");
      if (finite > inf || inf != count) ++bad;
    }
  });
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t) {
    ts.emplace_back([&] {
      // Not before the scraper runs: on a busy machine the writes could otherwise all be over
      // before its first scrape, and nothing would be checked while they land.
      while (scrapes.load() == 0) std::this_thread::yield();
      for (int i = 0; i < 20000; ++i) {
        ok->Inc();
        lat->Observe(0.5);
      }
    });
  }
  for (auto& t : ts) t.join();
  done = true;
  scraper.join();
  EXPECT_EQ(ok->Value(), 3 + 80000);
  EXPECT_EQ(h->Count({"m"}), 2u + 80000);
  EXPECT_GT(scrapes.load(), 0);
  EXPECT_EQ(bad, 0);
}

}  // namespace
}  // namespace aicloud
