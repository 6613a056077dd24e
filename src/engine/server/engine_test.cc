#include "engine/server/engine.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <cstring>
#include <fstream>
#include <regex>
#include <nlohmann/json.hpp>
#include <thread>

#include "auth/auth.h"
#include "engine/lora/random_adapter.h"
#include "engine/model/random_checkpoint.h"
#include "engine/model/model_test_util.h"
#include "engine/model/test_models.h"
#include "engine/server/api.h"
#include "http/client.h"
#include "http/sse.h"
#include "http/test_socket.h"
#include "http/usage_header.h"

namespace aicloud::engine {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
const std::string kSource = AICLOUD_SOURCE_DIR;

// The reference fixtures' "plain" model (engine/model/test_models.h), written as "tiny".
fs::path WriteModel() {
  // Each test runs in its own process, so the checkpoint (~27 MB) is written once per process
  // and removed with the directory when the process exits.
  static const testing::TempDir dir;
  static const fs::path model = [] {
    const InitCheckpointOptions o = PlainTestModel(kSource);
    StatusOr<ModelConfig> w = InitRandomCheckpoint(dir / "tiny", o);
    EXPECT_TRUE(w.ok()) << w.status();
    return dir / "tiny";
  }();
  return model;
}

std::unique_ptr<Engine> Start(EngineOptions o = {}) {
  o.model_dir = WriteModel().string();
  if (o.kv_cache_gib == 1.0) o.kv_cache_gib = 0.05;
  o.kv_dtype = DType::kF32;
  StatusOr<std::unique_ptr<Engine>> e = Engine::Load(o);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

GenerateRequest Greedy(std::vector<int32_t> prompt, int max_tokens) {
  GenerateRequest g;
  g.model = "tiny";
  g.prompt = std::move(prompt);
  g.sampling.temperature = 0;
  g.sampling.max_tokens = max_tokens;
  g.sampling.ignore_eos = true;
  return g;
}

struct Result {
  std::vector<int32_t> tokens;
  std::string text;
  std::string finish;
  Delta last;
};

Result Drain(Stream& s) {
  Result r;
  Delta d;
  for (int i = 0; i < 600; ++i) {  // up to a minute
    if (!s.Next(&d)) continue;
    r.tokens.insert(r.tokens.end(), d.tokens.begin(), d.tokens.end());
    r.text += d.text;
    if (d.finish_reason) {
      r.finish = *d.finish_reason;
      r.last = d;
      return r;
    }
  }
  ADD_FAILURE() << "request did not finish";
  return r;
}

TEST(Engine, GreedyMatchesTheReference) {
  std::unique_ptr<Engine> e = Start();
  ASSERT_NE(e, nullptr);
  std::ifstream in(kSource + "/tests/engine/data/reference_plain.json");
  json fx;
  in >> fx;
  const auto want = fx["greedy"].get<std::vector<int32_t>>();
  StatusOr<std::shared_ptr<Stream>> s =
      e->Submit(Greedy(fx["prompt"].get<std::vector<int32_t>>(), static_cast<int>(want.size())));
  ASSERT_TRUE(s.ok()) << s.status();
  Result r = Drain(**s);
  EXPECT_EQ(r.tokens, want);
  EXPECT_EQ(r.finish, "length");
  EXPECT_EQ(r.last.completion_tokens, static_cast<int>(want.size()));
  EXPECT_EQ(r.last.prompt_tokens, static_cast<int>(fx["prompt"].size()));
}

// A request's tokens do not depend on what shares its steps: eight requests with different
// prompt lengths run alone and then all at once (prefills chunked differently, decodes batched
// with the others) give exactly the same tokens, greedy and seeded sampling alike, with the
// weights as stored and quantized to int8. The kernels are bit-identical per row whatever the
// batch (matmul_test and attention_test, BatchInvariant), so this holds for every request, not
// just on average.
TEST(Engine, ConcurrentRequestsMatchSoloRuns) {
  for (bool int8 : {false, true}) {
    SCOPED_TRACE(int8 ? "int8 weights" : "weights as stored");
    EngineOptions options{.max_num_seqs = 8, .max_num_batched_tokens = 24};
    if (int8) options.weights = kernels::WeightFormat::kQ8;
    std::unique_ptr<Engine> e = Start(options);
    ASSERT_NE(e, nullptr);
    std::vector<GenerateRequest> reqs;
    for (int i = 0; i < 8; ++i) {
      GenerateRequest g = Greedy({}, 10 + i);
      for (int t = 0; t < 5 + 7 * i; ++t) g.prompt.push_back((t * 31 + i * 97) % 50000);
      if (i % 2 == 1) {  // every other request samples, each with its own seed
        g.sampling.temperature = 1.0f;
        g.sampling.top_p = 0.95f;
        g.sampling.seed = 1000 + i;
      }
      reqs.push_back(g);
    }
    std::vector<std::vector<int32_t>> solo;
    for (const GenerateRequest& g : reqs) {
      StatusOr<std::shared_ptr<Stream>> s = e->Submit(g);
      ASSERT_TRUE(s.ok());
      solo.push_back(Drain(**s).tokens);
    }
    std::vector<std::shared_ptr<Stream>> streams;
    for (const GenerateRequest& g : reqs) {
      StatusOr<std::shared_ptr<Stream>> s = e->Submit(g);
      ASSERT_TRUE(s.ok());
      streams.push_back(*s);
    }
    for (size_t i = 0; i < streams.size(); ++i) {
      EXPECT_EQ(Drain(*streams[i]).tokens, solo[i]) << "request " << i;
    }
    // Another seed gives other tokens (the seed is really used).
    GenerateRequest other = reqs[3];
    other.sampling.seed = 99;
    StatusOr<std::shared_ptr<Stream>> s = e->Submit(other);
    ASSERT_TRUE(s.ok());
    EXPECT_NE(Drain(**s).tokens, solo[3]);
  }
}

// With --prefill-order shortest-first a short prompt that arrives behind a long one is answered
// while the long one is still being prefilled; in arrival order (the default) it waits for it.
// Either way every request's tokens are those of its solo run.
TEST(Engine, ShortestFirstAnswersAShortPromptBehindALongOne) {
  for (PrefillOrder order : {PrefillOrder::kFcfs, PrefillOrder::kShortestFirst}) {
    const bool sf = order == PrefillOrder::kShortestFirst;
    SCOPED_TRACE(sf ? "shortest-first" : "fcfs");
    // 2 tokens a step: the long prompt takes 204 steps to prefill, the short one 3 (a wide
    // margin in steps, though still only milliseconds).
    EngineOptions options{.max_num_seqs = 2, .max_num_batched_tokens = 2};
    options.prefill_order = order;
    std::unique_ptr<Engine> e = Start(options);
    ASSERT_NE(e, nullptr);
    GenerateRequest long_one = Greedy({}, 1), short_one = Greedy({}, 3);
    for (int t = 0; t < 51 * 8; ++t) long_one.prompt.push_back((t * 37 + 11) % 50000);
    for (int t = 0; t < 5; ++t) short_one.prompt.push_back((t * 53 + 7) % 50000);
    StatusOr<std::shared_ptr<Stream>> solo = e->Submit(short_one);
    ASSERT_TRUE(solo.ok());
    const std::vector<int32_t> want = Drain(**solo).tokens;
    // The case needs the short prompt to arrive while the long one is prefilling; on a busy
    // machine this thread may not run again before the engine is done with the long one (or all
    // but its last steps), and then the round is tried again. In arrival order the long one is
    // answered first however late the short one comes, so that order gets no second round; with
    // shortest-first a round in which the long one was answered first counts as such a late
    // arrival (a round takes milliseconds, so a thread descheduled that long misses it), and an
    // order that never lets the short one overtake fails all twenty.
    bool tried = false;
    for (int round = 0; round < 20 && !tried; ++round) {
      StatusOr<std::shared_ptr<Stream>> l = e->Submit(long_one);
      StatusOr<std::shared_ptr<Stream>> sh = e->Submit(short_one);
      ASSERT_TRUE(l.ok() && sh.ok());
      Delta early;
      if ((*l)->Next(&early, std::chrono::milliseconds(0)) && early.finish_reason.has_value()) {
        Drain(**sh);
        continue;
      }
      EXPECT_EQ(Drain(**sh).tokens, want);
      // Had the long prompt been answered when the short one's answer was complete?
      Delta d;
      const bool long_answered = (*l)->Next(&d, std::chrono::milliseconds(0)) && d.finish_reason.has_value();
      if (!long_answered) {
        EXPECT_EQ(Drain(**l).tokens.size(), 1u);
      }
      if (sf && long_answered) continue;  // arrived too late to overtake: another round
      tried = true;
      EXPECT_EQ(long_answered, !sf);
    }
    EXPECT_TRUE(tried) << "the short prompt never overtook the long one in twenty rounds";
  }
}

TEST(Engine, StopStringsCancelAndQueueLimit) {
  std::unique_ptr<Engine> e = Start({.max_waiting = 1});
  ASSERT_NE(e, nullptr);
  // Learn what greedy produces, then stop on a piece of it.
  StatusOr<std::shared_ptr<Stream>> s = e->Submit(Greedy({464, 2068, 7586}, 20));
  ASSERT_TRUE(s.ok());
  Result full = Drain(**s);
  ASSERT_GE(full.text.size(), 6u);
  GenerateRequest stop = Greedy({464, 2068, 7586}, 20);
  const std::string needle = full.text.substr(full.text.size() / 2, 3);
  stop.stop = {needle};
  s = e->Submit(stop);
  ASSERT_TRUE(s.ok());
  Result stopped = Drain(**s);
  EXPECT_EQ(stopped.finish, "stop");
  EXPECT_EQ(stopped.text, full.text.substr(0, full.text.find(needle)));

  // A second request while the first has not produced a token: the queue (1) is full.
  StatusOr<std::shared_ptr<Stream>> a = e->Submit(Greedy({1, 2, 3}, 200));
  ASSERT_TRUE(a.ok());
  StatusOr<std::shared_ptr<Stream>> b = e->Submit(Greedy({4, 5, 6}, 5));
  EXPECT_EQ(b.status().code(), StatusCode::kResourceExhausted) << b.status();
  // Cancel the long one: it ends as aborted long before 200 tokens.
  Delta d;
  while (!(*a)->Next(&d)) {
  }
  (*a)->Cancel();
  Result rest = Drain(**a);
  EXPECT_EQ(rest.finish, "abort");
  EXPECT_LT(rest.tokens.size() + d.tokens.size(), 200u);
  // Impossible requests are refused up front.
  StatusOr<std::shared_ptr<Stream>> huge = e->Submit(Greedy(std::vector<int32_t>(5000, 7), 4));
  EXPECT_EQ(huge.status().code(), StatusCode::kInvalidArgument) << huge.status();
}

// Requests for two adapters and the base model share steps and still get their solo outputs;
// the adapters change the output; adapters load and unload at run time.
TEST(Engine, LoraAdaptersInOneBatch) {
  std::unique_ptr<Engine> probe = Start();
  ASSERT_NE(probe, nullptr);
  const ModelConfig config = probe->config();
  probe.reset();
  const fs::path dir = WriteModel().parent_path();
  for (const auto& [name, seed] : {std::pair{"ad1", 5}, std::pair{"ad2", 6}}) {
    InitLoraOptions o;
    o.rank = 8;
    o.alpha = 32;
    o.targets = {LoraModule::kQ, LoraModule::kV, LoraModule::kO, LoraModule::kDown};
    o.seed = static_cast<uint64_t>(seed);
    o.b_std = 0.5;
    o.overwrite = true;
    ASSERT_TRUE(InitRandomLora(dir / name, config, o).ok());
  }
  EngineOptions eo;
  eo.loras = {{"ad1", (dir / "ad1").string()}};
  eo.max_loras = 2;
  std::unique_ptr<Engine> e = Start(eo);
  ASSERT_NE(e, nullptr);
  ASSERT_TRUE(e->loras().Load("ad2", dir / "ad2").ok());
  EXPECT_EQ(e->loras().Load("ad2", dir / "ad2").code(), StatusCode::kAlreadyExists);

  std::vector<GenerateRequest> reqs;
  for (const char* model : {"tiny", "ad1", "ad2"}) {
    GenerateRequest g = Greedy({464, 2068, 7586, 21831, 18045}, 12);
    g.model = model;
    reqs.push_back(g);
  }
  std::vector<std::vector<int32_t>> solo;
  for (const GenerateRequest& g : reqs) {
    StatusOr<std::shared_ptr<Stream>> s = e->Submit(g);
    ASSERT_TRUE(s.ok()) << s.status();
    solo.push_back(Drain(**s).tokens);
  }
  EXPECT_NE(solo[0], solo[1]) << "adapter ad1 changed nothing";
  EXPECT_NE(solo[1], solo[2]);
  std::vector<std::shared_ptr<Stream>> mixed;
  for (int round = 0; round < 2; ++round) {
    for (const GenerateRequest& g : reqs) mixed.push_back(*e->Submit(g));
  }
  for (size_t i = 0; i < mixed.size(); ++i) EXPECT_EQ(Drain(*mixed[i]).tokens, solo[i % 3]) << "request " << i;

  // vllm:lora_requests_info names the adapter of a running request.
  {
    GenerateRequest longer = reqs[1];
    longer.sampling.max_tokens = 400;
    StatusOr<std::shared_ptr<Stream>> s = e->Submit(longer);
    ASSERT_TRUE(s.ok());
    // Tokens of three steps: the step that delivered the first one has published its info.
    size_t got = 0;
    while (got < 3) {
      Delta d;
      if ((*s)->Next(&d)) got += d.tokens.size();
    }
    const std::string text = e->metrics().Render();
    EXPECT_NE(text.find("vllm:lora_requests_info{running_lora_adapters=\"ad1\",waiting_lora_adapters=\"\",max_lora=\"2\"}"),
              std::string::npos) << text;
    (*s)->Cancel();
    Drain(**s);
  }

  GenerateRequest unknown = reqs[1];
  unknown.model = "ad3";
  EXPECT_EQ(e->Submit(unknown).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(e->loras().Unload("ad2").ok());
  EXPECT_EQ(e->Submit(reqs[2]).status().code(), StatusCode::kNotFound);
}

// n choices: choice 0 is the request alone (same seed, same tokens), the others draw with their
// own seeds, and they read the prompt's KV from the prefix cache instead of computing it again.
TEST(Engine, ChoicesShareThePromptAndDrawIndependently) {
  std::unique_ptr<Engine> e = Start();
  ASSERT_NE(e, nullptr);
  std::vector<int32_t> prompt(40);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(100 + 7 * i);
  GenerateRequest g = Greedy(prompt, 12);
  g.sampling.temperature = 1.0f;
  g.sampling.seed = 11;
  StatusOr<std::shared_ptr<Stream>> solo = e->Submit(g);
  ASSERT_TRUE(solo.ok());
  const std::vector<int32_t> alone = Drain(**solo).tokens;
  e->Submit(Greedy({1, 2, 3}, 1));  // another prompt in between, so the cache is not trivially warm
  auto signal = std::make_shared<StreamSignal>();
  StatusOr<std::vector<std::shared_ptr<Stream>>> s = e->SubmitChoices(g, 3, signal);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->size(), 3u);
  std::vector<Result> r;
  for (auto& st : *s) r.push_back(Drain(*st));
  EXPECT_EQ(r[0].tokens, alone);
  EXPECT_NE(r[1].tokens, r[0].tokens);
  EXPECT_NE(r[2].tokens, r[1].tokens);
  // 40 prompt tokens are two full blocks of 16; the later choices find both cached.
  EXPECT_EQ(r[1].last.cached_tokens, 32);
  EXPECT_EQ(r[2].last.cached_tokens, 32);
  // The same seed gives the same n choices again.
  StatusOr<std::vector<std::shared_ptr<Stream>>> again = e->SubmitChoices(g, 3);
  ASSERT_TRUE(again.ok());
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(Drain(*(*again)[i]).tokens, r[i].tokens) << "choice " << i;
  // All or nothing against the queue limit.
  EXPECT_EQ(e->SubmitChoices(g, 0).status().code(), StatusCode::kInvalidArgument);
}

// Constrained requests: every output of a random-weight model matches its grammar and ends by
// EOS within max_tokens, and a constrained request's tokens do not depend on what shares its
// steps (batch invariance, as for unconstrained ones).
TEST(Engine, ConstrainedOutputsMatchAndIgnoreTheirBatch) {
  std::unique_ptr<Engine> e = Start({.max_num_seqs = 8, .max_num_batched_tokens = 64});
  ASSERT_NE(e, nullptr);
  OutputConstraint c;
  c.kind = OutputConstraint::Kind::kJsonSchema;
  c.field = "guided_json";
  c.schema = nlohmann::ordered_json::parse(R"({"type":"object","properties":{
      "id":{"type":"integer"},"tag":{"enum":["a","b"]},"ok":{"type":"boolean"}},
      "required":["id","tag","ok"],"additionalProperties":false})");
  StatusOr<std::shared_ptr<structured::TokenGrammar>> g = ConstraintGrammar(c, *e->grammars());
  ASSERT_TRUE(g.ok()) << g.status();
  std::vector<GenerateRequest> reqs;
  for (int i = 0; i < 6; ++i) {
    GenerateRequest r = Greedy({100, 200, static_cast<int32_t>(300 + i)}, 40);
    r.sampling.ignore_eos = false;
    r.sampling.temperature = 1.0f;
    r.sampling.seed = 7 + i;
    if (i % 2 == 0) r.sampling.grammar = *g;  // constrained and free requests share the batch
    reqs.push_back(r);
  }
  std::vector<Result> solo;
  for (const GenerateRequest& r : reqs) {
    StatusOr<std::shared_ptr<Stream>> s = e->Submit(r);
    ASSERT_TRUE(s.ok()) << s.status();
    solo.push_back(Drain(**s));
  }
  for (int i = 0; i < 6; i += 2) {
    SCOPED_TRACE(solo[i].text);
    EXPECT_EQ(solo[i].finish, "stop");  // closed by EOS, never cut off by max_tokens
    const json v = json::parse(solo[i].text, nullptr, false);
    ASSERT_TRUE(v.is_object());
    EXPECT_TRUE(v["id"].is_number_integer());
    EXPECT_TRUE(v["tag"] == "a" || v["tag"] == "b");
    EXPECT_TRUE(v["ok"].is_boolean());
  }
  std::vector<std::shared_ptr<Stream>> together;
  for (const GenerateRequest& r : reqs) together.push_back(*e->Submit(r));
  for (size_t i = 0; i < together.size(); ++i) EXPECT_EQ(Drain(*together[i]).tokens, solo[i].tokens) << "request " << i;

