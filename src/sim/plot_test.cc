#include "sim/plot.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace aicloud::sim {
namespace {

int Count(const std::string& haystack, const std::string& needle) {
  int n = 0;
  for (size_t pos = haystack.find(needle); pos != std::string::npos;
       pos = haystack.find(needle, pos + needle.size())) {
    ++n;
  }
  return n;
}

// Text of every <text> element inside the first <g class="`cls`"> group.
std::vector<std::string> GroupTexts(const std::string& svg, const std::string& cls) {
  std::vector<std::string> texts;
  size_t begin = svg.find("<g class=\"" + cls + "\"");
  if (begin == std::string::npos) return texts;
  size_t end = svg.find("</g>", begin);
  std::string group = svg.substr(begin, end - begin);
  std::regex text_re("<text[^>]*>([^<]*)</text>");
  for (std::sregex_iterator it(group.begin(), group.end(), text_re), last; it != last; ++it) {
    texts.push_back((*it)[1]);
  }
  return texts;
}

double Attr(const std::string& element, const std::string& name) {
  std::smatch m;
  std::regex re(" " + name + "=\"([-0-9.]+)\"");
  if (!std::regex_search(element, m, re)) return NAN;
  return std::stod(m[1]);
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string TempPath(const std::string& name) {
  return testing::TempDir() + "plot_test_" + std::to_string(::getpid()) + "_" + name;
}

PlotSpec TwoSeries() {
  PlotSpec spec;
  spec.title = "Allocation";
  spec.x_label = "Arrived GPU demand (%)";
  spec.y_label = "GPU allocation ratio (%)";
  spec.series.push_back({"FGD", {{0, 0}, {50, 50}, {100, 92}, {130, 93}}});
  spec.series.push_back({"BestFit", {{0, 0}, {50, 50}, {100, 85}, {130, 86}}});
  spec.x_markers.push_back({100, "cluster full"});
  return spec;
}

TEST(PlotTest, IsAStandaloneSvgDocument) {
  std::string svg = RenderSvg(TwoSeries());
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u) << svg.substr(0, 80);
  ASSERT_GE(svg.size(), 7u);
  std::string trimmed = svg.substr(0, svg.find_last_not_of("\n") + 1);
  EXPECT_EQ(trimmed.substr(trimmed.size() - 6), "</svg>");
  EXPECT_EQ(Count(svg, "<svg"), 1);
  EXPECT_EQ(Count(svg, "<g ") + Count(svg, "<g>"), Count(svg, "</g>"));
  EXPECT_EQ(Count(svg, "<text"), Count(svg, "</text>"));
  EXPECT_NE(svg.find("Allocation"), std::string::npos);
  EXPECT_NE(svg.find("Arrived GPU demand (%)"), std::string::npos);
  EXPECT_NE(svg.find("GPU allocation ratio (%)"), std::string::npos);
  EXPECT_NE(svg.find("cluster full"), std::string::npos);
}

TEST(PlotTest, EscapesLabels) {
  PlotSpec spec;
  spec.title = "Tom & Jerry's \"plot\"";
  spec.x_label = "x<y";
  spec.y_label = "y>x";
  spec.series.push_back({"a<b", {{0, 1}, {1, 2}}});
  spec.x_markers.push_back({0.5, "m&m"});
  std::string svg = RenderSvg(spec);
  EXPECT_NE(svg.find("a&lt;b"), std::string::npos);
  EXPECT_NE(svg.find("x&lt;y"), std::string::npos);
  EXPECT_NE(svg.find("y&gt;x"), std::string::npos);
  EXPECT_NE(svg.find("m&amp;m"), std::string::npos);
  EXPECT_NE(svg.find("Tom &amp; Jerry&apos;s &quot;plot&quot;"), std::string::npos);
  EXPECT_EQ(svg.find("a<b"), std::string::npos);
  EXPECT_EQ(svg.find("m&m"), std::string::npos);
}

TEST(PlotTest, OnePolylinePerNonEmptySeriesAndLegendEntryPerLabel) {
  PlotSpec spec = TwoSeries();
  spec.series.push_back({"empty", {}});
  spec.series.push_back({"all-nan", {{NAN, 1}, {2, INFINITY}}});
  spec.series.push_back({"", {{0, 10}, {130, 10}}});  // unlabelled: drawn, not in the legend
  std::string svg = RenderSvg(spec);
  EXPECT_EQ(Count(svg, "<polyline"), 3);
  EXPECT_EQ(GroupTexts(svg, "legend"),
            (std::vector<std::string>{"FGD", "BestFit", "empty", "all-nan"}));
}

TEST(PlotTest, SeriesColoursCycleThroughTheOkabeItoPalette) {
  PlotSpec spec;
  for (int i = 0; i < 9; ++i) spec.series.push_back({"s" + std::to_string(i), {{0, i}, {1, i}}});
  std::string svg = RenderSvg(spec);
  EXPECT_EQ(Count(svg, "stroke=\"#0072B2\""), 4);  // series 0 and 8: polyline + legend swatch
  EXPECT_EQ(Count(svg, "stroke=\"#F0E442\""), 2);  // series 7 only
}

TEST(PlotTest, AutoRangeUsesNiceTicks) {
  PlotSpec spec;
  spec.series.push_back({"s", {{0, 0}, {130, 130}}});
  std::string svg = RenderSvg(spec);
  std::vector<std::string> want = {"0", "20", "40", "60", "80", "100", "120", "140"};
  EXPECT_EQ(GroupTexts(svg, "x-ticks"), want);
  EXPECT_EQ(GroupTexts(svg, "y-ticks"), want);
}

TEST(PlotTest, FractionalTicksAreNiceAndExact) {
  PlotSpec spec;
  spec.series.push_back({"s", {{0, 0.13}, {0.7, 0.31}}});
  std::string svg = RenderSvg(spec);
  EXPECT_EQ(GroupTexts(svg, "x-ticks"),
            (std::vector<std::string>{"0.0", "0.1", "0.2", "0.3", "0.4", "0.5", "0.6", "0.7"}));
  EXPECT_EQ(GroupTexts(svg, "y-ticks"),
            (std::vector<std::string>{"0.12", "0.14", "0.16", "0.18", "0.20", "0.22", "0.24",
                                      "0.26", "0.28", "0.30", "0.32"}));
}

TEST(PlotTest, NegativeRangesTickThroughZeroWithoutMinusZero) {
  PlotSpec spec;
  spec.series.push_back({"s", {{-0.3, -3}, {0.2, 2}}});
  std::string svg = RenderSvg(spec);
  for (const char* axis : {"x-ticks", "y-ticks"}) {
    std::vector<std::string> ticks = GroupTexts(svg, axis);
    ASSERT_GE(ticks.size(), 3u) << axis;
    EXPECT_LE(std::stod(ticks.front()), axis[0] == 'x' ? -0.3 : -3) << axis;
    EXPECT_GE(std::stod(ticks.back()), axis[0] == 'x' ? 0.2 : 2) << axis;
    bool has_zero = false;
    for (const std::string& t : ticks) {
      EXPECT_FALSE(std::regex_match(t, std::regex("-0(\\.0*)?"))) << axis << ": " << t;
      has_zero |= std::stod(t) == 0;
    }
    EXPECT_TRUE(has_zero) << axis;
  }
}

TEST(PlotTest, ExplicitBoundsAreKept) {
  PlotSpec spec;
  spec.x_min = 0;
  spec.x_max = 100;
  spec.y_min = 0;
  spec.series.push_back({"s", {{10, 3}, {90, 47}}});
  std::string svg = RenderSvg(spec);
  // The data (10..90) would round to a narrower range; the bounds given win.
  std::vector<std::string> x = GroupTexts(svg, "x-ticks");
  ASSERT_FALSE(x.empty());
  EXPECT_EQ(x.front(), "0");
  EXPECT_EQ(x.back(), "100");
  std::vector<std::string> y = GroupTexts(svg, "y-ticks");
  ASSERT_FALSE(y.empty());
  EXPECT_EQ(y.front(), "0");
  EXPECT_EQ(y.back(), "50");
}

TEST(PlotTest, PointsMapOntoThePlotArea) {
  PlotSpec spec;
  spec.x_min = 0;
  spec.x_max = 100;
  spec.y_min = 0;
  spec.y_max = 50;
  spec.series.push_back({"s", {{0, 0}, {100, 50}, {25, 10}}});
  std::string svg = RenderSvg(spec);

  std::smatch m;
  ASSERT_TRUE(std::regex_search(svg, m, std::regex("<rect class=\"plot-area\"[^>]*>")));
  std::string rect = m[0];
  double x = Attr(rect, "x"), y = Attr(rect, "y"), w = Attr(rect, "width"),
         h = Attr(rect, "height");
  ASSERT_TRUE(std::isfinite(x + y + w + h)) << rect;
  EXPECT_GT(w, 100);
  EXPECT_GT(h, 100);

  ASSERT_TRUE(std::regex_search(svg, m, std::regex("<polyline[^>]* points=\"([^\"]*)\"")));
  std::vector<std::pair<double, double>> pts;
  std::string points = m[1];
  std::regex pair_re("([-0-9.]+),([-0-9.]+)");
  for (std::sregex_iterator it(points.begin(), points.end(), pair_re), last; it != last; ++it) {
    pts.emplace_back(std::stod((*it)[1]), std::stod((*it)[2]));
  }
  ASSERT_EQ(pts.size(), 3u) << points;
  // x_min is the left edge, y_min the bottom edge; x_max/y_max the right and top edges.
  EXPECT_NEAR(pts[0].first, x, 0.01);
  EXPECT_NEAR(pts[0].second, y + h, 0.01);
  EXPECT_NEAR(pts[1].first, x + w, 0.01);
  EXPECT_NEAR(pts[1].second, y, 0.01);
  EXPECT_NEAR(pts[2].first, x + w * 0.25, 0.01);
  EXPECT_NEAR(pts[2].second, y + h * 0.8, 0.01);
}

TEST(PlotTest, DegenerateInputsNeverPrintNanOrInf) {
  const double kNan = std::numeric_limits<double>::quiet_NaN();
  const double kInf = std::numeric_limits<double>::infinity();
  const double kMax = std::numeric_limits<double>::max();
  std::vector<PlotSpec> specs(8);
  // [0] nothing at all
  specs[1].series.push_back({"empty", {}});
  specs[2].series.push_back({"one", {{5, 5}}});
  specs[3].series.push_back({"flat", {{0, 7}, {1, 7}, {2, 7}}});
  specs[4].series.push_back({"zeros", {{0, 0}, {0, 0}}});
  specs[5].series.push_back({"bad", {{kNan, 1}, {1, kInf}, {-kInf, kNan}, {2, 3}}});
  specs[6].series.push_back({"huge", {{-kMax, -kMax}, {kMax, kMax}}});
  specs[7].x_min = 5;
  specs[7].x_max = 5;
  specs[7].y_min = 3;
  specs[7].y_max = 1;
  specs[7].x_markers = {{kNan, "nan marker"}, {5, "at five"}};
  specs[7].series.push_back({"s", {{5, 2}}});
  for (size_t i = 0; i < specs.size(); ++i) {
    std::string svg = RenderSvg(specs[i]);
    std::string lower;
    for (char c : svg) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    EXPECT_EQ(lower.find("nan"), std::string::npos) << "spec " << i << "\n" << svg;
    EXPECT_EQ(lower.find("inf"), std::string::npos) << "spec " << i << "\n" << svg;
    EXPECT_EQ(lower.find("e+"), std::string::npos) << "spec " << i << "\n" << svg;
    EXPECT_FALSE(GroupTexts(svg, "x-ticks").empty()) << "spec " << i;
    EXPECT_FALSE(GroupTexts(svg, "y-ticks").empty()) << "spec " << i;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(svg, m, std::regex("<rect class=\"plot-area\"[^>]*>")));
    EXPECT_GT(Attr(m[0], "width"), 0) << "spec " << i;  // a negative width is invalid SVG
    EXPECT_GT(Attr(m[0], "height"), 0) << "spec " << i;
  }
  // A lone point still shows up, as a dot.
  EXPECT_EQ(Count(RenderSvg(specs[2]), "<circle"), 1);
  EXPECT_EQ(Count(RenderSvg(specs[5]), "<polyline"), 1);
}

