#include "sim/plot.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

extern char** environ;

namespace aicloud::sim {
namespace {

// Okabe & Ito (2008), ordered so the first few series get the most distinct hues; yellow is last
// because it is the weakest on white.
constexpr std::array<const char*, 8> kPalette = {
    "#0072B2",  // blue
    "#D55E00",  // vermillion
    "#009E73",  // bluish green
    "#E69F00",  // orange
    "#CC79A7",  // reddish purple
    "#56B4E9",  // sky blue
    "#000000",  // black
    "#F0E442",  // yellow
};

constexpr double kTitleFont = 18;
constexpr double kLabelFont = 14;
constexpr double kTickFont = 12;
constexpr double kLegendFont = 13;
// Data beyond this magnitude is clamped when choosing ranges so that hi - lo stays finite.
constexpr double kHuge = 1e300;
// Pixel coordinates are clamped here; the clip path hides anything this far out anyway.
constexpr double kMaxPixel = 1e6;

// Fixed-point text with `decimals` digits (trailing zeros trimmed when `trim`), never "-0".
// std::to_chars ignores the C locale, so a German LC_NUMERIC cannot turn "1.5" into "1,5".
std::string Num(double v, int decimals = 2, bool trim = true) {
  if (!std::isfinite(v)) v = 0;  // Callers never pass these; a chart must never say "nan".
  std::array<char, 64> buf;
  auto [end, ec] = std::to_chars(buf.data(), buf.data() + buf.size(), v,
                                 std::chars_format::fixed, decimals);
  if (ec != std::errc()) return "0";
  std::string s(buf.data(), end);
  if (trim && s.find('.') != std::string::npos) {
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
  }
  if (s.find_first_not_of("-0.") == std::string::npos && s[0] == '-') s.erase(0, 1);
  return s;
}

// Tick labels keep their trailing zeros ("6.8, 7.0, 7.2"): a column of equal-width numbers
// reads as a scale, "6.8, 7, 7.2" reads as a typo.
std::string TickLabel(double v, int decimals) { return Num(v, decimals, /*trim=*/false); }

// Escapes the five XML specials and drops control characters XML 1.0 cannot carry at all.
std::string XmlEscape(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  for (char c : in) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t') break;
        out += c;
    }
  }
  return out;
}

// Estimated rendered width. SVG has no text metrics before rendering; 0.6 em per code point is
// close to the average of common sans-serif faces, which is all layout needs.
double TextWidth(std::string_view s, double font_size) {
  int code_points = 0;
  for (char c : s) code_points += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return code_points * font_size * 0.6;
}

// The 1-2-5 step closest to `rough`: readers add 20s and 50s in their heads, not 17s.
double NiceStep(double rough) {
  if (!(rough > 0) || !std::isfinite(rough)) return 1;
  double magnitude = std::pow(10.0, std::floor(std::log10(rough)));
  double residual = rough / magnitude;
  double nice = residual < 1.5 ? 1 : residual < 3 ? 2 : residual < 7 ? 5 : 10;
  return nice * magnitude;
}

struct Axis {
  double lo = 0, hi = 1;
  double step = 1;
  std::vector<double> ticks;
  int decimals = 0;  // for tick labels: enough to tell neighbouring ticks apart

  // Pixel position of `v` on an axis drawn from pixel `p0` (lo) to `p1` (hi).
  double Map(double v, double p0, double p1) const {
    double p = p0 + (v - lo) / (hi - lo) * (p1 - p0);
    return std::clamp(p, -kMaxPixel, kMaxPixel);
  }
};

