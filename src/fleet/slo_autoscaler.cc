#include "fleet/slo_autoscaler.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace aicloud::fleet {
namespace {

// Step 1b's windows; the snapshot's arrival counters cover 10 s.
constexpr double kArrivalWindowsS[] = {10, 20, 40, 80, 160};
constexpr double kLongestArrivalWindowS = 160;

}  // namespace

SloAutoscaler::SloAutoscaler(SloAutoscalerConfig config)
    : config_(config),
      forecaster_(config.forecast),
      load_(std::max(config.load_window_s, 1.0)),
      recommendations_(std::max(config.scale_down_window_s, 1.0)),
      recent_(kLongestArrivalWindowS),
      bursts_(std::max(config.burst_hold_s, 1.0)),
      history_(kLongestArrivalWindowS) {}

double SloAutoscaler::ArrivalNeed(const SampleWindow& recent, double now_s, double window_s, double tick_s,
                                  double slo_s, double* at_w) {
  // Each sample covers `window_s` and they come a tick apart, so the samples of the last
  // W - window + tick seconds span the last W.
  double need = 0, need_w = 0;
  for (double w : kArrivalWindowsS) {
    const double span = std::max(w - window_s, 0.0) + tick_s;
    const double work = recent.Mean(now_s, span, 0) * w;
    if (work / (w + slo_s) > need) need = work / (w + slo_s), need_w = w;
  }
  if (at_w != nullptr) *at_w = need_w;
  return need;
}

void SloAutoscaler::ObserveHistory(double t_s, double load, double window_s, double ttft_slo_ms) {
  forecaster_.Observe(t_s, load);
  if (ttft_slo_ms <= 0 || !config_.arrival_curve) return;
  history_.Add(t_s, load);
  const double need = ArrivalNeed(history_, t_s, window_s, config_.tick_s, ttft_slo_ms / 1000);
  forecaster_.ObservePeak(t_s, IsBurst(need, history_.Mean(t_s, kLongestArrivalWindowS, 0)) ? need : 0);
}

int SloAutoscaler::Predicted(double now_s, bool with_bursts, std::string* why) const {
  const double u = config_.target_utilization;
  const double burst_u = config_.burst_utilization > 0 ? std::min(u, config_.burst_utilization) : u;
  const auto replicas = [&](double load, double at) {
    return load < config_.forecast_activation ? 0 : static_cast<int>(std::ceil(load / at - 1e-9));
  };
  const double ahead = forecaster_.PeakAhead(now_s, config_.lead_s);
  const double burst = with_bursts ? forecaster_.BurstAhead(now_s, config_.lead_s + config_.burst_early_s) : 0;
  const int by_load = replicas(ahead, u), by_burst = replicas(burst, burst_u);
  if (why != nullptr) {  // formatted only when asked: Recommend asks only when it is the answer
    *why = by_burst > by_load ? fmt::format("ours: a burst learned within {:.0f} s needs {:.2f} replicas at {:.0f}% -> {}",
                                            config_.lead_s + config_.burst_early_s, burst, burst_u * 100, by_burst)
                              : fmt::format("ours: forecast {:.2f} replicas of load within {:.0f} s -> {}", ahead,
                                            config_.lead_s, by_load);
  }
  return std::max(by_load, by_burst);
}

bool SloAutoscaler::IsBurst(double need, double base) const {
  // A burst needs more than one replica: a lone request to an idle deployment (mean ~0) is not one.
  return config_.burst_ratio > 0 && need > config_.burst_ratio * base &&
         std::ceil(need / config_.target_utilization - 1e-9) >= 2;
}

double SloAutoscaler::Load(const DeploymentSnapshot& s) {
  const ReplicaCapacity& c = s.capacity;
  if (c.prefill_tokens_per_s <= 0 || c.decode_tokens_per_s <= 0) {
    return s.InFlight() / std::max(c.max_concurrency, 1.0);
  }
  double generated = 0;
  for (const ReplicaMetrics& r : s.replicas) generated += r.tokens_per_s;
  return s.prompt_tokens_per_s / c.prefill_tokens_per_s + generated / c.decode_tokens_per_s;
}

