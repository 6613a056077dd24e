#include "control/deployment_controller.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <future>
#include <optional>
#include <set>
#include <system_error>

#include <spdlog/spdlog.h>

#include "core/thread_name.h"
#include "auth/auth.h"
#include "control/job.h"
#include "control/replica_secret.h"
#include "http/client.h"

namespace aicloud::control {
namespace {

using nlohmann::json;

std::string Label(const json& object, const std::string& key) {
  const json& meta = object.value("metadata", json::object());
  const json& labels = meta.value("labels", json::object());
  return labels.is_object() ? labels.value(key, std::string()) : std::string();
}

std::string NameOf(const json& object) { return object["metadata"].value("name", std::string()); }
std::string TenantOf(const json& object) { return object["metadata"].value("tenant", std::string()); }

// status.forecast: the load profile an autoscaler learned, per bin of the period (null: not
// learned yet), and its burst profile once a burst came, rounded so that a status does not change
// for noise.
json ForecastStatus(const fleet::LoadForecaster& f) {
  json profile = json::array();
  for (double v : f.profile()) profile.push_back(v < 0 ? json(nullptr) : json(std::round(v * 1e4) / 1e4));
  json out = {{"periodS", f.config().period_s},
              {"binS", f.config().bin_s},
              {"learnedBins", f.learned_bins()},
              {"profile", std::move(profile)}};
  // The burst profile (the most of step 1b's need per bin), once a burst came, and per bin the
  // bursts of the last two days (periods since the epoch) that had one there: [day, need].
  if (std::any_of(f.peaks().begin(), f.peaks().end(), [](double v) { return v > 0; })) {
    json peaks = json::array(), days = json::array();
    for (double v : f.peaks()) peaks.push_back(v < 0 ? json(nullptr) : json(std::round(v * 1e4) / 1e4));
    for (const fleet::LoadForecaster::BurstSightings& seen : f.burst_sightings()) {
      json bin = json::array();
      for (const fleet::LoadForecaster::BurstSighting& b : seen) {
        if (b.period != fleet::LoadForecaster::kNoPeriod) bin.push_back({b.period, std::round(b.need * 1e4) / 1e4});
      }
      days.push_back(bin.empty() ? json(nullptr) : std::move(bin));
    }
    out["peaks"] = std::move(peaks);
    out["burstDays"] = std::move(days);
  }
  return out;
}

// status.history with `revision` last: appended with its spec when new, moved to the end when
// an older revision comes back (a rollback). At most kHistoryLimit entries; the stable
// revision's entry is never dropped (a canary needs it to make stable replicas).
json RecordRevision(json history, const std::string& revision, const json& spec, const std::string& stable) {
  if (!history.is_array()) history = json::array();
  json entry;
  for (auto it = history.begin(); it != history.end(); ++it) {
    if (it->is_object() && it->value("revision", std::string()) == revision) {
      entry = *it;
      history.erase(it);
      break;
    }
  }
  if (entry.is_null()) entry = {{"revision", revision}, {"createdAt", NowRfc3339()}};
  entry["spec"] = spec;  // what a rollback writes back (scaling fields included, see rollout undo)
  history.push_back(std::move(entry));
  for (size_t i = 0; history.size() > static_cast<size_t>(kHistoryLimit) && i < history.size();) {
    if (history[i].value("revision", std::string()) == stable) {
      ++i;
    } else {
      history.erase(history.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
  return history;
}

// The stable revision's spec from history, if a canary can run beside `current`: the two must
// serve the same model and adapter names (the gateway routes one name to both).
std::optional<DeploymentSpec> StableSpec(const json& history, const std::string& stable, const DeploymentSpec& current,
                                         const std::string& name, std::string* why) {
  for (const json& h : history) {
    if (h.value("revision", std::string()) != stable) continue;
    StatusOr<DeploymentSpec> s = ParseDeploymentSpec(h.value("spec", json::object()), name);
    if (!s.ok()) {
      *why = "stable revision " + stable + ": " + std::string(s.status().message());
      return std::nullopt;
    }
    std::vector<std::string> a, b;
    for (const auto& [n, p] : s->adapters) a.push_back(n);
    for (const auto& [n, p] : current.adapters) b.push_back(n);
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    if (s->served_model_name != current.served_model_name || a != b) {
      *why = "the new revision serves other model or adapter names than stable revision " + stable;
      return std::nullopt;
    }
    if (s->Revision() != stable) {
      *why = "history entry of stable revision " + stable + " does not hash to it";
      return std::nullopt;
    }
    return *s;
  }
  *why = "stable revision " + stable + " is not in status.history";
  return std::nullopt;
}

bool Terminal(const std::string& phase) { return phase == "Succeeded" || phase == "Failed"; }

std::string PhaseOf(const json& job) {
  const json& st = job.value("status", json::object());
  return st.is_object() ? st.value("phase", std::string("Pending")) : std::string("Pending");
}

std::string NodeOf(const json& job) {
  const json& st = job.value("status", json::object());
  if (!st.is_object() || !st.contains("workers") || st["workers"].empty()) return "";
  return st["workers"][0].value("node", std::string());
}

// The value after `flag` in a replica job's command ("" when its command has none).
std::string CommandFlag(const json& job, std::string_view flag) {
  const json& spec = job.value("spec", json::object());
  const json command = spec.is_object() ? spec.value("command", json::array()) : json::array();
  if (!command.is_array()) return "";
  for (size_t i = 0; i + 1 < command.size(); ++i) {
    if (command[i] == flag && command[i + 1].is_string()) return command[i + 1].get<std::string>();
  }
  return "";
}

// A replica's good probes, oldest first: the newest appended, those older than the longest
// window dropped (one older is kept, so a full window can be measured). A counter that fell (the
// engine restarted) starts the history again.
void AddSample(std::deque<std::pair<int64_t, ReplicaProbe>>* samples, int64_t now_us, const ReplicaProbe& p) {
  if (!p.metrics) return;  // /metrics did not answer: no sample
  if (!samples->empty()) {
    const ReplicaProbe& last = samples->back().second;
    // A histogram that went missing is a page without it, not a restart: no sample.
    if ((p.ttft.empty() && !last.ttft.empty()) || (p.itl.empty() && !last.itl.empty())) return;
    if (p.prompt_tokens < last.prompt_tokens || p.generation_tokens < last.generation_tokens ||
        p.ttft.count < last.ttft.count || p.itl.count < last.itl.count) {
      samples->clear();
    }
  }
  samples->emplace_back(now_us, p);
  while (samples->size() > 2 && now_us - (*samples)[1].first >= kObservedWindowUs) samples->pop_front();
}

Observed Over(const std::deque<std::pair<int64_t, ReplicaProbe>>& samples, int64_t now_us, int64_t window_us) {
  if (samples.size() < 2) return {};
  // The newest sample at least window_us old, else the oldest.
  size_t first = samples.size() - 2;
  while (first > 0 && now_us - samples[first].first < window_us) --first;
  const auto& [t0, a] = samples[first];
  const auto& [t1, b] = samples.back();
  Observed o;
  o.seconds = static_cast<double>(t1 - t0) / 1e6;
  if (o.seconds < 1) return {};
  o.prompt_tokens = b.prompt_tokens - a.prompt_tokens;
  o.generation_tokens = b.generation_tokens - a.generation_tokens;
  o.ttft = b.ttft.Minus(a.ttft);
  o.itl = b.itl.Minus(a.itl);
  return o;
}

// v with `digits` decimals (a value JSON prints without float noise).
double Rounded(double v, int digits) {
  const double k = std::pow(10.0, digits);
  return std::round(v * k) / k;
}

// Mean DCGM_FI_DEV_GPU_UTIL of the GPUs allocated to a replica's workers (each on its node, from
// that node's last report, `report(node)`); -1 when the replica holds no GPU or no node reported
// any of its GPUs.
double GpuUtilization(const json& job, const std::function<const json&(const std::string&)>& report) {
  const json* status = job.contains("status") ? &job["status"] : nullptr;
  if (status == nullptr || !status->is_object() || !status->contains("workers")) return -1;
  const json& workers = (*status)["workers"];
  if (!workers.is_array()) return -1;
  double sum = 0;
  int n = 0;
  std::set<std::pair<std::string, int64_t>> counted;  // (node, GPU index): a shared GPU counts once
  for (const json& w : workers) {
    if (!w.is_object() || !w.contains("allocation") || !w.contains("node") || !w["node"].is_string()) continue;
    const json& alloc = w["allocation"];
    if (!alloc.is_object() || !alloc.contains("gpus") || !alloc["gpus"].is_array()) continue;
    const json& node_metrics = report(w["node"].get<std::string>());
    if (!node_metrics.is_object() || !node_metrics.contains("gpus") || !node_metrics["gpus"].is_array()) continue;
    for (const json& g : alloc["gpus"]) {
      if (!g.is_object() || !g.contains("index") || !g["index"].is_number_integer()) continue;
      if (!counted.insert({w["node"].get<std::string>(), g["index"].get<int64_t>()}).second) continue;
      for (const json& r : node_metrics["gpus"]) {
        if (r.is_object() && r.contains("index") && r["index"] == g["index"] && r.contains("DCGM_FI_DEV_GPU_UTIL") &&
            r["DCGM_FI_DEV_GPU_UTIL"].is_number()) {
          sum += r["DCGM_FI_DEV_GPU_UTIL"].get<double>();
          ++n;
          break;
        }
      }
    }
  }
  return n > 0 ? sum / n : -1;
}

}  // namespace

json ObservedStatus(const std::vector<const Observed*>& replicas, const DeploymentSpec& spec) {
  double seconds = 0, prompt_per_s = 0, generation_per_s = 0, gpu_sum = 0, requests = 0;
  int gpu_n = 0;
  LatencyHistogram ttft, itl;  // replicas whose engines bucket otherwise are left out of these
  auto add = [](LatencyHistogram* sum, const LatencyHistogram& h) {
    if (h.empty()) return;
    if (sum->empty()) {
      *sum = h;
    } else if (sum->le == h.le) {
      for (size_t i = 0; i < h.le.size(); ++i) sum->cumulative[i] += h.cumulative[i];
      sum->count += h.count;
    }
  };
  for (const Observed* o : replicas) {
    if (o->gpu_utilization_pct >= 0) gpu_sum += o->gpu_utilization_pct, ++gpu_n;
    if (o->seconds <= 0) continue;
    seconds = std::max(seconds, o->seconds);
    requests += o->ttft.count;
    prompt_per_s += o->prompt_tokens / o->seconds;
    generation_per_s += o->generation_tokens / o->seconds;
    add(&ttft, o->ttft);
    add(&itl, o->itl);
  }
  if (seconds <= 0) return nullptr;
  json out = {{"windowS", 5 * std::lround(seconds / 5)},  // steady from write to write
              {"requests", std::llround(requests)},
              {"promptTokensPerS", Rounded(prompt_per_s, 1)},
              {"generationTokensPerS", Rounded(generation_per_s, 1)}};
  if (const double q = ttft.Quantile(0.99); q >= 0) out["ttftP99Ms"] = Rounded(q * 1000, 1);
  if (const double q = itl.Quantile(0.99); q >= 0) out["tpotP99Ms"] = Rounded(q * 1000, 1);
  if (spec.ttft_p99_ms > 0 && !ttft.empty()) out["ttftWithinSlo"] = Rounded(ttft.ShareAtMost(spec.ttft_p99_ms / 1000), 4);
  if (spec.tpot_p99_ms > 0 && !itl.empty()) out["tpotWithinSlo"] = Rounded(itl.ShareAtMost(spec.tpot_p99_ms / 1000), 4);
  if (gpu_n > 0) out["gpuUtilizationPct"] = std::lround(gpu_sum / gpu_n);
  return out;
}

Status RestoreForecast(const json& forecast, fleet::LoadForecaster* f) {
  if (!forecast.is_object()) return InvalidArgumentError("status.forecast is " + forecast.dump() + ", not an object");
  for (auto [key, want] : {std::pair{"periodS", f->config().period_s}, std::pair{"binS", f->config().bin_s}}) {
    const std::string field = std::string("status.forecast.") + key;
    if (!forecast.contains(key)) return InvalidArgumentError(field + " is missing");
    const json& v = forecast[key];
    if (!v.is_number()) return InvalidArgumentError(field + " is " + v.dump() + ", not a number");
    if (v.get<double>() != want) {
      return InvalidArgumentError(field + " is " + v.dump() + ", but the autoscaler learns with " +
                                  fmt::format("{:g}", want) + " (a profile of another shape)");
    }
  }
  // profile is required; peaks (the burst profile) only when one was learned.
  std::vector<double> slots[2];
  const char* names[] = {"profile", "peaks"};
  for (int k = 0; k < 2; ++k) {
    const std::string field = std::string("status.forecast.") + names[k];
    if (!forecast.contains(names[k])) {
      if (k == 0) return InvalidArgumentError(field + " is missing, not an array");
      continue;
    }
    const json& values = forecast[names[k]];
    if (!values.is_array()) return InvalidArgumentError(field + " is " + values.dump() + ", not an array");
    const size_t want = static_cast<size_t>(std::lround(f->config().period_s / f->config().bin_s));
    if (values.size() != want) {
      return InvalidArgumentError(fmt::format("{} has {} values, want {} (periodS / binS)", field, values.size(), want));
    }
    for (size_t i = 0; i < values.size(); ++i) {
      const json& v = values[i];
      if (v.is_null()) slots[k].push_back(-1);
      else if (v.is_number() && std::isfinite(v.get<double>())) slots[k].push_back(v.get<double>());
      else return InvalidArgumentError(fmt::format("{}[{}] is {}, not a number or null", field, i, v.dump()));
    }
  }
  // burstDays: per bin null or up to two [day, need] pairs, newest first.
  std::vector<fleet::LoadForecaster::BurstSightings> sightings;
  if (forecast.contains("burstDays")) {
    const json& values = forecast["burstDays"];
    const size_t want = slots[0].size();
    if (!values.is_array() || values.size() != want) {
      return InvalidArgumentError(fmt::format("status.forecast.burstDays is {}, not an array of {} values",
                                              values.is_array() ? fmt::format("an array of {}", values.size())
                                                                : values.dump(),
                                              want));
    }
    const auto whole = [](const json& x) {  // exact as a double, so as a long long too
      if (!x.is_number()) return false;
      const double d = x.get<double>();
      return std::isfinite(d) && std::trunc(d) == d && std::abs(d) < 9e15;
    };
    for (size_t i = 0; i < values.size(); ++i) {
      const json& v = values[i];
      fleet::LoadForecaster::BurstSightings seen{};
      bool ok = v.is_null() || (v.is_array() && v.size() <= 2);
      for (size_t k = 0; ok && v.is_array() && k < v.size(); ++k) {
        const json& pair = v[k];
        ok = pair.is_array() && pair.size() == 2 && whole(pair[0]) &&
             pair[1].is_number() && std::isfinite(pair[1].get<double>()) && pair[1].get<double>() >= 0;
        if (ok) seen[k] = {static_cast<long long>(pair[0].get<double>()), pair[1].get<double>()};
      }
      if (!ok) {
        return InvalidArgumentError(fmt::format(
            "status.forecast.burstDays[{}] is {}, not null or up to two [day, need] pairs (a whole day, a need >= 0)", i,
            v.dump()));
      }
      sightings.push_back(seen);
    }
  }
  // All checked above: nothing can fail now, so nothing is half restored.
  (void)f->RestoreProfile(slots[0]);
  if (!slots[1].empty()) (void)f->RestorePeaks(slots[1]);
  if (!sightings.empty()) (void)f->RestoreBurstSightings(sightings);
  return OkStatus();
}

namespace {

// "HH:MM" of an offset into a day (a daily period), else "+Ns".
std::string BinLabel(double start_s, double period_s) {
  if (period_s != 86400) return fmt::format("+{:.0f}s", start_s);
  const int minutes = static_cast<int>(start_s / 60);
  return fmt::format("{:02d}:{:02d}", minutes / 60, minutes % 60);
}

// A day counted from 1970-01-01 (UTC) as a date; another period as its index.
std::string DayLabel(long long day, double period_s) {
  if (period_s != 86400) return fmt::format("period {}", day);
  const std::chrono::year_month_day ymd{std::chrono::sys_days{std::chrono::days{day}}};
  return fmt::format("{:04d}-{:02d}-{:02d}", static_cast<int>(ymd.year()), static_cast<unsigned>(ymd.month()),
                     static_cast<unsigned>(ymd.day()));
}

}  // namespace

std::string DescribeForecast(const json& forecast) {
  if (!forecast.is_object() || !forecast.contains("profile") || !forecast["profile"].is_array()) return "";
  const auto number = [&](const char* key) {
    return forecast.contains(key) && forecast[key].is_number() ? forecast[key].get<double>() : 0.0;
  };
  const double period = number("periodS"), bin = number("binS");
  if (!(period > 0) || !(bin > 0) || !std::isfinite(period) || !std::isfinite(bin)) return "";
  const json& profile = forecast["profile"];
  std::vector<std::pair<double, size_t>> learned;  // (load, bin)
  for (size_t i = 0; i < profile.size(); ++i) {
    if (profile[i].is_number()) learned.emplace_back(profile[i].get<double>(), i);
  }
  std::string out = fmt::format("Forecast: {} of {} bins of {:.0f} s learned{}\n", learned.size(), profile.size(), bin,
                                period == 86400 ? " (UTC times of day)" : "");
  if (learned.empty()) return out;
  std::stable_sort(learned.begin(), learned.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string busiest;
  for (size_t k = 0; k < learned.size() && k < 5 && learned[k].first >= 0.005; ++k) {
    busiest += fmt::format("{}{} {:.2f}", k ? ", " : "", BinLabel(learned[k].second * bin, period), learned[k].first);
  }
  out += busiest.empty() ? "  busiest: no load learned\n" : "  busiest: " + busiest + " replicas of load\n";
  const json empty = json::array();
  const json& peaks = forecast.contains("peaks") && forecast["peaks"].is_array() ? forecast["peaks"] : empty;
  const json& days = forecast.contains("burstDays") && forecast["burstDays"].is_array() ? forecast["burstDays"] : empty;
  std::vector<std::pair<double, size_t>> bursts;  // (need, bin), the largest first, at most 10
  for (size_t i = 0; i < peaks.size(); ++i) {
    if (peaks[i].is_number() && peaks[i].get<double>() >= 0.005) bursts.emplace_back(peaks[i].get<double>(), i);
  }
  std::stable_sort(bursts.begin(), bursts.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  if (bursts.empty()) out += "  bursts: none learned\n";
  for (size_t k = 0; k < bursts.size() && k < 10; ++k) {
    const size_t i = bursts[k].second;
    std::string seen;
    if (i < days.size() && days[i].is_array()) {
      for (const json& d : days[i]) {
        if (!d.is_array() || d.size() != 2 || !d[0].is_number() || !d[1].is_number()) continue;
        const double day = d[0].get<double>();
        if (!std::isfinite(day) || std::abs(day) >= 9e15 || std::trunc(day) != day) continue;
        seen += fmt::format("; {}: {:.2f}", DayLabel(static_cast<long long>(day), period), d[1].get<double>());
      }
    }
    out += fmt::format("  burst: {} {:.2f} replicas of need{}\n", BinLabel(i * bin, period), bursts[k].first,
                       seen.empty() ? std::string("; days not known (trusted once it has come on two more days)") : seen);
  }
  if (bursts.size() > 10) out += fmt::format("  ... and {} smaller bursts\n", bursts.size() - 10);
  return out;
}

ReplicaProbe ParseEngineMetrics(std::string_view text) {
  ReplicaProbe p;
  p.running = static_cast<int>(SumMetric(text, "vllm:num_requests_running"));
  p.waiting = static_cast<int>(SumMetric(text, "vllm:num_requests_waiting"));
  p.kv_usage = SumMetric(text, "vllm:kv_cache_usage_perc");
  p.model = FirstLabel(text, "vllm:num_requests_running", "model_name");
  p.prompt_tokens = SumMetric(text, "vllm:prompt_tokens_total");
  p.generation_tokens = SumMetric(text, "vllm:generation_tokens_total");
  p.ttft = ParseHistogram(text, "vllm:time_to_first_token_seconds");
  p.itl = ParseHistogram(text, "vllm:inter_token_latency_seconds");
  p.metrics = std::isfinite(p.prompt_tokens) && std::isfinite(p.generation_tokens) && std::isfinite(p.kv_usage);
  if (!p.metrics) p.prompt_tokens = p.generation_tokens = p.kv_usage = 0;
  return p;
}

Prober HttpProber(std::chrono::milliseconds timeout, std::string ca_pem) {
  return [timeout, ca_pem = std::move(ca_pem)](const std::string& base_url, const std::string& secret) {
    ReplicaProbe p;
    http::Client c(base_url, {.ca_pem = ca_pem, .timeout = timeout});
    http::Headers headers;
    if (!secret.empty()) {
      // The engine must prove it holds the secret before it is sent: a process squatting on the
      // port (another tenant's job on the node) never gets it.
      const std::string nonce = auth::RandomHex(16);
      StatusOr<http::ClientResponse> asked = c.Send("GET", "/health?nonce=" + nonce);
      if (!asked.ok()) return p;
      const json answer = json::parse(asked->body, nullptr, /*allow_exceptions=*/false);
      const bool proved = asked->status == 200 && answer.is_object() && answer.contains("proof") &&
                          answer["proof"].is_string() &&
                          auth::ConstantTimeEquals(answer["proof"].get<std::string>(), ReplicaProof(secret, nonce));
      if (!proved) {
        p.secret_refused = true;
        return p;
      }
      headers.emplace_back("Authorization", "Bearer " + secret);
    }
    StatusOr<http::ClientResponse> h = c.Send("GET", "/health", "", headers);
    if (h.ok() && h->status == 401) p.secret_refused = true;
    if (!h.ok() || h->status != 200) return p;
    StatusOr<http::ClientResponse> m = c.Send("GET", "/metrics", "", headers);
    if (m.ok() && m->status == 200) p = ParseEngineMetrics(m->body);
    p.healthy = true;
    json health = json::parse(h->body, nullptr, /*allow_exceptions=*/false);
    if (health.is_object() && health.contains("instance") && health["instance"].is_string()) {
      p.instance = health["instance"].get<std::string>();
    }
    return p;
  };
}

std::string DeploymentController::SecretOf(const json& job) const {
  if (options_.replica_secrets == nullptr) return "";
  // The current attempt's: written to the Job's status before its agent can start it.
  const json workers = job.value("status", json::object()).value("workers", json::array());
  const std::string attempt = workers.is_array() && !workers.empty() && workers[0].is_object()
                                  ? workers[0].value("attempt", std::string())
                                  : std::string();
  if (attempt.empty()) return "";
  return options_.replica_secrets->For(TenantOf(job), NameOf(job), attempt);
}

std::vector<ReplicaProbe> DeploymentController::ProbeAll(
    const std::vector<std::pair<std::string, std::string>>& targets) const {
  std::vector<ReplicaProbe> out(targets.size());
  for (size_t start = 0; start < targets.size(); start += kProbeParallelism) {
    const size_t end = std::min(targets.size(), start + kProbeParallelism);
    std::vector<std::future<ReplicaProbe>> wave;
    for (size_t i = start; i < end; ++i) {
      const auto& [url, secret] = targets[i];
      try {
        wave.push_back(std::async(std::launch::async, [this, &url, &secret] { return prober_(url, secret); }));
      } catch (const std::system_error&) {  // no thread to be had: probe here
        std::promise<ReplicaProbe> inline_probe;
        inline_probe.set_value(prober_(url, secret));
        wave.push_back(inline_probe.get_future());
      }
    }
    for (size_t i = start; i < end; ++i) out[i] = wave[i - start].get();
  }
  return out;
}

DeploymentController::DeploymentController(store::Store* store, Clock* clock, Metrics* metrics,
                                           DeploymentControllerOptions options, Prober prober,
                                           std::function<void()> on_jobs_changed)
    : store_(store),
      clock_(clock),
      metrics_(metrics),
      options_(std::move(options)),
      prober_(prober ? std::move(prober) : HttpProber(std::chrono::milliseconds(2000), options_.replica_ca_pem)),
      on_jobs_changed_(std::move(on_jobs_changed)),
      serial_(static_cast<uint64_t>(clock->NowMicros())) {
  autoscaler_offset_s_ = options_.autoscaler_clock_offset_s.value_or(
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() -
      static_cast<double>(clock_->NowMicros()) / 1e6);
  if (metrics_ != nullptr) {
    scale_events_ = metrics_->AddCounter("aicloud_deployment_scale_events_total",
                                         "Changes of a deployment's desired replica count",
                                         {"deployment", "direction"});
  }
}

DeploymentController::~DeploymentController() { Stop(); }

Status DeploymentController::Start() {
  if (options_.engine_binary.empty()) {
    return InvalidArgumentError("deployment controller: the engine binary path is not set");
  }
  thread_ = std::thread([this] {
    SetThreadName("deployments");
    Loop();
  });
  return OkStatus();
}

void DeploymentController::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void DeploymentController::Loop() {
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_) {
    l.unlock();
    Turn();
    l.lock();
    cv_.wait_for(l, options_.tick, [&] { return stop_ || wake_; });
    wake_ = false;
  }
}

std::vector<ServingRoute> DeploymentController::Routes() const {
  std::lock_guard<std::mutex> l(mu_);
  return routes_;
}

void DeploymentController::NoteRequests(const std::string& tenant, const std::string& deployment,
                                        int held) {
  bool wake = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    State& s = states_[tenant + "/" + deployment];
    s.last_activity_us = clock_->NowMicros();
    wake = held > 0 && s.held == 0;
    s.held = std::max(0, held);
    if (held > 0) s.held_at_us = s.last_activity_us;
    if (wake) wake_ = true;
  }
  if (wake) cv_.notify_all();
}

void DeploymentController::NoteActivity(const std::string& tenant, const std::string& deployment) {
  std::lock_guard<std::mutex> l(mu_);
  states_[tenant + "/" + deployment].last_activity_us = clock_->NowMicros();
}

void DeploymentController::NoteArrival(const std::string& tenant, const std::string& deployment, int64_t count) {
  std::lock_guard<std::mutex> l(mu_);
  State& s = states_[tenant + "/" + deployment];
  s.last_activity_us = clock_->NowMicros();
  s.arrivals += std::max<int64_t>(0, count);
}

int DeploymentController::NextPort(std::vector<int>* used) const {
  for (int p = options_.port_base; p < options_.port_base + options_.port_count; ++p) {
    if (std::find(used->begin(), used->end(), p) == used->end()) {
      used->push_back(p);
      return p;
    }
  }
  return -1;
}

void DeploymentController::Turn() {
  admitted_gpus_.clear();
  StatusOr<store::ListResult> deps = store_->List({.kind = "Deployment"});
  StatusOr<store::ListResult> jobs = store_->List({.kind = "Job"});
  if (!deps.ok() || !jobs.ok()) {
    spdlog::warn("deployment controller: cannot list: {}",
             std::string((deps.ok() ? jobs.status() : deps.status()).message()));
    return;
  }
  std::map<std::string, std::vector<json>> replicas;  // "tenant/deployment" -> jobs
  std::vector<int> used_ports;
  for (const json& j : jobs->items) {
    const std::string d = Label(j, kDeploymentLabel);
    if (d.empty()) continue;
    replicas[TenantOf(j) + "/" + d].push_back(j);
    if (!Terminal(PhaseOf(j))) used_ports.push_back(std::atoi(Label(j, kPortLabel).c_str()));
  }
  const int64_t now_us = clock_->NowMicros();
  for (auto it = foreign_ports_.begin(); it != foreign_ports_.end();) {
    if (it->second <= now_us) {
      it = foreign_ports_.erase(it);
    } else {
      used_ports.push_back(it->first);
      ++it;
    }
  }
  std::map<std::string, std::string> node_addresses;
  // Probe every deployment's running replicas at once: a dead replica of one deployment costs
  // one probe timeout per turn, not one per deployment reconciled after it.
  std::map<std::string, ReplicaProbe> probed;
  {
    std::vector<std::pair<std::string, std::string>> targets;
    for (const json& d : deps->items) {
      for (const json& j : replicas[TenantOf(d) + "/" + NameOf(d)]) {
        if (Terminal(PhaseOf(j))) continue;
        if (std::string url = ReplicaUrl(j, &node_addresses); !url.empty() && !probed.count(url)) {
          probed[url] = {};
          targets.emplace_back(url, SecretOf(j));
        }
      }
    }
    std::vector<ReplicaProbe> probes = ProbeAll(targets);
    for (size_t i = 0; i < targets.size(); ++i) probed[targets[i].first] = std::move(probes[i]);
  }
  std::vector<ServingRoute> routes;
  bool jobs_changed = false;
  std::set<std::string> live;
  for (const json& d : deps->items) {
    const std::string key = TenantOf(d) + "/" + NameOf(d);
    live.insert(key);
    Reconcile(d, replicas[key], &node_addresses, &used_ports, &routes, &jobs_changed, probed);
  }
  // Replicas whose Deployment was deleted.
  for (const auto& [key, list] : replicas) {
    if (live.count(key)) continue;
    for (const json& j : list) {
      if (store_->Delete({"Job", TenantOf(j), NameOf(j)}, 0).ok()) jobs_changed = true;
    }
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    routes_ = std::move(routes);
    for (auto it = states_.begin(); it != states_.end();) {
      it = live.count(it->first) ? std::next(it) : states_.erase(it);
    }
  }
  if (jobs_changed && on_jobs_changed_) on_jobs_changed_();
}

std::string DeploymentController::ReplicaUrl(const json& job, std::map<std::string, std::string>* node_addresses) const {
  const std::string node = NodeOf(job);
  if (PhaseOf(job) != "Running" || node.empty()) return "";
  auto it = node_addresses->find(node);
  if (it == node_addresses->end()) {
    std::string addr = options_.default_address;
    StatusOr<json> n = store_->Get({"Node", "", node});
    if (n.ok()) addr = n->value("spec", json::object()).value("address", addr);
    it = node_addresses->emplace(node, addr).first;
  }
  const char* scheme = options_.replica_ca_pem.empty() ? "http://" : "https://";
  return scheme + it->second + ":" + Label(job, kPortLabel);
}

void DeploymentController::Reconcile(const json& deployment, const std::vector<json>& replicas,
                                     std::map<std::string, std::string>* node_addresses,
                                     std::vector<int>* used_ports, std::vector<ServingRoute>* routes,
                                     bool* jobs_changed, const std::map<std::string, ReplicaProbe>& probed) {
  const std::string tenant = TenantOf(deployment), name = NameOf(deployment);
  const std::string key = tenant + "/" + name;
  const int64_t now_us = clock_->NowMicros();
  StatusOr<DeploymentSpec> spec = ParseDeploymentSpec(deployment.value("spec", json::object()), name);
  if (!spec.ok()) {
    spdlog::warn("deployment {}: {}", key, std::string(spec.status().message()));
    return;
  }
  const std::string revision = spec->Revision();

  // 1. Observe the replicas.
  struct Replica {
    json job;
    std::string name, revision, url;
    bool ready = false, terminal = false;
    ReplicaProbe probe;
    Observed recent, minute;  // over kSnapshotWindowUs and kObservedWindowUs
  };
  std::vector<Replica> current;
  std::string invalid;
  {
    std::lock_guard<std::mutex> l(mu_);
    const State& s = states_[key];
    if (s.invalid_revision == revision) invalid = s.invalid_reason;
  }
  for (const json& j : replicas) {
    Replica r{j, NameOf(j), Label(j, kRevisionLabel), "", false, Terminal(PhaseOf(j)), {}, {}, {}};
    if (r.terminal) {
      const json& st = j.value("status", json::object());
      if (st.value("reason", std::string()) == "InvalidSpec" && r.revision == revision) {
        // The job controller refused the replica's spec: recreating it would fail the same way.
        invalid = "replica spec refused: " + st.value("message", std::string());
      }
      if (store_->Delete({"Job", tenant, r.name}, 0).ok()) *jobs_changed = true;
      continue;
    }
    r.url = ReplicaUrl(j, node_addresses);
    current.push_back(std::move(r));
  }
  // The turn probed the running replicas together (ProbeAll in Turn): a dead or slow one costs
  // one probe timeout per turn, not one per replica.
  {
    std::vector<std::pair<std::string, std::string>> targets;
    for (const Replica& r : current) {
      if (!r.url.empty() && !probed.count(r.url)) targets.emplace_back(r.url, SecretOf(r.job));
    }
    std::vector<ReplicaProbe> late = ProbeAll(targets);
    size_t k = 0;
    for (Replica& r : current) {
      if (r.url.empty()) continue;
      auto it = probed.find(r.url);
      r.probe = it != probed.end() ? it->second : std::move(late[k++]);
      r.ready = r.probe.healthy;
    }
  }
  // A port answered by another engine than this replica's (its /health names another instance,
  // or none) is held by another process: another server's replica on the same host, or one left
  // from before. The replica goes (a new one gets another port) and the port is left alone for a
  // while. A replica made before engines named their instance is checked by its model name.
  std::erase_if(current, [&](const Replica& r) {
    if (r.url.empty() || (!r.probe.healthy && !r.probe.secret_refused)) return false;
    if (r.probe.secret_refused) {
      // Its secret is refused: nothing this controller started answers there.
    } else if (CommandFlag(r.job, "--instance").empty()) {
      const std::string want = CommandFlag(r.job, "--served-model-name");
      if (r.probe.model.empty() || want.empty() || r.probe.model == want) return false;
    } else if (r.probe.instance == r.name) {
      return false;
    }
    const int port = std::atoi(Label(r.job, kPortLabel).c_str());
    const std::string whose = r.probe.secret_refused  ? std::string("an engine that refuses the replica's secret")
                              : r.probe.instance.empty() ? std::string("an engine that does not name its instance")
                                                         : "engine instance '" + r.probe.instance + "'";
    spdlog::warn("deployment {}: replica {}: {} is answered by {}{} (another process holds port {}); replacing the "
                 "replica on another port",
                 key, r.name, r.url, whose, r.probe.model.empty() ? "" : " serving '" + r.probe.model + "'", port);
    foreign_ports_[port] = now_us + kForeignPortHoldUs;
    used_ports->push_back(port);
    if (store_->Delete({"Job", tenant, r.name}, 0).ok()) *jobs_changed = true;
    return true;
  });
  {
    std::lock_guard<std::mutex> l(mu_);
    std::map<std::string, State::Health>& health = states_[key].health;
    std::map<std::string, State::Health> kept;
    for (Replica& r : current) {
      if (r.url.empty()) continue;
      State::Health h = std::move(health[r.name]);
      if (r.probe.healthy) {
        h.failures = 0;
        h.last = r.probe;
        AddSample(&h.samples, now_us, r.probe);
      } else if (h.last.healthy && ++h.failures < kProbeFailures) {
        r.probe = h.last;  // missed a probe: still ready, with the last metrics
        r.ready = true;
      } else {
        h = {};
      }
      r.recent = Over(h.samples, now_us, kSnapshotWindowUs);
      r.minute = Over(h.samples, now_us, kObservedWindowUs);
      kept[r.name] = std::move(h);
    }
    health = std::move(kept);
  }
  if (options_.node_metrics) {  // outside mu_: the control plane's lock is held for its turns
    std::map<std::string, json> reports;  // one read per node
    const auto report = [&](const std::string& node) -> const json& {
      auto it = reports.find(node);
      if (it == reports.end()) it = reports.emplace(node, options_.node_metrics(node)).first;
      return it->second;
    };
    for (Replica& r : current) {
      if (r.ready) r.minute.gpu_utilization_pct = GpuUtilization(r.job, report);
    }
  }
  int ready = 0, in_flight = 0;
  for (const Replica& r : current) {
    if (r.ready) ++ready, in_flight += r.probe.running + r.probe.waiting;
  }

  // 2. How many replicas.
  State snapshot_state;
  int held = 0;
  int64_t last_activity_us = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    State& s = states_[key];
    if (s.last_activity_us == 0) s.last_activity_us = now_us;  // a new deployment starts warm
    if (!s.autoscaler || s.policy != spec->autoscaler || s.min != spec->min_replicas || s.max != spec->max_replicas) {
      StatusOr<std::unique_ptr<fleet::Autoscaler>> a =
          fleet::MakeAutoscaler(spec->autoscaler, {.min_replicas = spec->min_replicas, .max_replicas = spec->max_replicas});
      if (!a.ok()) {
        spdlog::warn("deployment {}: {}", key, std::string(a.status().message()));
        return;
      }
      // What an earlier autoscaler of this deployment learned: the one this replaces (a spec
      // edit; its latest bins may not be stored yet), else the stored profile (a restart).
      fleet::LoadForecaster* before = s.autoscaler ? s.autoscaler->learned() : nullptr;
      fleet::LoadForecaster* f = (*a)->learned();
      const json old = deployment.value("status", json::object());
      if (f != nullptr && before != nullptr && before->config().period_s == f->config().period_s &&
          before->config().bin_s == f->config().bin_s && before->learned_bins() > 0) {
        *f = *before;  // the same shape: all of it, the bins still open included
      } else if (f != nullptr && old.is_object() && old.contains("forecast")) {
        if (Status r = RestoreForecast(old["forecast"], f); !r.ok()) {
          spdlog::warn("deployment {}: the stored load profile is not used: {}", key, std::string(r.message()));
        }
      }
      s.autoscaler = std::move(*a);
      s.policy = spec->autoscaler;
      s.min = spec->min_replicas;
      s.max = spec->max_replicas;
    }
    if (in_flight > 0) s.last_activity_us = now_us;  // requests being served count as activity
    // The gateway says when requests start waiting, not when they stop: the hint ends once a
    // replica is ready (they were forwarded) or after a minute (they timed out).
    if (ready > 0 || now_us - s.held_at_us > 60'000'000) s.held = 0;
    held = s.held;
    last_activity_us = s.last_activity_us;
  }
  fleet::DeploymentSnapshot snap;
  snap.now_s = static_cast<double>(now_us) / 1e6 + autoscaler_offset_s_;  // bins of a day are UTC times of day
  snap.window_s = static_cast<double>(kSnapshotWindowUs) / 1e6;
  for (const Replica& r : current) {
    if (!r.ready) continue;
    fleet::ReplicaMetrics m{.id = r.name, .running = r.probe.running, .waiting = r.probe.waiting,
                            .kv_usage = r.probe.kv_usage, .gpu_utilization_pct = r.minute.gpu_utilization_pct};
    if (const Observed& o = r.recent; o.seconds > 0) {
      m.ttft_p99_ms = std::max(o.ttft.Quantile(0.99), 0.0) * 1000;
      m.tpot_p99_ms = std::max(o.itl.Quantile(0.99), 0.0) * 1000;
      m.tokens_per_s = o.generation_tokens / o.seconds;
      snap.prompt_tokens_per_s += o.prompt_tokens / o.seconds;
      snap.output_tokens_per_s += m.tokens_per_s;
      snap.arrival_rps += o.ttft.count / o.seconds;  // requests that got their first token
    }
    snap.replicas.push_back(std::move(m));
  }
  snap.current_replicas = static_cast<int>(current.size());
  snap.starting_replicas = static_cast<int>(current.size()) - ready;
  snap.pending_requests = held;
  snap.slo = {.ttft_p99_ms = spec->ttft_p99_ms, .tpot_p99_ms = spec->tpot_p99_ms, .tokens_per_s = spec->tokens_per_s};
  {
    // Arrivals noted by the gateway over the last 10 s: a burst counts as it arrives. (Requests
    // that reached the replicas another way count through the engines' first tokens.)
    std::lock_guard<std::mutex> l(mu_);
    State& s = states_[key];
    s.arrival_samples.emplace_back(now_us, s.arrivals);
    while (s.arrival_samples.size() > 2 && now_us - s.arrival_samples[1].first >= kSnapshotWindowUs) {
      s.arrival_samples.pop_front();
    }
    const auto& [t0, n0] = s.arrival_samples.front();
    if (now_us - t0 >= 1'000'000) {
      const double gateway_rps = static_cast<double>(s.arrivals - n0) / (static_cast<double>(now_us - t0) / 1e6);
      if (gateway_rps > snap.arrival_rps) {
        double prompt = 0, requests = 0;  // the engines' computed prompt tokens per request
        for (const Replica& r : current) {
          if (r.ready && r.minute.seconds > 0) prompt += r.minute.prompt_tokens, requests += r.minute.ttft.count;
        }
        if (requests > 0) snap.prompt_tokens_per_s = std::max(snap.prompt_tokens_per_s, gateway_rps * prompt / requests);
        snap.arrival_rps = gateway_rps;
      }
    }
  }
  snap.capacity.max_concurrency = spec->max_num_seqs;
  snap.capacity.prefill_tokens_per_s = spec->prefill_tokens_per_s;
  snap.capacity.decode_tokens_per_s = spec->decode_tokens_per_s;
  fleet::ScaleDecision decision;
  {
    std::lock_guard<std::mutex> l(mu_);
    decision = states_[key].autoscaler->Recommend(snap);
  }
  int desired = std::clamp(decision.desired, spec->min_replicas, spec->max_replicas);
  std::string reason = decision.reason;
  const double idle_s = static_cast<double>(now_us - last_activity_us) / 1e6;
  if (held > 0 && (desired < 1 || current.empty())) {  // from zero: the held requests are why
    desired = std::max(desired, 1);
    reason = std::to_string(held) + " request(s) held at the gateway with no ready replica";
  } else if (desired == 0 && idle_s < spec->scale_to_zero_seconds && (in_flight > 0 || !current.empty())) {
    desired = 1;  // zero only after scaleToZeroSeconds without requests
    reason = "idle " + std::to_string(static_cast<int>(idle_s)) + " s < scaleToZeroSeconds " +
             std::to_string(spec->scale_to_zero_seconds);
  } else if (spec->min_replicas == 0 && idle_s >= spec->scale_to_zero_seconds && in_flight == 0 && held == 0 &&
             !decision.forecast) {  // a rise forecast ahead pre-warms even an idle deployment
    desired = 0;
    reason = "no requests for " + std::to_string(static_cast<int>(idle_s)) + " s (scaleToZeroSeconds " +
             std::to_string(spec->scale_to_zero_seconds) + ")";
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    State& s = states_[key];
    if (desired != s.desired) {
      if (scale_events_ != nullptr && s.desired >= 0) {
        scale_events_->Inc({key, desired > s.desired ? "up" : "down"});
      }
      if (s.desired >= 0 || desired > 0) {
        spdlog::info("deployment {}: {} -> {} replicas ({})", key, std::max(s.desired, 0), desired, reason);
      }
      s.desired = desired;
      s.reason = reason;
      s.last_scale_at = NowRfc3339();
    }
    snapshot_state.reason = s.reason;
    snapshot_state.last_scale_at = s.last_scale_at;
  }

  // 3. Converge. Which revisions run: the spec's, and during a canary also the stable one.
  const json old_status = deployment.value("status", json::object());
  std::string stable_rev = old_status.value("stableRevision", std::string());
  json history = RecordRevision(old_status.value("history", json::array()), revision,
                                deployment.value("spec", json::object()), stable_rev);
  std::optional<DeploymentSpec> stable_spec;
  if (spec->canary && !stable_rev.empty() && stable_rev != revision) {
    std::string why;
    stable_spec = StableSpec(history, stable_rev, *spec, name, &why);
    if (!stable_spec) {
      std::lock_guard<std::mutex> l(mu_);
      State& s = states_[key];
      if (s.canary_refused != revision) spdlog::warn("deployment {}: rolling update instead of a canary: {}", key, why);
      s.canary_refused = revision;
    }
  }
  int want_new = desired, want_stable = 0;
  if (stable_spec && desired > 0) {
    const int w = spec->canary_weight;
    if (w <= 0) {
      want_new = 0, want_stable = desired;
    } else if (w < 100) {  // both sides get at least one replica
      want_new = std::clamp(static_cast<int>(std::lround(desired * w / 100.0)), 1, std::max(1, desired - 1));
      want_stable = std::max(1, desired - want_new);
    }
  }
  std::vector<Replica*> fresh, stable, old;
  // A replica labelled for eviction (its node is being emptied) is replaced like one of an old
  // revision: its successor starts first (on another node: this one is cordoned).
  for (Replica& r : current) {
    const bool evicted = Label(r.job, kEvictLabel) == "true";
    (evicted ? old : r.revision == revision ? fresh : stable_spec && r.revision == stable_rev ? stable : old).push_back(&r);
  }
  auto remove = [&](Replica* r) {
    if (store_->Delete({"Job", tenant, r->name}, 0).ok()) {
      *jobs_changed = true;
      r->terminal = true;  // gone
    }
  };
  auto ready_count = [&] {
    int n = 0;
    for (const Replica& r : current) n += (!r.terminal && r.ready) ? 1 : 0;
    return n;
  };
  auto live_count = [](const std::vector<Replica*>& group) {
    int n = 0;
    for (const Replica* r : group) n += r->terminal ? 0 : 1;
    return n;
  };
  if (!invalid.empty()) {
    std::lock_guard<std::mutex> l(mu_);
    State& s = states_[key];
    if (s.invalid_revision != revision) spdlog::warn("deployment {}: {}", key, invalid);
    s.invalid_revision = revision;
    s.invalid_reason = invalid;
  }
  // Creates one replica of `of` (a revision's spec); false when no port, admission or the store
  // refused.
  std::string refused;
  auto create = [&](const DeploymentSpec& of) {
    const int port = NextPort(used_ports);
    if (port < 0) {
      spdlog::warn("deployment {}: no free replica port in [{}, {})", key, options_.port_base,
                   options_.port_base + options_.port_count);
      return false;
    }
    // The port makes the name unique among live replicas; the serial keeps a replacement from
    // reusing a just-deleted replica's name.
    char serial[8];
    std::snprintf(serial, sizeof serial, "%04x", static_cast<unsigned>(++serial_ & 0xffff));
    const std::string job_name = name + "-" + of.Revision() + "-" + std::to_string(port) + "-" + serial;
    const json job = ReplicaJob(of, tenant, name, job_name, port, options_.engine_binary);
    if (options_.admit) {
      std::string warning;
      double& unseen = admitted_gpus_[tenant];
      if (Status a = options_.admit(job, unseen, &warning); !a.ok()) {
        used_ports->pop_back();  // NextPort took it for this replica
        refused = "replica refused by admission: " + std::string(a.message());
        return false;
      }
      StatusOr<JobSpec> js = ParseJobSpec(job["spec"]);
      if (js.ok()) unseen += js->GpusPerWorker() * js->workers;
    }
    StatusOr<json> made = store_->Create(job);
    if (!made.ok()) {
      spdlog::warn("deployment {}: creating replica {}: {}", key, job_name, std::string(made.status().message()));
      return false;
    }
    *jobs_changed = true;
    return true;
  };
  int fresh_n = static_cast<int>(fresh.size());
  int stable_n = static_cast<int>(stable.size());
  const int old_n = static_cast<int>(old.size());
  // With old replicas still up, at most desired + maxSurge replicas exist at once.
  while (invalid.empty() && fresh_n < want_new &&
         fresh_n + stable_n + old_n < want_new + want_stable + (old_n > 0 || stable_n > want_stable ? spec->max_surge : 0) &&
         create(*spec)) {
    ++fresh_n;
  }
  while (stable_spec && stable_n < want_stable && create(*stable_spec)) ++stable_n;
  // Extra replicas of the current revision: not-ready ones first. (During a canary, a lower
  // weight retires canary replicas like old ones, once their stable replacements are ready.)
  if (fresh_n > want_new && !stable_spec) {
    std::stable_sort(fresh.begin(), fresh.end(), [](Replica* a, Replica* b) { return !a->ready && b->ready; });
    for (Replica* r : fresh) {
      if (fresh_n <= want_new) break;
      remove(r);
      --fresh_n;
    }
  }
  // Extra stable replicas and old revisions: not-ready ones go at once; ready ones while enough
  // others are ready.
  const int min_ready = std::max(0, want_new + want_stable - spec->max_unavailable);
  auto retire = [&](std::vector<Replica*>& group, int keep) {
    std::stable_sort(group.begin(), group.end(), [](Replica* a, Replica* b) { return !a->ready && b->ready; });
    int n = live_count(group);
    for (Replica* r : group) {
      if (n <= keep) break;
      if (!r->ready || desired == 0 || ready_count() - 1 >= min_ready) {
        remove(r);
        --n;
      }
    }
  };
  if (stable_spec) retire(fresh, want_new);
  retire(stable, want_stable);
  retire(old, 0);
  // The new revision becomes the stable one once nothing else runs (a canary: once promoted to
  // weight 100). A canary scaled to zero stays a canary.
  const bool others_left = live_count(stable) + live_count(old) > 0;
  if (!others_left && invalid.empty() && (!stable_spec || spec->canary_weight >= 100)) stable_rev = revision;

  // 4. Status and route.
  ServingRoute route{tenant, name, spec->served_model_name, {}, {}, desired};
  for (const auto& [n, p] : spec->adapters) route.adapters.push_back(n);
  if (stable_spec && stable_rev != revision) {
    route.canary_revision = revision;
    route.canary_weight = spec->canary_weight;
  }
  route.ca_pem = options_.replica_ca_pem;
  int replicas_n = 0, ready_n = 0, canary_n = 0, canary_ready = 0;
  json endpoints = json::array();
  for (const Replica& r : current) {
    if (r.terminal) continue;
    ++replicas_n;
    ready_n += r.ready ? 1 : 0;
    if (r.revision == revision) canary_n += 1, canary_ready += r.ready ? 1 : 0;
    if (!r.url.empty()) {
      route.endpoints.push_back({r.name, r.url, r.ready, r.revision, SecretOf(r.job)});
      endpoints.push_back({{"replica", r.name}, {"url", r.url}, {"ready", r.ready}, {"revision", r.revision}});
    }
  }
  routes->push_back(std::move(route));
  json status = {{"replicas", replicas_n},
                 {"readyReplicas", ready_n},
                 {"desiredReplicas", desired},
                 {"revision", revision},
                 {"stableRevision", stable_rev},
                 {"history", history},
                 {"endpoints", endpoints},
                 {"lastScale", {{"reason", snapshot_state.reason}, {"at", snapshot_state.last_scale_at}}}};
  if (stable_spec && stable_rev != revision) {
    status["canary"] = {{"revision", revision},
                        {"weight", spec->canary_weight},
                        {"replicas", canary_n},
                        {"readyReplicas", canary_ready},
                        {"stableReplicas", replicas_n - canary_n}};
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    State& s = states_[key];
    if (refused != s.admission_refused && !refused.empty()) spdlog::warn("deployment {}: {}", key, refused);
    s.admission_refused = refused;
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    const State& s = states_[key];
    const fleet::LoadForecaster* f = s.autoscaler ? s.autoscaler->learned() : nullptr;
    if (f != nullptr && f->learned_bins() > 0) {
      status["forecast"] = ForecastStatus(*f);
    } else if (old_status.is_object() && old_status.contains("forecast")) {
      status["forecast"] = old_status["forecast"];  // kept for a policy that learns again
    }
  }
  {
    // What the replicas served over the last minute, against the SLO: recomputed at most every
    // kObservedEveryUs, so that a busy deployment's status is not rewritten every turn.
    std::lock_guard<std::mutex> l(mu_);
    State& s = states_[key];
    if (s.observed_at_us == 0 || now_us - s.observed_at_us >= kObservedEveryUs) {
      std::vector<const Observed*> ready_minutes;
      for (const Replica& r : current) {
        if (!r.terminal && r.ready) ready_minutes.push_back(&r.minute);
      }
      s.observed = ObservedStatus(ready_minutes, *spec);
      // Until ready replicas have a window (a restarted server), the stored one stays.
      if (s.observed.is_null() && !ready_minutes.empty() && old_status.is_object() && old_status.contains("observed")) {
        s.observed = old_status["observed"];
      } else {
        s.observed_at_us = now_us;
      }
    }
    if (!s.observed.is_null()) status["observed"] = s.observed;
  }
  if (!refused.empty()) status["error"] = refused;
  if (!invalid.empty()) status["error"] = invalid;
  if (deployment.value("status", json()) != status) {
    json updated = deployment;
    updated["status"] = status;
    StatusOr<json> w = store_->Update(updated, store::ResourceVersionOf(deployment));
    if (!w.ok() && w.status().code() != StatusCode::kAborted) {
      spdlog::warn("deployment {}: writing status: {}", key, std::string(w.status().message()));
    }
  }
}

}  // namespace aicloud::control