// Resolves one axis: explicit bounds win, unset ones come from [data_lo, data_hi] (empty when
// data_lo > data_hi) rounded outwards to a tick. `target_ticks` is a hint, not a promise.
Axis ResolveAxis(std::optional<double> set_lo, std::optional<double> set_hi, double data_lo,
                 double data_hi, int target_ticks) {
  bool has_lo = set_lo && std::isfinite(*set_lo);
  bool has_hi = set_hi && std::isfinite(*set_hi);
  bool has_data = data_lo <= data_hi;
  Axis a;
  a.lo = has_lo ? *set_lo : has_data ? data_lo : 0;
  a.hi = has_hi ? *set_hi : has_data ? data_hi : (has_lo ? a.lo + 1 : 1);
  a.lo = std::clamp(a.lo, -kHuge, kHuge);
  a.hi = std::clamp(a.hi, -kHuge, kHuge);
  if (a.lo > a.hi) std::swap(a.lo, a.hi);
  // A zero-width range (one point, all-equal values, x_min == x_max) would divide by zero when
  // mapping; widen it around the value so a flat line sits mid-plot.
  if (a.hi - a.lo <= 1e-12 * std::max({std::abs(a.lo), std::abs(a.hi), 1e-300})) {
    double pad = a.lo == 0 ? 1 : std::abs(a.lo) * 0.1;
    a.lo -= pad;
    a.hi += pad;
    has_lo = has_hi = false;  // both sides moved, so both may be rounded to ticks
  }
  a.step = NiceStep((a.hi - a.lo) / std::max(target_ticks, 1));
  if (!has_lo) a.lo = std::floor(a.lo / a.step + 1e-9) * a.step;
  if (!has_hi) a.hi = std::ceil(a.hi / a.step - 1e-9) * a.step;
  // Ticks are integer multiples of the step, computed by multiplication so that 0.1 + 0.2 drift
  // never prints 0.30000000000000004 or misses the last tick.
  double first = std::ceil(a.lo / a.step - 1e-9);
  for (int i = 0; i < 60; ++i) {
    double t = (first + i) * a.step;
    if (t > a.hi + a.step * 1e-9) break;
    if (std::abs(t) < a.step * 1e-9) t = 0;
    a.ticks.push_back(t);
  }
  a.decimals =
      a.step >= 1 ? 0 : std::min(12, static_cast<int>(std::ceil(-std::log10(a.step) - 1e-9)));
  return a;
}

// Snaps a 1-unit line to the pixel grid (x.5) so it renders crisp at 1x and 2x instead of as a
// blurred 2-pixel band.
double Crisp(double p) { return std::floor(p) + 0.5; }

void AppendLine(std::string& out, double x1, double y1, double x2, double y2) {
  out += "<line x1=\"" + Num(x1) + "\" y1=\"" + Num(y1) + "\" x2=\"" + Num(x2) + "\" y2=\"" +
         Num(y2) + "\"/>\n";
}

void AppendText(std::string& out, double x, double y, std::string_view text,
                std::string_view extra_attrs = {}) {
  out += "<text x=\"" + Num(x) + "\" y=\"" + Num(y) + "\"";
  if (!extra_attrs.empty()) {
    out += ' ';
    out += extra_attrs;
  }
  out += ">" + XmlEscape(text) + "</text>\n";
}

}  // namespace