TEST(PlotTest, WritesSvgFile) {
  std::string path = TempPath("out.svg");
  Status s = WritePlot(TwoSeries(), path);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(ReadAll(path), RenderSvg(TwoSeries()));
  std::remove(path.c_str());
}

TEST(PlotTest, RejectsUnknownExtension) {
  Status s = WritePlot(TwoSeries(), TempPath("out.pdf"));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find(".pdf"), std::string::npos) << s.message();

  s = WritePlot(TwoSeries(), TempPath("dir.svg/out"));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("no extension"), std::string::npos) << s.message();
}

TEST(PlotTest, UnwritablePathIsAnError) {
  std::string path = "/nonexistent-aicloud-dir/out.svg";
  Status s = WritePlot(TwoSeries(), path);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(path), std::string::npos) << s.message();
}

bool HaveRsvgConvert() { return ::access("/usr/bin/rsvg-convert", X_OK) == 0; }

TEST(PlotTest, PngNeedsRsvgConvert) {
  std::string path = TempPath("out.png");
  Status s = WritePlot(TwoSeries(), path);
  if (HaveRsvgConvert()) {
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(ReadAll(path).substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
    std::remove(path.c_str());
  } else {
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(s.message().find("rsvg-convert"), std::string::npos) << s.message();
  }
}

TEST(PlotTest, PngReportsMissingTool) {
  // Forces the missing-tool branch even where rsvg-convert is installed.
  const char* old = std::getenv("PATH");
  std::string saved = old != nullptr ? old : "";
  ::setenv("PATH", "/nonexistent-aicloud-dir", 1);
  Status s = WritePlot(TwoSeries(), TempPath("missing.png"));
  ::setenv("PATH", saved.c_str(), 1);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("rsvg-convert"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("librsvg2-bin"), std::string::npos) << s.message();
}

TEST(PlotTest, PngToUnwritablePathReportsTheToolsError) {
  if (!HaveRsvgConvert()) GTEST_SKIP() << "rsvg-convert not installed";
  std::string path = "/nonexistent-aicloud-dir/out.png";
  Status s = WritePlot(TwoSeries(), path);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("rsvg-convert"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(path), std::string::npos) << s.message();
}

}  // namespace
}  // namespace aicloud::sim