  // A budget below the shortest complete output (its greedy tokenisation and the EOS) is
  // refused before anything runs; exactly that budget is enough to finish.
  GenerateRequest tight = reqs[0];
  tight.sampling.max_tokens = (*g)->MinTokens();
  StatusOr<std::shared_ptr<Stream>> just = e->Submit(tight);
  ASSERT_TRUE(just.ok()) << just.status();
  const Result fits = Drain(**just);
  EXPECT_EQ(fits.finish, "stop");
  EXPECT_TRUE(json::parse(fits.text, nullptr, false).is_object()) << fits.text;
  tight.sampling.max_tokens = (*g)->MinTokens() - 1;
  StatusOr<std::shared_ptr<Stream>> refused = e->Submit(tight);
  EXPECT_FALSE(refused.ok());
}

class ApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    engine_ = Start();
    ASSERT_NE(engine_, nullptr);
    StatusOr<std::unique_ptr<EngineServer>> s = EngineServer::Start(engine_.get(), {.port = 0, .worker_threads = 4});
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
    client_ = std::make_unique<http::Client>("http://127.0.0.1:" + std::to_string(server_->port()));
  }
  void TearDown() override {
    client_.reset();
    if (server_) server_->Stop();
  }
  std::pair<int, json> Post(const std::string& path, const std::string& body) {
    StatusOr<http::ClientResponse> r = client_->Send("POST", path, body);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return {0, json()};
    json j = json::parse(r->body, nullptr, false);
    return {r->status, j};
  }
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<EngineServer> server_;
  std::unique_ptr<http::Client> client_;
};