std::string RenderSvg(const PlotSpec& spec) {
  const double width = std::max(spec.width, 320);
  const double height = std::max(spec.height, 200);

  // Finite points only, and the data extent over them (plus markers, so "cluster full" shows).
  std::vector<std::vector<std::pair<double, double>>> clean(spec.series.size());
  double x_lo = INFINITY, x_hi = -INFINITY, y_lo = INFINITY, y_hi = -INFINITY;
  for (size_t i = 0; i < spec.series.size(); ++i) {
    for (const auto& [x, y] : spec.series[i].points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      clean[i].emplace_back(x, y);
      x_lo = std::min(x_lo, x);
      x_hi = std::max(x_hi, x);
      y_lo = std::min(y_lo, y);
      y_hi = std::max(y_hi, y);
    }
  }
  for (const auto& [x, label] : spec.x_markers) {
    if (!std::isfinite(x)) continue;
    x_lo = std::min(x_lo, x);
    x_hi = std::max(x_hi, x);
  }

  // Layout, outside in: vertical margins fix the plot height, which fixes the y ticks, whose
  // label widths fix the left margin; the legend fixes the right margin; then the x ticks.
  const double top = spec.title.empty() ? 24 : 56;
  const double bottom = spec.x_label.empty() ? 36 : 64;
  const double plot_h = height - top - bottom;
  const Axis y_axis = ResolveAxis(spec.y_min, spec.y_max, y_lo, y_hi,
                                  std::clamp(static_cast<int>(plot_h / 60), 2, 10));
  double y_tick_w = 0;
  for (double t : y_axis.ticks) {
    y_tick_w = std::max(y_tick_w, TextWidth(TickLabel(t, y_axis.decimals), kTickFont));
  }
  // Capped so that absurd tick labels (values near 1e300) cannot push the plot off the canvas.
  const double left = std::round(
      std::min(16 + (spec.y_label.empty() ? 0 : kLabelFont + 12) + y_tick_w + 10, width * 0.4));

  bool any_label = false;
  double legend_text_w = 0;
  for (const Series& s : spec.series) {
    if (s.label.empty()) continue;
    any_label = true;
    legend_text_w = std::max(legend_text_w, TextWidth(s.label, kLegendFont));
  }
  constexpr double kSwatch = 24, kPad = 12, kRow = 22;
  // The legend never takes more than 35% of the width; a longer label overruns its box rather
  // than squeezing the plot to nothing.
  const double legend_w =
      any_label ? std::min(kPad + kSwatch + 8 + legend_text_w + kPad, width * 0.35) : 0;
  const double right = any_label ? legend_w + 16 + 12 : 28;
  const double plot_w = width - left - right;
  const Axis x_axis = ResolveAxis(spec.x_min, spec.x_max, x_lo, x_hi,
                                  std::clamp(static_cast<int>(plot_w / 90), 2, 10));

  const double px0 = left, px1 = left + plot_w;          // x: lo -> hi
  const double py0 = top + plot_h, py1 = top;            // y: lo -> hi (SVG y grows downward)
  auto map_x = [&](double v) { return x_axis.Map(v, px0, px1); };
  auto map_y = [&](double v) { return y_axis.Map(v, py0, py1); };

  std::string out;
  out.reserve(8192);
  out += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + Num(width) + "\" height=\"" +
         Num(height) + "\" viewBox=\"0 0 " + Num(width) + " " + Num(height) +
         "\" font-family=\"'DejaVu Sans', 'Helvetica Neue', Helvetica, Arial, sans-serif\">\n";
  if (!spec.title.empty()) out += "<title>" + XmlEscape(spec.title) + "</title>\n";
  // An opaque background: PNGs and dark-mode viewers would otherwise show black or checkers.
  out += "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n";
  const std::string plot_rect = "x=\"" + Num(px0) + "\" y=\"" + Num(py1) + "\" width=\"" +
                                Num(plot_w) + "\" height=\"" + Num(plot_h) + "\"";
  // Data outside explicit bounds is cut at the plot edge instead of spilling over the labels.
  out += "<defs><clipPath id=\"plot-clip\"><rect " + plot_rect + "/></clipPath></defs>\n";
  out += "<rect class=\"plot-area\" " + plot_rect + " fill=\"#ffffff\"/>\n";

  // Grid first so that everything else draws over it.
  out += "<g class=\"grid\" stroke=\"#e6e6e6\" stroke-width=\"1\">\n";
  for (double t : x_axis.ticks) AppendLine(out, Crisp(map_x(t)), py1, Crisp(map_x(t)), py0);
  for (double t : y_axis.ticks) AppendLine(out, px0, Crisp(map_y(t)), px1, Crisp(map_y(t)));
  out += "</g>\n";

  // Axes: left and bottom only, with short outward ticks; a full frame adds ink, not information.
  out += "<g class=\"axes\" stroke=\"#555555\" stroke-width=\"1\">\n";
  AppendLine(out, Crisp(px0), py1, Crisp(px0), py0 + 0.5);
  AppendLine(out, px0 - 0.5, Crisp(py0), px1, Crisp(py0));
  for (double t : x_axis.ticks) {
    AppendLine(out, Crisp(map_x(t)), Crisp(py0), Crisp(map_x(t)), py0 + 5);
  }
  for (double t : y_axis.ticks) {
    AppendLine(out, px0 - 5, Crisp(map_y(t)), Crisp(px0), Crisp(map_y(t)));
  }
  out += "</g>\n";

  out += "<g class=\"x-ticks\" font-size=\"" + Num(kTickFont) +
         "\" fill=\"#444444\" text-anchor=\"middle\">\n";
  for (double t : x_axis.ticks) AppendText(out, map_x(t), py0 + 20, TickLabel(t, x_axis.decimals));
  out += "</g>\n";
  out += "<g class=\"y-ticks\" font-size=\"" + Num(kTickFont) +
         "\" fill=\"#444444\" text-anchor=\"end\">\n";
  for (double t : y_axis.ticks) {
    AppendText(out, px0 - 9, map_y(t) + kTickFont * 0.35, TickLabel(t, y_axis.decimals));
  }
  out += "</g>\n";

  out += "<g class=\"axis-labels\" font-size=\"" + Num(kLabelFont) + "\" fill=\"#222222\" " +
         "text-anchor=\"middle\">\n";
  if (!spec.x_label.empty()) AppendText(out, px0 + plot_w / 2, py0 + 46, spec.x_label);
  if (!spec.y_label.empty()) {
    const double lx = 16 + kLabelFont * 0.8, ly = py1 + plot_h / 2;
    AppendText(out, lx, ly, spec.y_label,
               "transform=\"rotate(-90 " + Num(lx) + " " + Num(ly) + ")\"");
  }
  out += "</g>\n";

  // Reference lines under the data, labels on top of the plot with a white halo so a curve
  // passing behind them does not make them unreadable.
  out += "<g class=\"markers\" stroke=\"#777777\" stroke-width=\"1.2\" stroke-dasharray=\"5 4\">\n";
  for (const auto& [x, label] : spec.x_markers) {
    if (!std::isfinite(x) || x < x_axis.lo || x > x_axis.hi) continue;
    AppendLine(out, Crisp(map_x(x)), py1, Crisp(map_x(x)), py0);
  }
  out += "</g>\n";

  out += "<g class=\"series\" clip-path=\"url(#plot-clip)\" fill=\"none\" stroke-width=\"2\" "
         "stroke-linejoin=\"round\" stroke-linecap=\"round\">\n";
  // Drawn last to first so that where curves coincide (every policy allocates everything while
  // demand is low) the first series, usually the one the chart is about, stays on top.
  for (size_t i = clean.size(); i-- > 0;) {
    if (clean[i].empty()) continue;
    const char* colour = kPalette[i % kPalette.size()];
    out += "<polyline stroke=\"";
    out += colour;
    out += "\" points=\"";
    for (size_t j = 0; j < clean[i].size(); ++j) {
      if (j > 0) out += ' ';
      out += Num(map_x(clean[i][j].first)) + "," + Num(map_y(clean[i][j].second));
    }
    out += "\"/>\n";
    // A one-point polyline draws nothing; give the lone point a dot.
    if (clean[i].size() == 1) {
      out += "<circle cx=\"" + Num(map_x(clean[i][0].first)) + "\" cy=\"" +
             Num(map_y(clean[i][0].second)) + "\" r=\"3.5\" fill=\"" + colour +
             "\" stroke=\"none\"/>\n";
    }
  }
  out += "</g>\n";

  out += "<g class=\"marker-labels\" font-size=\"" + Num(kTickFont) + "\" fill=\"#444444\" " +
         "stroke=\"#ffffff\" stroke-width=\"3\" paint-order=\"stroke\">\n";
  for (const auto& [x, label] : spec.x_markers) {
    if (!std::isfinite(x) || x < x_axis.lo || x > x_axis.hi || label.empty()) continue;
    // Label on the side of the line with more room, so one near the right edge stays inside.
    const bool right_half = map_x(x) > px0 + plot_w / 2;
    AppendText(out, map_x(x) + (right_half ? -6 : 6), py1 + 16, label,
               right_half ? "text-anchor=\"end\"" : "text-anchor=\"start\"");
  }
  out += "</g>\n";

  if (any_label) {
    int rows = 0;
    for (const Series& s : spec.series) rows += !s.label.empty();
    const double lx = px1 + 16, ly = py1;
    out += "<g class=\"legend\" font-size=\"" + Num(kLegendFont) + "\" fill=\"#222222\">\n";
    out += "<rect x=\"" + Num(Crisp(lx)) + "\" y=\"" + Num(Crisp(ly)) + "\" width=\"" +
           Num(std::round(legend_w)) + "\" height=\"" +
           Num(std::round(rows * kRow + 2 * kPad - 6)) +
           "\" rx=\"4\" fill=\"#ffffff\" stroke=\"#d0d0d0\"/>\n";
    int row = 0;
    for (size_t i = 0; i < spec.series.size(); ++i) {
      if (spec.series[i].label.empty()) continue;
      const double cy = ly + kPad + row * kRow + kRow / 2 - 3;
      out += "<line x1=\"" + Num(lx + kPad) + "\" y1=\"" + Num(cy) + "\" x2=\"" +
             Num(lx + kPad + kSwatch) + "\" y2=\"" + Num(cy) + "\" stroke=\"" +
             kPalette[i % kPalette.size()] + "\" stroke-width=\"2.5\" stroke-linecap=\"round\"/>\n";
      AppendText(out, lx + kPad + kSwatch + 8, cy + kLegendFont * 0.35, spec.series[i].label);
      ++row;
    }
    out += "</g>\n";
  }

  if (!spec.title.empty()) {
    AppendText(out, px0, 34, spec.title,
               "class=\"title\" font-size=\"" + Num(kTitleFont) +
                   "\" font-weight=\"600\" fill=\"#111111\"");
  }
  out += "</svg>\n";
  return out;
}

