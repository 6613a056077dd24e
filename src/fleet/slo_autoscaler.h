// SloAutoscaler ("ours"): sizes a deployment from the work it is offered, corrects on SLO and
// saturation signals, and looks ahead by the time a new replica takes to become ready.
//
// Each tick (5 s):
//   1. load    L = prompt tokens/s / capacity.prefill_tokens_per_s
//                + generated tokens/s / capacity.decode_tokens_per_s
//              (replicas' worth of work at 100%; in-flight / max_concurrency when the capacity
//              has no token rates). Prompt tokens come from the gateway's arrival counters,
//              generated tokens from the replicas' own tokens/s. The reactive size is
//              ceil(mean L over `load_window_s` / target_utilization).
//   1b. arrival curve  with a TTFT SLO: the work that arrived over each of the last 10, 20,
//              40, 80 and 160 s (W), served within W + the SLO (D) — the fluid bound under which
//              no request waits longer than D — is max(work_W / (W + D)) replicas; the size is at
//              least that / target_utilization. A 10-second burst that the 30 s mean dilutes
//              counts at its own timescale, and step 4 holds it for the stabilization window.
//   1c. burst hold  when that need is above `burst_ratio` (2) x the mean load of the last 160 s,
//              the load came as a burst, and the size it asked for is kept `burst_hold_s` (600 s).
//              Bursts come in clusters (Azure code: 10-20 s bursts, median gap 60 s), and a
//              replica asked for when the next one arrives is ready 40-210 s later, after it;
//              the fleet the last burst needed is there for the next. Smooth load (Azure conv)
//              never reaches 2x and never holds; a burst needs at least 2 replicas, and
//              `idle_to_zero_s` without a request forgets every burst.
//   2. pressure  when waiting requests per ready replica exceed `queue_per_replica_high` (GIE
//              saturation detector: 5), mean KV usage exceeds `kv_high` (GIE: 0.8), or a
//              replica with a queue reports TTFT p99 above `ttft_slo_fraction` of the SLO: at
//              least ready x (1 + scale_up_step). Not again while replicas from an earlier step
//              are starting, so one signal does not compound.
//   3. predict the LoadForecaster's highest forecast over the next `lead_s` (provisioning delay
//              + cold start), divided by the target utilization: replicas are asked for one lead
//              time before a learned rise. A forecast under `forecast_activation` asks for none.
//              With a TTFT SLO, also the learned bursts (step 1c's need, the most of each bin,
//              held across periods with decay, and per bin the bursts of the last two periods
//              that had one): over the bins of the next `lead_s` + `burst_early_s`, what came
//              on `forecast.burst_min_periods` (2) different days — the second largest of the
//              per-day maxima, capped by the decayed profile — at `burst_utilization`: replicas
//              are ready when a burst that came at about this time of day comes again, which no
//              reaction can be (Azure code: 1.1M prompt tokens in the minute after two silent
//              ones). A burst may come `burst_early_s` before the time it was learned at, and its
//              work arrives within seconds that the 10 s counters average, so it is planned with
//              more headroom.
//   4. down    the highest recommendation of the last `scale_down_window_s` (HPA-style
//              stabilization, shorter than HPA's 300 s because 3 covers rises), no move inside a
//              10% band, at most halving per tick (AIBrix's max-scale-down-rate 2).
//   5. zero    with bounds.min_replicas == 0: nothing arrived or in flight for `idle_to_zero_s`
//              (KEDA's cooldownPeriod, 300 s) and no rise forecast -> 0. Requests held at the
//              gateway wake it to >= 1. A deployment first seen at zero (a restarted controller)
//              stays at zero until a request comes or a rise is forecast; one first seen
//              running counts as just active.
#pragma once

#include "fleet/autoscaler.h"
#include "fleet/forecaster.h"
#include "fleet/window.h"

namespace aicloud::fleet {

struct SloAutoscalerConfig {
  ScaleBounds bounds{0, 100};
  double tick_s = 5;
  double target_utilization = 0.7;
  double load_window_s = 30;
  bool arrival_curve = true;    // step 1b
  double queue_per_replica_high = 5;
  double kv_high = 0.8;
  double ttft_slo_fraction = 0.8;
  double scale_up_step = 0.5;
  double scale_down_tolerance = 0.1;
  double scale_down_window_s = 180;
  // Step 1c: arrivals at the SLO's timescale above burst_ratio x the mean load of the last 160 s
  // are a burst, and the replicas it asked for are kept burst_hold_s (0 = off).
  double burst_ratio = 2;
  double burst_hold_s = 600;
  // Step 3: a learned burst is looked for this much beyond the lead, and sized at this share of
  // a replica's capacity (the lower of it and target_utilization; <= 0: target_utilization).
  double burst_early_s = 120;
  double burst_utilization = 0.6;
  double max_scale_down_rate = 2;
  double idle_to_zero_s = 300;
  double lead_s = 210;          // 180 s node provisioning + 30 s replica cold start
  bool predictive = true;
  // A forecast of less load than this (replicas' worth) asks for nothing: it neither wakes a
  // deployment at zero nor keeps one up (KEDA's activationThreshold: the 0 <-> 1 step has its
  // own, higher bar than the scaling between replicas).
  double forecast_activation = 0.1;
  ForecasterConfig forecast;
};

class SloAutoscaler final : public Autoscaler {
 public:
  explicit SloAutoscaler(SloAutoscalerConfig config);
  std::string_view name() const override { return "ours"; }
  double tick_seconds() const override { return config_.tick_s; }
  ScaleDecision Recommend(const DeploymentSnapshot& s) override;

  // Feeds the forecaster a past load sample (replicas' worth of work, step 1's L, over the
  // `window_s` before t_s; samples a tick apart) without deciding anything: the simulator warms
  // it from the days before the replayed one. With `ttft_slo_ms` > 0 the sample's arrival-curve
  // need (step 1b) also enters the burst profile.
  void ObserveHistory(double t_s, double load, double window_s, double ttft_slo_ms);
  // Step 3 alone: the replicas the forecasts ask for at now_s (0 without a learned rise or
  // burst; learned bursts only `with_bursts`, i.e. with a TTFT SLO and step 1b on), and why. A
  // simulator starts a run with them, as if the controller had been running.
  int Predicted(double now_s, bool with_bursts, std::string* why = nullptr) const;
  // Step 1's L for a snapshot.
  static double Load(const DeploymentSnapshot& s);
  // Step 1b over `recent` (step 1's L, samples `tick_s` apart, each the mean of the `window_s`
  // before it): the replicas at 100% that serve every recent stretch of arrivals within its
  // length plus `slo_s`; *at_w (optional) gets the stretch that needs the most.
  static double ArrivalNeed(const SampleWindow& recent, double now_s, double window_s, double tick_s,
                            double slo_s, double* at_w = nullptr);
  const LoadForecaster& forecaster() const { return forecaster_; }
  LoadForecaster* learned() override { return &forecaster_; }

 private:
  // Step 1c's test: `need` (step 1b) against `base`, the mean load of the last 160 s.
  bool IsBurst(double need, double base) const;

  SloAutoscalerConfig config_;
  LoadForecaster forecaster_;
  SampleWindow load_;
  SampleWindow recommendations_;
  SampleWindow recent_;  // step 1's L, over the longest arrival-curve window
  SampleWindow bursts_;   // step 1c: sizes asked for by bursts
  SampleWindow history_;  // ObserveHistory's step 1's L, for its arrival-curve need
  double last_active_s_ = -1;
};

}  // namespace aicloud::fleet