// A unary answer repeats its usage in x-aicloud-usage (the gateway charges it without parsing
// the body); a streamed one, whose usage comes last, does not.
TEST_F(ApiTest, UnaryAnswersCarryTheirUsageInAHeader) {
  const std::pair<const char*, const char*> calls[] = {
      {"/v1/completions", R"({"model":"tiny","prompt":"Hello there","max_tokens":5,"temperature":0})"},
      {"/v1/chat/completions", R"({"model":"tiny","messages":[{"role":"user","content":"Hi"}],"max_tokens":3})"},
      {"/v1/embeddings", R"({"model":"tiny","input":["a cat","the sea"]})"},
  };
  for (const auto& [path, body] : calls) {
    SCOPED_TRACE(path);
    StatusOr<http::ClientResponse> r = client_->Send("POST", path, body);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->status, 200) << r->body;
    const json usage = json::parse(r->body)["usage"];
    auto h = r->headers.find(http::kUsageHeader);
    ASSERT_NE(h, r->headers.end());
    std::optional<http::UsageCounts> u = http::ParseUsageHeader(h->second);
    ASSERT_TRUE(u.has_value()) << h->second;
    EXPECT_EQ(u->prompt_tokens, usage["prompt_tokens"].get<int64_t>());
    EXPECT_GT(u->prompt_tokens, 0);
    EXPECT_EQ(u->completion_tokens, usage.value("completion_tokens", int64_t{0}));
  }
  StatusOr<http::ClientResponse> s = client_->Send(
      "POST", "/v1/completions", R"({"model":"tiny","prompt":"Hi","max_tokens":2,"stream":true,"stream_options":{"include_usage":true}})");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_FALSE(s->headers.contains(http::kUsageHeader));
}

