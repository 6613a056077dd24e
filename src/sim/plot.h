// Line charts for the simulator room: a small, dependency-free SVG writer, so that
// `aicloud simulate --plot out.svg` can show "GPU allocation ratio (%) vs arrived GPU demand (%)"
// for several scheduling policies (and utilization over time) as a picture instead of a table.
//
//   PlotSpec spec;
//   spec.title = "GPU allocation vs arrived demand";
//   spec.x_label = "Arrived GPU demand (%)";
//   spec.y_label = "GPU allocation ratio (%)";
//   spec.y_min = 0;
//   spec.x_markers.push_back({100, "cluster full"});
//   spec.series.push_back({"FGD", {{0, 0}, {50, 50}, {100, 93.2}, {130, 94.1}}});
//   spec.series.push_back({"BestFit", {{0, 0}, {50, 50}, {100, 88.0}, {130, 89.5}}});
//   Status s = WritePlot(spec, "out.svg");  // or "out.png" when rsvg-convert is installed
//
// The chart has "nice" 1-2-5 tick steps, light grid lines, a legend to the right of the plot and
// a colour-blind-safe palette (Okabe-Ito, cycling after 8 series). Points are drawn in the order
// given (no sorting), so a series may also be a parametric curve. Non-finite points are skipped;
// empty series, single points and all-equal values render without NaN or division by zero.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace aicloud::sim {

struct Series {
  std::string label;
  std::vector<std::pair<double, double>> points;  // (x, y) in data units
};

struct PlotSpec {
  std::string title, x_label, y_label;
  // Unset bounds are chosen from the data (and x_markers), rounded out to a tick. Set bounds are
  // kept exactly; data outside them is clipped at the plot edge. An empty or inverted set range
  // is widened rather than rejected, so a chart always comes out.
  std::optional<double> x_min, x_max, y_min, y_max;
  int width = 900, height = 560;  // SVG user units (pixels); raised to at least 320 x 200
  std::vector<Series> series;
  // Vertical reference lines, e.g. {100, "cluster full"}.
  std::vector<std::pair<double, std::string>> x_markers;
};

// A complete standalone SVG document (UTF-8; labels are XML-escaped).
std::string RenderSvg(const PlotSpec& spec);

// Writes the chart to `path`, chosen by extension (case-insensitive):
//   .svg  the RenderSvg document;
//   .png  the SVG rasterized at 2x (sharp on high-DPI screens) by `rsvg-convert` from Debian's
//         librsvg2-bin; FailedPrecondition naming the tool when it is not on PATH.
// Any other extension is InvalidArgument naming it. I/O failures name the path.
Status WritePlot(const PlotSpec& spec, const std::string& path);

}  // namespace aicloud::sim