ScaleDecision SloAutoscaler::Recommend(const DeploymentSnapshot& s) {
  const double now = s.now_s;
  const int ready = s.ready();
  const int current = s.current_replicas;
  const double u = config_.target_utilization;
  const double load = Load(s);
  load_.Add(now, load);
  forecaster_.Observe(now, load);
  const double in_flight = s.InFlight();
  // A deployment found running counts as just active; one found at zero stays there until a
  // request comes (a restarted controller must not wake every idle deployment).
  if (in_flight > 0 || s.arrival_rps > 0 || (last_active_s_ < 0 && current > 0)) last_active_s_ = now;

  // 1. Reactive size from the offered work.
  const double mean_load = load_.Mean(now, config_.load_window_s, load);
  int rec = static_cast<int>(std::ceil(mean_load / u - 1e-9));
  std::string why = fmt::format("ours: load {:.2f} replicas at {:.0f}% -> {}", mean_load, u * 100, rec);

  // 1b. The arrival curve at the SLO's timescale: the work of the last W seconds served within
  // W + D.
  recent_.Add(now, load);
  const bool curve_on = config_.arrival_curve && s.slo.ttft_p99_ms > 0;
  // Without a timescale no burst is seen, and learned ones fade as on days without them.
  if (!curve_on) forecaster_.ObservePeak(now, 0);
  if (curve_on) {
    double need_w = 0;
    const double need = ArrivalNeed(recent_, now, s.window_s, config_.tick_s, s.slo.ttft_p99_ms / 1000, &need_w);
    const int curve = static_cast<int>(std::ceil(need / u - 1e-9));
    // Against the mean of the longest window, which the burst itself moves least.
    const bool burst = IsBurst(need, recent_.Mean(now, kLongestArrivalWindowS, load));
    forecaster_.ObservePeak(now, burst ? need : 0);
    if (burst && config_.burst_hold_s > 0) bursts_.Add(now, curve);
    if (curve > rec) {
      rec = curve;
      why = fmt::format("ours: {:.0f} s of arrivals need {:.2f} replicas within {:.0f} ms at {:.0f}% -> {}", need_w,
                        need, s.slo.ttft_p99_ms, u * 100, rec);
    }
  }

  // 1c. What a recent burst asked for. Nothing once the deployment has been idle long enough to
  // scale to zero: the cluster of bursts is over.
  if (last_active_s_ >= 0 && now - last_active_s_ >= config_.idle_to_zero_s) bursts_.Clear();
  if (!bursts_.empty()) {
    const int held = static_cast<int>(bursts_.Max(now, config_.burst_hold_s, 0));
    if (held > rec) {
      rec = held;
      why = fmt::format("ours: a burst within the last {:.0f} s needed {} -> {}", config_.burst_hold_s, held, rec);
    }
  }

  // 2. Saturation and SLO pressure. One step at a time: while replicas asked for by an earlier
  // step are still starting, another step would only compound the same signal.
  if (ready > 0 && s.starting_replicas == 0) {
    const double queue = static_cast<double>(s.TotalWaiting()) / ready;
    const double kv = s.MeanKvUsage();
    // A long prompt alone can exceed the TTFT objective; only a replica that also has a queue
    // says that more replicas would help.
    double ttft = 0;
    for (const ReplicaMetrics& r : s.replicas) {
      if (r.waiting > 0) ttft = std::max(ttft, r.ttft_p99_ms);
    }
    std::string signal;
    if (queue > config_.queue_per_replica_high) signal = fmt::format("queue {:.1f}/replica", queue);
    else if (kv > config_.kv_high) signal = fmt::format("KV {:.2f}", kv);
    else if (s.slo.ttft_p99_ms > 0 && ttft > config_.ttft_slo_fraction * s.slo.ttft_p99_ms)
      signal = fmt::format("TTFT p99 {:.0f} ms with a queue vs SLO {:.0f}", ttft, s.slo.ttft_p99_ms);
    if (!signal.empty()) {
      const int pressed = ready + std::max(1, static_cast<int>(std::ceil(ready * config_.scale_up_step)));
      if (pressed > rec) {
        rec = pressed;
        why = fmt::format("ours: {} -> {}", signal, rec);
      }
    }
  } else if (ready == 0 && in_flight > 0) {
    rec = std::max(rec, 1);
  }

  // 3. Look ahead one provisioning lead.
  bool by_forecast = false;
  if (config_.predictive) {
    const int predicted = Predicted(now, curve_on);
    if (predicted > rec) {
      rec = predicted;
      by_forecast = true;
      (void)Predicted(now, curve_on, &why);
    }
  }

  const ScaleBounds& b = config_.bounds;
  rec = std::clamp(rec, b.min_replicas, b.max_replicas);
  recommendations_.Add(now, rec);

  // 4. Scale down slowly and not for small differences.
  int desired = rec;
  if (rec < current) {
    const int held = static_cast<int>(recommendations_.Max(now, config_.scale_down_window_s, rec));
    desired = std::min(current, held);
    if (desired >= static_cast<int>(std::ceil(current * (1 - config_.scale_down_tolerance)))) desired = current;
    desired = std::max(desired, static_cast<int>(std::floor(current / config_.max_scale_down_rate)));
    if (desired != rec) why += fmt::format("; down held at {}", desired);
  }

  // 5. Scale to zero after an idle period; wake on demand.
  if (b.min_replicas == 0) {
    const bool idle = in_flight == 0 && s.arrival_rps == 0 &&
                      (last_active_s_ < 0 || now - last_active_s_ >= config_.idle_to_zero_s);
    if (idle && rec == 0) {
      desired = 0;
      why = last_active_s_ < 0 ? std::string("ours: no requests yet, stays at zero")
                               : fmt::format("ours: idle for {:.0f} s, scale to zero", now - last_active_s_);
    } else if (desired == 0 && (!idle || in_flight > 0)) {
      desired = 1;
    }
  }
  desired = std::clamp(desired, b.min_replicas, b.max_replicas);
  return {.desired = desired, .reason = why, .panic = false, .forecast = by_forecast && desired > 0};
}

}  // namespace aicloud::fleet