TEST_F(ApiTest, CompletionsChatModelsAndErrors) {
  auto [code, j] = Post("/v1/completions", R"({"model":"tiny","prompt":"Hello there","max_tokens":5,"temperature":0})");
  ASSERT_EQ(code, 200) << j.dump();
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["completion_tokens"], 5);
  EXPECT_EQ(j["usage"]["prompt_tokens"], 2);  // "Hello", " there"
  // The same prompt as token ids gives the same text.
  auto [code2, j2] = Post("/v1/completions", R"({"model":"tiny","prompt":[15496,612],"max_tokens":5,"temperature":0})");
  ASSERT_EQ(code2, 200);
  EXPECT_EQ(j2["choices"][0]["text"], j["choices"][0]["text"]);

  auto [cc, chat] = Post("/v1/chat/completions",
                         R"({"model":"tiny","messages":[{"role":"user","content":"Hi"}],"max_tokens":4,"seed":3})");
  ASSERT_EQ(cc, 200) << chat.dump();
  EXPECT_EQ(chat["object"], "chat.completion");
  EXPECT_EQ(chat["choices"][0]["message"]["role"], "assistant");
  EXPECT_TRUE(chat["choices"][0]["message"]["content"].is_string());

  StatusOr<http::ClientResponse> models = client_->Send("GET", "/v1/models");
  ASSERT_TRUE(models.ok());
  EXPECT_EQ(json::parse(models->body)["data"][0]["id"], "tiny");

  struct Bad {
    std::string path, body;
    int status;
    std::string param;
  };
  const Bad bad[] = {
      {"/v1/completions", "{not json", 400, ""},
      {"/v1/completions", R"({"model":"nope","prompt":"x"})", 404, ""},
      {"/v1/completions", R"({"model":"tiny","prompt":"x","n":17})", 400, "n"},
      {"/v1/completions", R"({"model":"tiny","prompt":"x","n":0})", 400, "n"},
      {"/v1/completions", R"({"model":"tiny","prompt":"x","logit_bias":{"-1":5}})", 400, "logit_bias"},
      {"/v1/completions", R"({"model":"tiny","prompt":"x","logit_bias":{"5":101}})", 400, "logit_bias"},
      {"/v1/embeddings", R"({"model":"tiny","input":"x","encoding_format":"int8"})", 400, "encoding_format"},
      {"/v1/completions", R"({"model":"tiny","prompt":"x","temperature":-1})", 400, "temperature"},
      {"/v1/completions", R"({"model":"tiny","prompt":"x","max_tokens":100000})", 400, "max_tokens"},
      {"/v1/completions", R"({"model":"tiny","prompt":[99999999]})", 400, "prompt"},
      {"/v1/completions", R"({"model":"tiny"})", 400, "prompt"},
      {"/v1/chat/completions", R"({"model":"tiny","messages":[]})", 400, "messages"},
      {"/v1/chat/completions", R"({"model":"tiny","messages":[{"role":"wizard","content":"x"}]})", 400, "messages[0].role"},
      {"/v1/embeddings", R"({"model":"tiny","input":{"a":1}})", 400, "input"},
  };
  for (const Bad& b : bad) {
    SCOPED_TRACE(b.body);
    auto [bc, bj] = Post(b.path, b.body);
    EXPECT_EQ(bc, b.status) << bj.dump();
    ASSERT_TRUE(bj.contains("error")) << bj.dump();
    EXPECT_TRUE(bj["error"]["message"].is_string());
    if (!b.param.empty()) {
      EXPECT_EQ(bj["error"]["param"], b.param) << bj.dump();
    }
  }
  StatusOr<http::ClientResponse> health = client_->Send("GET", "/health");
  ASSERT_TRUE(health.ok());
  EXPECT_EQ(health->status, 200);
}

