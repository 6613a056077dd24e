// engine_batching_bench: continuous vs static batching on the real engine (the 135M-shaped
// model, real forward passes), with request lengths from the Azure LLM inference trace 2023.
//
//   engine_batching_bench [--trace PATH] [--requests 128] [--prompt-div 8] [--output-div 2]
//                         [--max-output 256] [--batch 32] [--budget 512] [--dtype f16|int8]
//                         [--load 0.7] [--threads 2] [--policies continuous,static,padded]
//                         [--model-dir /var/tmp/aicloud-bench-135m] [--no-online]
//
// Requests: the trace's first --requests rows, in order. The trace was served by GPUs with
// 7B-70B models; a 2-core CPU runs the 135M model ~1,000x slower, so lengths are divided
// (prompt = ContextTokens / prompt-div, output = GeneratedTokens / output-div, capped at
// max-output, at least 1 each) — the scale is printed with the results. Prompts are distinct
// random token ids; outputs are forced to their length (ignore_eos). Prefix caching is off so
// no policy gets free tokens.
//
// Policies, all on one Engine configuration (--batch sequences at most, --budget tokens a step):
//   continuous     the engine as it serves: every step takes all running sequences plus new
//                  prefill chunks; a finished sequence's slot is refilled at the next step.
//   static         the engine's --static-batch mode: --batch requests are admitted together
//                  and run until the last finishes, then the next batch; only real tokens are
//                  computed (a finished sequence leaves the batch). Static batching at its best.
//   padded         static batching as Hugging Face generate computes it: each batch's prompts
//                  are left-padded to its longest prompt and every member decodes until its
//                  longest output is done; the padding is really computed, only real tokens
//                  are counted, and a request's answer is ready when its batch ends.
// a) offline: every request at t = 0; throughput = real output tokens / makespan.
// b) online (continuous and static): the trace's inter-arrival times rescaled to --load x the
//    continuous policy's offline request rate.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "engine/model/random_checkpoint.h"
#include "engine/server/engine.h"

namespace {

using namespace aicloud;
using namespace aicloud::engine;
using Clock = std::chrono::steady_clock;

[[noreturn]] void Die(const std::string& why) {
  std::fprintf(stderr, "engine_batching_bench: %s\n", why.c_str());
  std::exit(1);
}

struct Flags {
  std::string trace = std::string(AICLOUD_SOURCE_DIR) +
                      "/data/traces/azure-llm-inference-2023/AzureLLMInferenceTrace_conv.csv";
  int requests = 128;
  int prompt_div = 8;
  int output_div = 2;
  int max_output = 256;
  int batch = 32;
  int budget = 512;
  std::string dtype = "f16";
  double load = 0.7;
  int threads = 2;
  std::string policies = "continuous,static,padded";
  std::string model_dir = "/var/tmp/aicloud-bench-135m";
  bool online = true;
};

struct Row {
  double arrival_s;  // since the first row
  int prompt;
  int output;
};

// "2023-11-16 18:15:46.6805900" -> seconds since midnight.
double ParseTime(const std::string& ts, int line) {
  int h = 0, m = 0;
  double s = 0;
  if (std::sscanf(ts.c_str(), "%*d-%*d-%*d %d:%d:%lf", &h, &m, &s) != 3) {
    Die("line " + std::to_string(line) + ": bad TIMESTAMP \"" + ts + "\"");
  }
  return h * 3600.0 + m * 60.0 + s;
}

std::vector<Row> ReadTrace(const Flags& f) {
  std::ifstream in(f.trace);
  if (!in) Die("cannot open " + f.trace);
  std::string line;
  std::getline(in, line);  // header
  std::vector<Row> rows;
  double t0 = -1;
  for (int n = 2; static_cast<int>(rows.size()) < f.requests && std::getline(in, line); ++n) {
    std::stringstream ss(line);
    std::string ts, ctx, gen;
    if (!std::getline(ss, ts, ',') || !std::getline(ss, ctx, ',') || !std::getline(ss, gen, ',')) {
      Die(f.trace + ":" + std::to_string(n) + ": expected TIMESTAMP,ContextTokens,GeneratedTokens");
    }
    const double t = ParseTime(ts, n);
    if (t0 < 0) t0 = t;
    Row r;
    r.arrival_s = t - t0;
    r.prompt = std::max(1, std::atoi(ctx.c_str()) / f.prompt_div);
    r.output = std::clamp(std::atoi(gen.c_str()) / f.output_div, 1, f.max_output);
    rows.push_back(r);
  }
  if (rows.empty()) Die(f.trace + ": no requests");
  return rows;
}

struct Outcome {
  double submit = 0, first = -1, real_done = -1, end = -1;  // seconds since the run began
  int tokens = 0;
};

struct RunResult {
  double makespan_s = 0;
  double out_tokens_per_s = 0;
  double req_per_s = 0;
  std::vector<double> ttft, e2e;
  int64_t computed_tokens = 0;  // prompt + output tokens really run, padding included
};

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5));
  return v[i];
}