namespace {

// errno -> the closest canonical code, with the path and the system's words in the message.
Status ErrnoError(int err, const std::string& what) {
  std::string msg = what + ": " + std::strerror(err);
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return NotFoundError(std::move(msg));
    case EACCES:
    case EPERM:
    case EROFS:
      return Status(StatusCode::kPermissionDenied, std::move(msg));
    default:
      return InternalError(std::move(msg));
  }
}

Status WriteFile(const std::string& path, std::string_view data) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return ErrnoError(errno, "cannot write plot " + path);
  size_t written = std::fwrite(data.data(), 1, data.size(), f);
  int write_errno = errno;
  if (std::fclose(f) != 0 || written != data.size()) {
    return ErrnoError(written != data.size() ? write_errno : errno, "cannot write plot " + path);
  }
  return OkStatus();
}

// Temporary files removed when the conversion is done, however it ends.
class TempFiles {
 public:
  ~TempFiles() {
    for (const std::string& p : paths_) ::unlink(p.c_str());
  }
  // Creates an empty file "<TMPDIR>/aicloud-plot-XXXXXX<suffix>"; returns its fd, or -1.
  int Create(const std::string& suffix, std::string* path) {
    const char* dir = std::getenv("TMPDIR");
    std::string name = std::string(dir != nullptr && *dir != '\0' ? dir : "/tmp") +
                       "/aicloud-plot-XXXXXX" + suffix;
    int fd = ::mkstemps(name.data(), static_cast<int>(suffix.size()));
    if (fd >= 0) paths_.push_back(name);
    *path = name;
    return fd;
  }