// /health names the engine's instance when it was given one (a Deployment's replica job name),
// so a controller can tell its replica's engine from another process on the same port.
TEST(EngineApiTest, HealthNamesTheInstance) {
  for (const std::string instance : {"chat-5f2c-21000-0001", ""}) {
    std::unique_ptr<Engine> engine = Start({.instance = instance});
    ASSERT_NE(engine, nullptr);
    StatusOr<std::unique_ptr<EngineServer>> server = EngineServer::Start(engine.get(), {.port = 0, .worker_threads = 2});
    ASSERT_TRUE(server.ok()) << server.status();
    http::Client c("http://127.0.0.1:" + std::to_string((*server)->port()));
    StatusOr<http::ClientResponse> health = c.Send("GET", "/health");
    ASSERT_TRUE(health.ok()) << health.status();
    EXPECT_EQ(health->status, 200);
    const json body = json::parse(health->body, nullptr, false);
    if (instance.empty()) {
      EXPECT_EQ(body, json::object());
    } else {
      EXPECT_EQ(body, json({{"instance", instance}}));
    }
    (*server)->Stop();
  }
}

// A unary request whose client goes away is aborted in the engine (its KV and batch slot freed)
// instead of generating for nobody: the server notices the closed connection, the handler cancels
// the sequence, and it ends as "abort" well before its max_tokens.
TEST(EngineApiTest, UnaryRequestOfAClientThatLeftIsAborted) {
  std::unique_ptr<Engine> engine = Start();
  ASSERT_NE(engine, nullptr);
  http::ServerOptions o{.port = 0, .worker_threads = 4};
  o.client_check_interval = std::chrono::milliseconds(20);
  StatusOr<std::unique_ptr<EngineServer>> server = EngineServer::Start(engine.get(), o);
  ASSERT_TRUE(server.ok()) << server.status();
  http::Client client("http://127.0.0.1:" + std::to_string((*server)->port()));
  const std::string body =
      R"({"model":"tiny","prompt":"Once upon","max_tokens":480,"temperature":0,"ignore_eos":true})";
  // How long the whole request takes when its client waits.
  auto t0 = std::chrono::steady_clock::now();
  StatusOr<http::ClientResponse> whole = client.Send("POST", "/v1/completions", body);
  ASSERT_TRUE(whole.ok()) << whole.status();
  ASSERT_EQ(whole->status, 200) << whole->body;
  const auto full = std::chrono::steady_clock::now() - t0;
  if (full < std::chrono::milliseconds(60)) GTEST_SKIP() << "480 tokens take too little time here to leave mid-request";
  ASSERT_EQ(json::parse(whole->body)["usage"]["completion_tokens"], 480);
  auto metric = [&](std::string_view prefix) {  // the first sample whose line starts with prefix
    StatusOr<http::ClientResponse> m = client.Send("GET", "/metrics");
    if (!m.ok()) return -1.0;
    const size_t at = m->body.find(prefix);
    if (at == std::string::npos) return 0.0;
    const size_t space = m->body.find(' ', m->body.find('}', at));
    return std::stod(m->body.substr(space + 1));
  };
  const double tokens_before = metric("vllm:generation_tokens_total{");
  ASSERT_EQ(metric("vllm:request_success_total{model_name=\"tiny\",finished_reason=\"abort\""), 0);

  // The same request from a client that leaves as soon as it has sent it.
  int fd = http::testing::ConnectLoopback((*server)->port());
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(http::testing::WriteAll(fd, http::testing::PostText("/v1/completions", body)));
  ::close(fd);
  double aborted = 0;
  for (int i = 0; i < 500 && aborted == 0; ++i) {  // up to ~5 s
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    aborted = metric("vllm:request_success_total{model_name=\"tiny\",finished_reason=\"abort\"");
  }
  EXPECT_EQ(aborted, 1);
  const double generated = metric("vllm:generation_tokens_total{") - tokens_before;
  EXPECT_LT(generated, 480) << "the whole request took " << std::chrono::duration<double, std::milli>(full).count() << " ms";
  (*server)->Stop();
}