std::unique_ptr<Engine> StartEngine(const Flags& f, int static_batch, int max_waiting) {
  EngineOptions o;
  o.model_dir = f.model_dir;
  o.threads = f.threads;
  o.kv_cache_gib = 2.0;
  o.max_num_seqs = f.batch;
  o.max_num_batched_tokens = f.budget;
  o.max_waiting = max_waiting;
  o.enable_prefix_caching = false;
  o.static_batch_size = static_batch;
  if (f.dtype == "int8" || f.dtype == "q8") o.weights = kernels::WeightFormat::kQ8;
  else if (f.dtype == "f16") o.weights = kernels::WeightFormat::kF16;
  else Die("--dtype: " + f.dtype + " is not f16 or int8");
  StatusOr<std::unique_ptr<Engine>> e = Engine::Load(o);
  if (!e.ok()) Die(std::string(e.status().message()));
  return std::move(*e);
}

std::vector<int32_t> Prompt(size_t i, int len, int pad_to) {
  std::vector<int32_t> p;
  for (int k = len; k < pad_to; ++k) p.push_back(220);  // left padding, a real token id
  uint64_t x = 0x9e3779b97f4a7c15ULL * (i + 1);
  for (int k = 0; k < len; ++k) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    p.push_back(static_cast<int32_t>(1000 + x % 39000));
  }
  return p;
}

// Runs `rows` through a fresh engine. arrival_scale: seconds of run time per trace second
// (< 0: everything at t = 0). padded: requests padded per batch of f.batch in arrival order.
RunResult Run(const Flags& f, const std::vector<Row>& rows, int static_batch, bool padded,
              double arrival_scale) {
  std::unique_ptr<Engine> e = StartEngine(f, static_batch, static_cast<int>(rows.size()) + 1);
  const std::string model = e->model_name();
  std::vector<Outcome> out(rows.size());
  std::vector<std::shared_ptr<Stream>> streams(rows.size());
  std::vector<int> want(rows.size());  // tokens the request really asked for
  RunResult res;

  // Per-request prompt and max_tokens (padded: the batch's longest prompt and output).
  std::vector<std::vector<int32_t>> prompts(rows.size());
  std::vector<int> max_tokens(rows.size());
  for (size_t b = 0; b < rows.size(); b += static_cast<size_t>(f.batch)) {
    const size_t end = std::min(rows.size(), b + static_cast<size_t>(f.batch));
    int max_p = 0, max_o = 0;
    for (size_t i = b; i < end; ++i) max_p = std::max(max_p, rows[i].prompt), max_o = std::max(max_o, rows[i].output);
    for (size_t i = b; i < end; ++i) {
      prompts[i] = Prompt(i, rows[i].prompt, padded ? max_p : 0);
      max_tokens[i] = padded ? max_o : rows[i].output;
      want[i] = rows[i].output;
      res.computed_tokens += static_cast<int64_t>(prompts[i].size()) + max_tokens[i];
    }
  }

  const auto t0 = Clock::now();
  auto now = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  size_t next = 0, finished = 0;
  while (finished < rows.size()) {
    const double t = now();
    while (next < rows.size() && (arrival_scale < 0 || rows[next].arrival_s * arrival_scale <= t)) {
      GenerateRequest g;
      g.model = model;
      g.prompt = prompts[next];
      g.sampling.max_tokens = max_tokens[next];
      g.sampling.ignore_eos = true;
      StatusOr<std::shared_ptr<Stream>> s = e->Submit(std::move(g));
      if (!s.ok()) Die("submit: " + std::string(s.status().message()));
      streams[next] = *s;
      out[next].submit = now();
      ++next;
    }
    bool any = false;
    for (size_t i = 0; i < next; ++i) {
      if (out[i].end >= 0) continue;
      Delta d;
      while (streams[i]->Next(&d, std::chrono::milliseconds(0))) {
        any = true;
        if (!d.error.ok()) Die("request failed: " + std::string(d.error.message()));
        const double at = now();
        if (!d.tokens.empty() && out[i].first < 0) out[i].first = at;
        out[i].tokens += static_cast<int>(d.tokens.size());
        if (out[i].real_done < 0 && out[i].tokens >= want[i]) out[i].real_done = at;
        if (d.finish_reason) {
          out[i].end = at;
          ++finished;
          break;
        }
        d = Delta();
      }
    }
    if (!any) std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  double first_submit = 1e300, last_end = 0;
  int64_t real_tokens = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    first_submit = std::min(first_submit, out[i].submit);
    last_end = std::max(last_end, out[i].end);
    real_tokens += want[i];
    res.ttft.push_back(out[i].first - out[i].submit);
    // A padded batch answers when it ends (generate returns the whole batch at once).
    res.e2e.push_back((padded ? out[i].end : out[i].real_done) - out[i].submit);
  }
  res.makespan_s = last_end - first_submit;
  res.out_tokens_per_s = static_cast<double>(real_tokens) / res.makespan_s;
  res.req_per_s = static_cast<double>(rows.size()) / res.makespan_s;
  return res;
}