 private:
  std::vector<std::string> paths_;
};

std::string ReadSmallFile(const std::string& path) {
  std::string text;
  if (std::FILE* f = std::fopen(path.c_str(), "rb")) {
    std::array<char, 512> buf;
    size_t n = std::fread(buf.data(), 1, buf.size(), f);
    text.assign(buf.data(), n);
    std::fclose(f);
  }
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  return text;
}

// SVG -> PNG through rsvg-convert. posix_spawnp rather than system(): no shell, so a path with
// spaces or quotes needs no escaping, and a missing tool is a clean ENOENT instead of exit 127.
Status ConvertToPng(const std::string& svg, const std::string& path) {
  TempFiles temps;
  std::string svg_path, err_path;
  int svg_fd = temps.Create(".svg", &svg_path);
  if (svg_fd < 0) return ErrnoError(errno, "cannot create temporary file " + svg_path);
  ::close(svg_fd);
  AICLOUD_RETURN_IF_ERROR(WriteFile(svg_path, svg));
  int err_fd = temps.Create(".err", &err_path);
  if (err_fd < 0) return ErrnoError(errno, "cannot create temporary file " + err_path);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, err_fd, STDERR_FILENO);
  std::vector<std::string> args = {"rsvg-convert", "--zoom", "2", "--format", "png",
                                   "--output", path, svg_path};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  int rc = ::posix_spawnp(&pid, "rsvg-convert", &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(err_fd);
  if (rc == ENOENT) {
    return FailedPreconditionError(
        "cannot write " + path + ": PNG output needs rsvg-convert, which is not on PATH; "
        "install it (Debian: apt-get install librsvg2-bin) or write a .svg file instead");
  }
  if (rc != 0) return ErrnoError(rc, "cannot run rsvg-convert for " + path);

  int wstatus = 0;
  while (::waitpid(pid, &wstatus, 0) < 0) {
    if (errno != EINTR) return ErrnoError(errno, "waiting for rsvg-convert for " + path);
  }
  if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) return OkStatus();
  std::string how = WIFEXITED(wstatus) ? "exit status " + std::to_string(WEXITSTATUS(wstatus))
                                       : "signal " + std::to_string(WTERMSIG(wstatus));
  std::string detail = ReadSmallFile(err_path);
  return InternalError("rsvg-convert failed to write " + path + " (" + how + ")" +
                       (detail.empty() ? "" : ": " + detail));
}

}  // namespace

Status WritePlot(const PlotSpec& spec, const std::string& path) {
  // The extension belongs to the last path component: "out.d/plot" has none.
  const size_t slash = path.find_last_of('/');
  const size_t dot = path.find_last_of('.');
  std::string ext;
  if (dot != std::string::npos && (slash == std::string::npos || dot > slash)) {
    ext = path.substr(dot + 1);
    std::transform(ext.begin(), ext.end(), ext.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  }
  if (ext == "svg") return WriteFile(path, RenderSvg(spec));
  if (ext == "png") return ConvertToPng(RenderSvg(spec), path);
  if (ext.empty()) {
    return InvalidArgumentError("plot file " + path + " has no extension; use .svg or .png");
  }
  return InvalidArgumentError("plot file " + path + ": unsupported extension '." + ext +
                              "'; use .svg or .png");
}

}  // namespace aicloud::sim