// guided_regex, guided_choice and response_format over HTTP: outputs match, bad constraints are
// 400s naming the field and the construct.
TEST_F(ApiTest, StructuredOutputsOverHttp) {
  for (int seed = 0; seed < 8; ++seed) {
    auto [c, j] = Post("/v1/completions", R"({"model":"tiny","prompt":"x","max_tokens":20,"temperature":1,"seed":)" +
                                               std::to_string(seed) + R"(,"guided_regex":"[0-9]{4}-[A-Z]{2,3}"})");
    ASSERT_EQ(c, 200) << j.dump();
    const std::string text = j["choices"][0]["text"];
    EXPECT_TRUE(std::regex_match(text, std::regex("[0-9]{4}-[A-Z]{2,3}"))) << text;
    EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  }
  auto [cc, choice] = Post("/v1/completions", R"({"model":"tiny","prompt":"x","max_tokens":8,"n":4,"temperature":1,"guided_choice":["yes","no","maybe"]})");
  ASSERT_EQ(cc, 200) << choice.dump();
  ASSERT_EQ(choice["choices"].size(), 4u);
  for (const json& ch : choice["choices"]) {
    const std::string t = ch["text"];
    EXPECT_TRUE(t == "yes" || t == "no" || t == "maybe") << t;
  }
  auto [cj, obj] = Post("/v1/completions", R"({"model":"tiny","prompt":"x","max_tokens":60,"temperature":1,"seed":3,"response_format":{"type":"json_object"}})");
  ASSERT_EQ(cj, 200) << obj.dump();
  EXPECT_TRUE(json::parse(obj["choices"][0]["text"].get<std::string>(), nullptr, false).is_object()) << obj.dump();

  struct Bad {
    std::string body, param, says;
  };
  const Bad bad[] = {
      {R"("guided_regex":"(?=a)b")", "guided_regex", "not supported"},
      {R"("guided_json":{"type":"object","oneOf":[]})", "guided_json#", "oneOf"},
      {R"("response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"string","format":"email"}}})",
       "response_format.json_schema.schema#", "format"},
      {R"("response_format":{"type":"yaml"})", "response_format.type", "yaml"},
      {R"("guided_regex":"a","guided_choice":["b"])", "guided_choice", "only one of"},
      {R"("guided_regex":"[a-z]{30}","max_tokens":5)", "max_tokens", "at least"},
      {R"("guided_regex":"a","ignore_eos":true)", "ignore_eos", "constrained"},
      {R"("guided_json":{"type":"object","default":)" + std::string(100000, '[') + std::string(100000, ']') + "}",
       "body", "nested deeper than 64"},
      {R"("tools":[{"type":"function","function":{"name":"f"}}])", "tools", "chat/completions"},
  };
  // The eight regex requests compiled one grammar and found it seven times; each is counted.
  StatusOr<http::ClientResponse> m = client_->Send("GET", "/metrics");
  ASSERT_TRUE(m.ok());
  EXPECT_NE(m->body.find("aicloud:structured_requests_total{model_name=\"tiny\",kind=\"regex\"} 8"), std::string::npos) << m->body;
  EXPECT_NE(m->body.find("aicloud:structured_requests_total{model_name=\"tiny\",kind=\"choice\"} 1"), std::string::npos);
  EXPECT_NE(m->body.find("aicloud:grammar_cache_lookups_total{result=\"hit\"} 7"), std::string::npos);
  EXPECT_NE(m->body.find("aicloud:grammar_compile_seconds_count 3"), std::string::npos);
  for (const Bad& b : bad) {
    SCOPED_TRACE(b.body);
    auto [code, err] = Post("/v1/completions", R"({"model":"tiny","prompt":"x",)" + b.body + "}");
    EXPECT_EQ(code, 400) << err.dump();
    const std::string param = err["error"]["param"].is_string() ? err["error"]["param"].get<std::string>() : "";
    EXPECT_TRUE(param.starts_with(b.param)) << err.dump();
    EXPECT_NE(err["error"]["message"].get<std::string>().find(b.says), std::string::npos) << err.dump();
  }
}

TEST_F(ApiTest, StreamingMatchesNonStreaming) {
  // 64 tokens: the engine merges the steps a slow reader has not taken yet into one event, so a
  // short answer can arrive whole when the stream's thread starts late (a loaded CI machine).
  auto [code, whole] = Post("/v1/completions", R"({"model":"tiny","prompt":"Once upon","max_tokens":64,"temperature":0})");
  ASSERT_EQ(code, 200);
  std::string text;
  int chunks = 0;
  bool done = false;
  json usage;
  http::SseParser sse;
  Status st = client_->Stream(
      "POST", "/v1/completions",
      R"({"model":"tiny","prompt":"Once upon","max_tokens":64,"temperature":0,"stream":true,"stream_options":{"include_usage":true}})",
      {}, [&](std::string_view bytes) {
        for (const http::SseEvent& ev : sse.Feed(bytes)) {
          if (ev.data == "[DONE]") {
            done = true;
            continue;
          }
          json j = json::parse(ev.data);
          if (j.contains("usage")) usage = j["usage"];
          if (!j["choices"].empty()) {
            text += j["choices"][0]["text"].get<std::string>();
            ++chunks;
          }
        }
        return true;
      });
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_TRUE(done);
  EXPECT_GT(chunks, 1);
  EXPECT_EQ(text, whole["choices"][0]["text"]);
  EXPECT_EQ(usage["completion_tokens"], whole["usage"]["completion_tokens"]);
  EXPECT_EQ(whole["usage"]["completion_tokens"], 64) << whole;  // random weights: no early end of text

  // Embeddings: hidden-size vectors of unit length; the same input twice gives the same vector.
  auto [ec, emb] = Post("/v1/embeddings", R"({"model":"tiny","input":["a cat","a cat","the sea"]})");
  ASSERT_EQ(ec, 200) << emb.dump();
  ASSERT_EQ(emb["data"].size(), 3u);
  const auto v0 = emb["data"][0]["embedding"].get<std::vector<float>>();
  const auto v1 = emb["data"][1]["embedding"].get<std::vector<float>>();
  const auto v2 = emb["data"][2]["embedding"].get<std::vector<float>>();
  ASSERT_EQ(v0.size(), 64u);
  double n = 0;
  for (float x : v0) n += x * x;
  EXPECT_NEAR(n, 1.0, 1e-4);
  EXPECT_EQ(v0, v1);
  EXPECT_NE(v0, v2);
  // base64 (the OpenAI SDKs' default): the same float32 values, little-endian, standard alphabet.
  auto [bc, b64] = Post("/v1/embeddings", R"({"model":"tiny","input":["a cat","the sea"],"encoding_format":"base64"})");
  ASSERT_EQ(bc, 200) << b64.dump();
  const std::string alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  for (int i = 0; i < 2; ++i) {
    const std::string encoded = b64["data"][i]["embedding"].get<std::string>();
    ASSERT_EQ(encoded.size(), (64 * 4 + 2) / 3 * 4);
    std::string bytes;
    uint32_t acc = 0;
    int bits = 0;
    for (char c : encoded) {
      if (c == '=') break;
      acc = (acc << 6) | static_cast<uint32_t>(alphabet.find(c));
      bits += 6;
      if (bits >= 8) {
        bits -= 8;
        bytes.push_back(static_cast<char>((acc >> bits) & 0xff));
      }
    }
    ASSERT_EQ(bytes.size(), 64u * 4);
    std::vector<float> decoded(64);
    std::memcpy(decoded.data(), bytes.data(), bytes.size());
    EXPECT_EQ(decoded, i == 0 ? v0 : v2);
  }

  StatusOr<http::ClientResponse> m = client_->Send("GET", "/metrics");
  ASSERT_TRUE(m.ok());
  for (const char* name : {"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                           "vllm:time_to_first_token_seconds_bucket", "vllm:inter_token_latency_seconds_count",
                           "vllm:e2e_request_latency_seconds_sum", "vllm:generation_tokens_total",
                           "vllm:prompt_tokens_total", "vllm:request_success_total"}) {
    EXPECT_NE(m->body.find(name), std::string::npos) << name;
  }
}

}  // namespace
}  // namespace aicloud::engine

