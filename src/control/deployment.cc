#include "control/deployment.h"

#include <cstdio>

#include "control/job.h"

namespace aicloud::control {
namespace {

using nlohmann::json;

Status FieldError(const std::string& field, const std::string& message) {
  return InvalidArgumentError(field + ": " + message);
}

struct Profile {
  const char* name;
  int max_num_seqs;
  int max_num_batched_tokens;
};
constexpr Profile kProfiles[] = {
    {"latency", 4, 256},
    {"balanced", 32, 512},
    {"throughput", 128, 2048},
};

std::string SecondsText(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

bool ValidAdapterName(const std::string& s) {
  if (s.empty() || s.size() > 128) return false;
  for (char c : s) {
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
          c == '-' || c == '_' || c == '.')) {
      return false;
    }
  }
  return true;
}

}  // namespace

json DeploymentSpec::Template() const {
  json adapters_json = json::array();
  for (const auto& [n, p] : adapters) adapters_json.push_back({{"name", n}, {"path", p}});
  json t = {{"model", model},
            {"servedModelName", served_model_name},
            {"adapters", adapters_json},
            {"resources", resources},
            {"maxNumSeqs", max_num_seqs},
            {"maxNumBatchedTokens", max_num_batched_tokens},
            {"lane", lane},
            {"threads", threads},
            {"kvCacheGiB", kv_cache_gib},
            {"dtype", dtype},
            {"args", engine_args},
            {"queue", queue},
            {"priority", priority}};
  // Only when set, so that deployments made before the field keep their revision.
  if (prefill_order != "fcfs") {
    t["prefillOrder"] = prefill_order;
    t["maxOvertakeSeconds"] = max_overtake_seconds;
  }
  return t;
}

std::string DeploymentSpec::Revision() const {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a 64: stable across builds and machines
  for (unsigned char c : Template().dump()) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%08llx", static_cast<unsigned long long>(h & 0xffffffffULL));
  return buf;
}