void Print(const char* name, const RunResult& r) {
  std::printf("| %-10s | %8.1f | %9.1f | %6.3f | %6.1f / %6.1f | %6.2f / %6.2f | %9lld |\n", name,
              r.makespan_s, r.out_tokens_per_s, r.req_per_s, Percentile(r.e2e, 0.5),
              Percentile(r.e2e, 0.99), Percentile(r.ttft, 0.5), Percentile(r.ttft, 0.99),
              static_cast<long long>(r.computed_tokens));
  std::fflush(stdout);
}

void Header() {
  std::printf("| policy | wall s | out tok/s | req/s | e2e p50 / p99 s | TTFT p50 / p99 s | tokens computed |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|\n");
}

bool Has(const std::string& list, const std::string& name) {
  return ("," + list + ",").find("," + name + ",") != std::string::npos;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) Die(a + " needs a value");
      return argv[++i];
    };
    if (a == "--trace") f.trace = val();
    else if (a == "--requests") f.requests = std::stoi(val());
    else if (a == "--prompt-div") f.prompt_div = std::stoi(val());
    else if (a == "--output-div") f.output_div = std::stoi(val());
    else if (a == "--max-output") f.max_output = std::stoi(val());
    else if (a == "--batch") f.batch = std::stoi(val());
    else if (a == "--budget") f.budget = std::stoi(val());
    else if (a == "--dtype") f.dtype = val();
    else if (a == "--load") f.load = std::stod(val());
    else if (a == "--threads") f.threads = std::stoi(val());
    else if (a == "--policies") f.policies = val();
    else if (a == "--model-dir") f.model_dir = val();
    else if (a == "--no-online") f.online = false;
    else Die("unknown flag " + a);
  }
  if (f.requests < 1 || f.prompt_div < 1 || f.output_div < 1 || f.batch < 1 || f.load <= 0) {
    Die("--requests, --prompt-div, --output-div, --batch and --load must be positive");
  }
  if (!std::filesystem::exists(std::filesystem::path(f.model_dir) / "config.json")) {
    Die(f.model_dir + " has no checkpoint: run engine_bench once (it writes one there), or pass --model-dir");
  }
  const std::vector<Row> rows = ReadTrace(f);
  double mp = 0, mo = 0;
  for (const Row& r : rows) mp += r.prompt, mo += r.output;
  std::printf("# engine_batching_bench\n\n%zu requests of %s; lengths scaled: prompt = ContextTokens / %d "
              "(mean %.0f), output = GeneratedTokens / %d capped at %d (mean %.0f); %s weights, %d threads, "
              "%d sequences, %d tokens a step, prefix caching off\n\n",
              rows.size(), f.trace.c_str(), f.prompt_div, mp / rows.size(), f.output_div, f.max_output,
              mo / rows.size(), f.dtype.c_str(), f.threads, f.batch, f.budget);

  std::printf("## Offline: every request at t = 0\n\n");
  Header();
  RunResult cont, stat, pad;
  if (Has(f.policies, "continuous")) Print("continuous", cont = Run(f, rows, 0, false, -1));
  if (Has(f.policies, "static")) Print("static", stat = Run(f, rows, f.batch, false, -1));
  if (Has(f.policies, "padded")) Print("padded", pad = Run(f, rows, f.batch, true, -1));
  auto ratio = [](const RunResult& a, const RunResult& b, const char* name) {
    if (a.makespan_s > 0 && b.makespan_s > 0) {
      std::printf("continuous vs %s: throughput %.2fx, e2e p99 %.2fx lower\n", name,
                  a.out_tokens_per_s / b.out_tokens_per_s, Percentile(b.e2e, 0.99) / Percentile(a.e2e, 0.99));
    }
  };
  std::printf("\n");
  ratio(cont, stat, "static");
  ratio(cont, pad, "padded static");

  if (f.online && cont.makespan_s > 0) {
    const double trace_span = rows.back().arrival_s > 0 ? rows.back().arrival_s : 1.0;
    const double trace_rps = static_cast<double>(rows.size()) / trace_span;
    const double scale = trace_rps / (f.load * cont.req_per_s);  // run seconds per trace second
    std::printf("\n## Online: trace arrivals rescaled to %.3f req/s (%.0f%% of continuous offline capacity)\n\n",
                f.load * cont.req_per_s, f.load * 100);
    Header();
    RunResult oc, os;
    if (Has(f.policies, "continuous")) Print("continuous", oc = Run(f, rows, 0, false, scale));
    if (Has(f.policies, "static")) Print("static", os = Run(f, rows, f.batch, false, scale));
    std::printf("\n");
    ratio(oc, os, "static");
  }
  return 0;
}