namespace aicloud::engine {
namespace {

// An engine, its server and a client: what a test of the API with other options than ApiTest's
// needs.
struct Served {
  std::unique_ptr<Engine> engine;
  std::unique_ptr<EngineServer> server;
  std::unique_ptr<http::Client> client;
  ~Served() {
    client.reset();
    if (server) server->Stop();
  }
};

std::unique_ptr<Served> Serve(EngineOptions o, std::string api_key = "") {
  auto s = std::make_unique<Served>();
  s->engine = Start(std::move(o));
  if (s->engine == nullptr) return nullptr;
  StatusOr<std::unique_ptr<EngineServer>> server =
      EngineServer::Start(s->engine.get(), {.port = 0, .worker_threads = 4}, std::move(api_key));
  EXPECT_TRUE(server.ok()) << server.status();
  if (!server.ok()) return nullptr;
  s->server = std::move(*server);
  s->client = std::make_unique<http::Client>("http://127.0.0.1:" + std::to_string(s->server->port()));
  return s;
}

fs::path TestAdapter(const ModelConfig& config) {
  const fs::path dir = WriteModel().parent_path() / "api-adapter";
  InitLoraOptions o;
  o.seed = 9;
  o.b_std = 0.5;
  o.overwrite = true;
  EXPECT_TRUE(InitRandomLora(dir, config, o).ok());
  return dir;
}

// A replica's key is demanded of every request, whatever the path or method (unknown ones too:
// a 404 would tell a caller without the key which paths exist), and a wrong key or scheme is no
// better than none.
TEST(EngineApiTest, AReplicaKeyIsDemandedOnEveryEndpoint) {
  const std::string key = "3f1c0d9e8b7a6f5e4d3c2b1a0f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e";
  std::unique_ptr<Served> s = Serve({}, key);
  ASSERT_NE(s, nullptr);
  const std::pair<const char*, const char*> calls[] = {
      {"GET", "/health"},
      {"GET", "/metrics"},
      {"GET", "/v1/models"},
      {"POST", "/v1/completions"},
      {"POST", "/v1/chat/completions"},
      {"POST", "/v1/embeddings"},
      {"POST", "/tokenize"},
      {"POST", "/detokenize"},
      {"POST", "/v1/load_lora_adapter"},
      {"POST", "/v1/unload_lora_adapter"},
      {"GET", "/no/such/path"},
  };
  const std::string body = R"({"model":"tiny","prompt":"Hello","max_tokens":2,"input":"a","tokens":[1],)"
                           R"("messages":[{"role":"user","content":"Hi"}],"lora_name":"x"})";
  const http::Headers wrong[] = {{},
                                 {{"Authorization", "Bearer " + key.substr(1)}},
                                 {{"Authorization", "Bearer " + key + "0"}},
                                 {{"Authorization", "Basic " + key}},
                                 {{"Authorization", key}}};
  for (const auto& [method, path] : calls) {
    SCOPED_TRACE(std::string(method) + " " + path);
    for (const http::Headers& h : wrong) {
      StatusOr<http::ClientResponse> r = s->client->Send(method, path, method == std::string("POST") ? body : "", h);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->status, 401) << r->body;
      EXPECT_NE(r->body.find("Authorization: Bearer"), std::string::npos) << r->body;
    }
    StatusOr<http::ClientResponse> r = s->client->Send(method, path, method == std::string("POST") ? body : "",
                                                       {{"Authorization", "Bearer " + key}});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_NE(r->status, 401) << r->body;
  }
  StatusOr<http::ClientResponse> ok = s->client->Send("POST", "/v1/completions", body, {{"Authorization", "Bearer " + key}});
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->status, 200) << ok->body;

  // Without the key, the one thing it answers: the proof that it holds it, for a caller about to
  // send it (control/replica_secret.h), and nothing else.
  StatusOr<http::ClientResponse> proof = s->client->Send("GET", "/health?nonce=n0nce");
  ASSERT_TRUE(proof.ok());
  EXPECT_EQ(proof->status, 200) << proof->body;
  EXPECT_EQ(json::parse(proof->body), json({{"proof", auth::HmacSha256Hex(key, "aicloud replica proof\nn0nce")}}));
  EXPECT_EQ(s->client->Send("GET", "/health?nonce=" + std::string(129, 'x'))->status, 400);
  EXPECT_EQ(s->client->Send("GET", "/metrics?nonce=n0nce")->status, 401);
}