StatusOr<DeploymentSpec> ParseDeploymentSpec(const json& spec, const std::string& name) {
  DeploymentSpec d;
  if (!spec.is_object()) return FieldError("spec", "must be an object");
  if (!spec.contains("model") || spec["model"].get<std::string>().empty()) {
    return FieldError("spec.model", "required: the checkpoint directory to serve");
  }
  d.model = spec["model"].get<std::string>();
  d.served_model_name = spec.value("servedModelName", name);
  if (!ValidAdapterName(d.served_model_name)) {
    return FieldError("spec.servedModelName", "\"" + d.served_model_name +
                                                  "\" must be 1-128 letters, digits, '-', '_' or '.'");
  }
  if (spec.contains("adapters")) {
    for (size_t i = 0; i < spec["adapters"].size(); ++i) {
      const json& a = spec["adapters"][i];
      const std::string field = "spec.adapters[" + std::to_string(i) + "]";
      const std::string an = a.value("name", ""), ap = a.value("path", "");
      if (!ValidAdapterName(an)) return FieldError(field + ".name", "\"" + an + "\" is not a valid adapter name");
      if (an == d.served_model_name) return FieldError(field + ".name", "must differ from the served model name");
      if (ap.empty()) return FieldError(field + ".path", "required: the PEFT adapter directory");
      for (const auto& [n, p] : d.adapters) {
        if (n == an) return FieldError(field + ".name", "\"" + an + "\" is listed twice");
      }
      d.adapters.emplace_back(an, ap);
    }
  }
  if (spec.contains("resources")) d.resources = spec["resources"];
  // Resources are checked exactly as a Job's (same forms, same messages).
  StatusOr<JobSpec> as_job = ParseJobSpec({{"command", "engine"}, {"resources", d.resources}});
  if (!as_job.ok()) return as_job.status();

  if (spec.contains("replicas")) {
    const json& r = spec["replicas"];
    d.min_replicas = static_cast<int>(r.value("min", int64_t{1}));
    d.max_replicas = static_cast<int>(r.value("max", int64_t{std::max(1, d.min_replicas)}));
  }
  if (d.min_replicas < 0 || d.min_replicas > 1000) return FieldError("spec.replicas.min", "must be between 0 and 1000");
  if (d.max_replicas < 1 || d.max_replicas > 1000) return FieldError("spec.replicas.max", "must be between 1 and 1000");
  if (d.max_replicas < d.min_replicas) {
    return FieldError("spec.replicas.max", "must be >= spec.replicas.min (" + std::to_string(d.min_replicas) + ")");
  }
  if (spec.contains("slo")) {
    const json& s = spec["slo"];
    d.ttft_p99_ms = s.value("ttftP99Ms", 0.0);
    d.tpot_p99_ms = s.value("tpotP99Ms", 0.0);
    d.tokens_per_s = s.value("tokensPerS", 0.0);
    if (d.ttft_p99_ms < 0) return FieldError("spec.slo.ttftP99Ms", "must not be negative");
    if (d.tpot_p99_ms < 0) return FieldError("spec.slo.tpotP99Ms", "must not be negative");
    if (d.tokens_per_s < 0) return FieldError("spec.slo.tokensPerS", "must not be negative");
  }
  d.profile = spec.value("profile", std::string("balanced"));
  const Profile* profile = nullptr;
  for (const Profile& p : kProfiles) {
    if (d.profile == p.name) profile = &p;
  }
  if (profile == nullptr) return FieldError("spec.profile", "\"" + d.profile + "\" is not latency, balanced or throughput");
  d.max_num_seqs = profile->max_num_seqs;
  d.max_num_batched_tokens = profile->max_num_batched_tokens;
  d.scale_to_zero_seconds = static_cast<int>(spec.value("scaleToZeroSeconds", int64_t{300}));
  if (d.scale_to_zero_seconds < 1 || d.scale_to_zero_seconds > 7 * 86400) {
    return FieldError("spec.scaleToZeroSeconds", "must be between 1 and 604800");
  }
  d.lane = spec.value("lane", std::string());
  if (spec.contains("autoscaler")) {
    const json& a = spec["autoscaler"];
    d.autoscaler = a.value("policy", std::string("ours"));
    if (d.autoscaler != "ours" && d.autoscaler != "hpa" && d.autoscaler != "kpa" && d.autoscaler != "aibrix") {
      return FieldError("spec.autoscaler.policy", "\"" + d.autoscaler + "\" is not ours, hpa, kpa or aibrix");
    }
    d.target_concurrency = a.value("targetConcurrency", 0.0);
    if (d.target_concurrency < 0) return FieldError("spec.autoscaler.targetConcurrency", "must not be negative");
    if (a.contains("capacity")) {
      if (d.autoscaler != "ours") return FieldError("spec.autoscaler.capacity", "only with policy ours");
      const json& c = a["capacity"];
      if (!c.is_object()) return FieldError("spec.autoscaler.capacity", "must be an object {prefillTokensPerS, decodeTokensPerS}");
      d.prefill_tokens_per_s = c.value("prefillTokensPerS", 0.0);
      d.decode_tokens_per_s = c.value("decodeTokensPerS", 0.0);
      if (!(d.prefill_tokens_per_s > 0)) {
        return FieldError("spec.autoscaler.capacity.prefillTokensPerS", "required, > 0: one replica's prompt tokens/s");
      }
      if (!(d.decode_tokens_per_s > 0)) {
        return FieldError("spec.autoscaler.capacity.decodeTokensPerS",
                          "required, > 0: one replica's generated tokens/s at a full batch");
      }
    }
  }
  if (spec.contains("engine")) {
    const json& e = spec["engine"];
    d.threads = static_cast<int>(e.value("threads", int64_t{2}));
    if (d.threads < 1 || d.threads > 256) return FieldError("spec.engine.threads", "must be between 1 and 256");
    d.kv_cache_gib = e.value("kvCacheGiB", 1.0);
    if (!(d.kv_cache_gib > 0 && d.kv_cache_gib <= 4096)) return FieldError("spec.engine.kvCacheGiB", "must be in (0, 4096]");
    d.dtype = e.value("dtype", std::string("auto"));
    if (d.dtype != "auto" && d.dtype != "f32" && d.dtype != "f16" && d.dtype != "bf16" && d.dtype != "int8") {
      return FieldError("spec.engine.dtype", "\"" + d.dtype + "\" is not auto, f32, f16, bf16 or int8");
    }
    if (e.contains("maxNumSeqs")) {
      d.max_num_seqs = static_cast<int>(e["maxNumSeqs"].get<int64_t>());
      if (d.max_num_seqs < 1 || d.max_num_seqs > 4096) return FieldError("spec.engine.maxNumSeqs", "must be between 1 and 4096");
    }
    d.prefill_order = e.value("prefillOrder", std::string("fcfs"));
    if (d.prefill_order != "fcfs" && d.prefill_order != "shortest-first") {
      return FieldError("spec.engine.prefillOrder", "\"" + d.prefill_order + "\" is not fcfs or shortest-first");
    }
    if (e.contains("maxOvertakeSeconds")) {
      if (d.prefill_order != "shortest-first") {
        return FieldError("spec.engine.maxOvertakeSeconds", "only with prefillOrder shortest-first");
      }
      d.max_overtake_seconds = e["maxOvertakeSeconds"].get<double>();
      if (!(d.max_overtake_seconds >= 0.001 && d.max_overtake_seconds <= 86400)) {
        return FieldError("spec.engine.maxOvertakeSeconds", "must be between 0.001 and 86400");
      }
    }
    if (e.contains("args")) {
      for (const json& a : e["args"]) {
        const std::string s = a.get<std::string>();
        // The platform's flags, as "--flag value" or "--flag=value": where the replica listens,
        // what it is, and what its adapter endpoint may load.
        const std::string flag = s.substr(0, s.find('='));
        if (flag == "--port" || flag == "--host" || flag == "--model" || flag == "--instance" ||
            flag == "--served-model-name" || flag == "--lora" || flag == "--allow-runtime-lora-paths") {
          return FieldError("spec.engine.args", "\"" + s + "\" is set by the platform");
        }
        if (s.rfind("--prefill-order", 0) == 0 || s.rfind("--max-overtake", 0) == 0) {
          return FieldError("spec.engine.args", "\"" + s + "\": use spec.engine.prefillOrder and maxOvertakeSeconds");
        }
        if (d.prefill_order == "shortest-first" && s.rfind("--static-batch", 0) == 0) {
          return FieldError("spec.engine.args", "\"" + s + "\" cannot be combined with prefillOrder shortest-first");
        }
        d.engine_args.push_back(s);
      }
    }
  }
  if (spec.contains("strategy")) {
    const json& s = spec["strategy"];
    const std::string type = s.value("type", std::string("RollingUpdate"));
    if (type != "RollingUpdate" && type != "Canary") {
      return FieldError("spec.strategy.type", "\"" + type + "\" is not RollingUpdate or Canary");
    }
    d.canary = type == "Canary";
    if (s.contains("canaryWeight")) {
      if (!d.canary) return FieldError("spec.strategy.canaryWeight", "only with strategy.type Canary");
      d.canary_weight = static_cast<int>(s["canaryWeight"].get<int64_t>());
      if (d.canary_weight < 0 || d.canary_weight > 100) {
        return FieldError("spec.strategy.canaryWeight", "must be a percentage between 0 and 100");
      }
    }
    d.max_surge = static_cast<int>(s.value("maxSurge", int64_t{1}));
    d.max_unavailable = static_cast<int>(s.value("maxUnavailable", int64_t{0}));
    if (d.max_surge < 0 || d.max_unavailable < 0) return FieldError("spec.strategy", "maxSurge and maxUnavailable must not be negative");
    if (d.max_surge == 0 && d.max_unavailable == 0) {
      return FieldError("spec.strategy", "maxSurge and maxUnavailable cannot both be 0 (a rolling update could never progress)");
    }
  }
  d.queue = spec.value("queue", std::string());
  d.priority = static_cast<int>(spec.value("priority", int64_t{0}));
  return d;
}