// With the files the agent writes named in its environment, the engine serves HTTPS only.
TEST(EngineApiTest, ServesHttpsWhenTheEnvironmentNamesACertificate) {
  ASSERT_EQ(std::system("command -v openssl >/dev/null 2>&1"), 0) << "the openssl CLI (scripts/setup installs it) makes the test's certificate";
  const fs::path dir = fs::temp_directory_path() / ("engine-tls-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string cert = (dir / "tls-cert.pem").string(), key = (dir / "tls-key.pem").string();
  const std::string cmd = "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout " + key +
                          " -out " + cert + " -days 1 -subj /CN=replica -addext subjectAltName=IP:127.0.0.1 >/dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  ::unsetenv("AICLOUD_TLS_CERT_FILE");
  ::unsetenv("AICLOUD_TLS_KEY_FILE");
  http::ServerOptions plain{.port = 0, .worker_threads = 2};
  StatusOr<bool> off = TlsFromEnvironment(&plain);
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(*off);
  EXPECT_TRUE(plain.tls_cert_file.empty());
  ::setenv("AICLOUD_TLS_CERT_FILE", cert.c_str(), 1);
  http::ServerOptions half;
  EXPECT_EQ(TlsFromEnvironment(&half).status().code(), StatusCode::kInvalidArgument);
  ::setenv("AICLOUD_TLS_KEY_FILE", key.c_str(), 1);
  http::ServerOptions o{.port = 0, .worker_threads = 2};
  StatusOr<bool> on = TlsFromEnvironment(&o);
  ::unsetenv("AICLOUD_TLS_CERT_FILE");
  ::unsetenv("AICLOUD_TLS_KEY_FILE");
  ASSERT_TRUE(on.ok() && *on);
  std::unique_ptr<Engine> engine = Start();
  ASSERT_NE(engine, nullptr);
  StatusOr<std::unique_ptr<EngineServer>> server = EngineServer::Start(engine.get(), o, "secret-for-tls-test-0123456789");
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string where = "127.0.0.1:" + std::to_string((*server)->port());
  const http::Headers auth = {{"Authorization", "Bearer secret-for-tls-test-0123456789"}};
  http::Client https("https://" + where, {.ca_file = cert});
  StatusOr<http::ClientResponse> r =
      https.Send("POST", "/v1/completions", R"({"model":"tiny","prompt":"Hello","max_tokens":2})", auth);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 200) << r->body;
  StatusOr<http::ClientResponse> clear = http::Client("http://" + where, {.timeout = std::chrono::milliseconds(2000)})
                                             .Send("GET", "/health", "", auth);
  EXPECT_TRUE(!clear.ok() || clear->status != 200) << "plain HTTP must not be served";
  (*server)->Stop();
  fs::remove_all(dir);
}

// A Deployment's engine loads only the adapters it was started with, by name. A path of the
// caller's is refused before the filesystem is consulted: the answer for a directory that exists
// is the answer for one that does not.
TEST(EngineApiTest, LoraLoadsOnlyTheAdaptersTheEngineStartedWith) {
  std::unique_ptr<Engine> probe = Start();
  ASSERT_NE(probe, nullptr);
  const fs::path dir = TestAdapter(probe->config());
  probe.reset();
  EngineOptions o;
  o.loras = {{"sql", dir.string()}};
  std::unique_ptr<Served> s = Serve(o);
  ASSERT_NE(s, nullptr);
  auto post = [&](const std::string& body) {
    StatusOr<http::ClientResponse> r = s->client->Send("POST", "/v1/load_lora_adapter", body);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? std::pair{r->status, r->body} : std::pair{0, std::string()};
  };
  const auto existing = post(R"({"lora_name":"x","lora_path":"/etc"})");
  const auto missing = post(R"({"lora_name":"x","lora_path":"/nonexistent/adapter"})");
  EXPECT_EQ(existing.first, 400) << existing.second;
  EXPECT_EQ(existing, missing);
  const auto other_path = post(R"({"lora_name":"sql","lora_path":"/etc"})");
  EXPECT_EQ(other_path.first, 400) << other_path.second;
  EXPECT_EQ(other_path, post(R"({"lora_name":"sql","lora_path":"/nonexistent/adapter"})"));
  EXPECT_NE(other_path.second.find("lora_path"), std::string::npos) << other_path.second;
  EXPECT_EQ(post(R"({"lora_name":"unknown"})").first, 400);

  // Its own adapter, by name (or by its own path): unloaded, then loaded again.
  EXPECT_EQ(post(R"({"lora_name":"sql"})").first, 409) << "loaded at start";
  StatusOr<http::ClientResponse> r = s->client->Send("POST", "/v1/unload_lora_adapter", R"({"lora_name":"sql"})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(post(R"({"lora_name":"sql"})").first, 200);
  ASSERT_TRUE(s->client->Send("POST", "/v1/unload_lora_adapter", R"({"lora_name":"sql"})").ok());
  EXPECT_EQ(post(R"({"lora_name":"sql","lora_path":")" + dir.string() + R"("})").first, 200);
}

// With --allow-runtime-lora-paths (a standalone engine's operator's choice), vLLM's behaviour.
TEST_F(ApiTest, LoraAdapterEndpoints) {
  EngineOptions eo;
  eo.allow_runtime_lora_paths = true;
  std::unique_ptr<Served> served = Serve(eo);
  ASSERT_NE(served, nullptr);
  client_ = std::move(served->client);
  const fs::path dir = TestAdapter(engine_->config());
  const std::string load = R"({"lora_name":"sql","lora_path":")" + dir.string() + R"("})";
  StatusOr<http::ClientResponse> r = client_->Send("POST", "/v1/load_lora_adapter", load);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 200) << r->body;
  r = client_->Send("POST", "/v1/load_lora_adapter", load);
  EXPECT_EQ(r->status, 409) << r->body;  // already loaded
  r = client_->Send("POST", "/v1/load_lora_adapter", R"({"lora_name":"x","lora_path":"/nonexistent"})");
  EXPECT_EQ(r->status, 404) << r->body;
  json models = json::parse(client_->Send("GET", "/v1/models")->body);
  ASSERT_EQ(models["data"].size(), 2u);
  EXPECT_EQ(models["data"][1]["id"], "sql");
  EXPECT_EQ(models["data"][1]["parent"], "tiny");
  auto [code, j] = Post("/v1/completions", R"({"model":"sql","prompt":"Hello there","max_tokens":4,"temperature":0})");
  EXPECT_EQ(code, 200) << j.dump();
  EXPECT_EQ(j["model"], "sql");
  r = client_->Send("POST", "/v1/unload_lora_adapter", R"({"lora_name":"sql"})");
  EXPECT_EQ(r->status, 200) << r->body;
  auto [gone, gj] = Post("/v1/completions", R"({"model":"sql","prompt":"Hello","max_tokens":4})");
  EXPECT_EQ(gone, 404) << gj.dump();
}

}  // namespace
}  // namespace aicloud::engine