json ReplicaJob(const DeploymentSpec& spec, const std::string& tenant, const std::string& deployment,
                const std::string& job_name, int port, const std::string& engine_binary) {
  json argv = {engine_binary,
               "engine",
               "--model", spec.model,
               "--port", std::to_string(port),
               "--served-model-name", spec.served_model_name,
               "--instance", job_name,
               "--threads", std::to_string(spec.threads),
               "--kv-cache-gib", std::to_string(spec.kv_cache_gib),
               "--dtype", spec.dtype,
               "--max-num-seqs", std::to_string(spec.max_num_seqs),
               "--max-num-batched-tokens", std::to_string(spec.max_num_batched_tokens)};
  for (const auto& [n, p] : spec.adapters) {
    argv.push_back("--lora");
    argv.push_back(n + "=" + p);
  }
  if (!spec.adapters.empty()) {
    argv.push_back("--max-loras");
    argv.push_back(std::to_string(std::max<size_t>(4, spec.adapters.size())));
  }
  if (spec.prefill_order != "fcfs") {
    argv.push_back("--prefill-order");
    argv.push_back(spec.prefill_order);
    argv.push_back("--max-overtake");
    argv.push_back(SecondsText(spec.max_overtake_seconds));
  }
  for (const std::string& a : spec.engine_args) argv.push_back(a);
  json job_spec = {{"command", argv},
                   {"resources", spec.resources},
                   {"restartPolicy", "OnFailure"},
                   {"maxRetries", 100},  // the most a Job allows; failed replicas are replaced anyway
                   {"priority", spec.priority},
                   {"preemptible", false},
                   {"terminationGraceSeconds", 10}};
  if (!spec.queue.empty()) job_spec["queue"] = spec.queue;
  if (!spec.lane.empty()) job_spec["pool"] = spec.lane;
  return {{"apiVersion", "aicloud/v1"},
          {"kind", "Job"},
          {"metadata",
           {{"name", job_name},
            {"tenant", tenant},
            {"labels",
             {{kDeploymentLabel, deployment},
              {kRevisionLabel, spec.Revision()},
              {kPortLabel, std::to_string(port)}}}}},
          {"spec", job_spec}};
}

}  // namespace aicloud::control
