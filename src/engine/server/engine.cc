#include "engine/server/engine.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

#include "core/thread_name.h"
#include "engine/kv/block_manager.h"
#include "engine/tokenizer/tokenizer_config.h"

namespace aicloud::engine {

namespace fs = std::filesystem;

// --- Stream -----------------------------------------------------------------------------------

void StreamSignal::Notify() {
  {
    std::lock_guard<std::mutex> l(mu_);
    ++count_;
  }
  cv_.notify_all();
}

void StreamSignal::Wait(uint64_t* seen, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait_for(l, timeout, [&] { return count_ != *seen; });
  *seen = count_;
}

void Stream::Push(Delta d) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (d.finish_reason || !d.error.ok()) finished_ = true;
    queue_.push_back(std::move(d));
  }
  cv_.notify_all();
  if (signal_) signal_->Notify();
}

bool Stream::done() const {
  std::lock_guard<std::mutex> l(mu_);
  return finished_ && queue_.empty();
}

void Stream::Cancel() { cancelled_.store(true); }

bool Stream::Next(Delta* d, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> l(mu_);
  if (!cv_.wait_for(l, timeout, [&] { return !queue_.empty(); })) return false;
  *d = std::move(queue_.front());
  queue_.pop_front();
  // Merge whatever else is already there (a slow consumer gets fewer, larger pieces).
  while (!queue_.empty() && !d->finish_reason && d->error.ok()) {
    Delta& n = queue_.front();
    d->text += n.text;
    d->tokens.insert(d->tokens.end(), n.tokens.begin(), n.tokens.end());
    d->samples.insert(d->samples.end(), n.samples.begin(), n.samples.end());
    d->finish_reason = n.finish_reason;
    d->error = n.error;
    d->prompt_tokens = n.prompt_tokens;
    d->completion_tokens = n.completion_tokens;
    d->cached_tokens = n.cached_tokens;
    queue_.pop_front();
  }
  return true;
}

// --- loading ----------------------------------------------------------------------------------

StatusOr<std::unique_ptr<Engine>> Engine::Load(EngineOptions options) {
  std::unique_ptr<Engine> e(new Engine());
  const fs::path dir = options.model_dir;
  if (options.served_model_name.empty()) {
    options.served_model_name = fs::path(options.model_dir).lexically_normal().filename().string();
    if (options.served_model_name.empty()) options.served_model_name = fs::path(options.model_dir).parent_path().filename().string();
  }
  StatusOr<std::unique_ptr<Checkpoint>> ck = Checkpoint::Open(dir);
  if (!ck.ok()) return ck.status();
  // The weights are copied out; the mapping is closed when `ck` goes out of scope.
  StatusOr<std::unique_ptr<LlamaModel>> model = LlamaModel::Load(**ck, {.weights = options.weights});
  if (!model.ok()) return model.status();
  e->model_ = std::move(*model);
  const ModelConfig& c = e->model_->config();

  const fs::path tok_json = dir / "tokenizer.json";
  const fs::path tok_cfg = dir / "tokenizer_config.json";
  StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromFile(tok_json.string());
  if (fs::exists(tok_cfg)) {
    StatusOr<TokenizerConfig> tc = TokenizerConfig::FromFile(tok_cfg.string());
    if (!tc.ok()) return tc.status();
    tok = Tokenizer::FromFile(tok_json.string(), *tc);
    StatusOr<ChatTemplate> chat = ChatTemplate::FromConfig(*tc);
    if (chat.ok()) e->chat_ = std::move(*chat);  // otherwise only /v1/completions works
  }
  if (!tok.ok()) return tok.status();
  e->tokenizer_ = std::move(*tok);
  if (e->tokenizer_->VocabSize() > c.vocab_size) {
    return InvalidArgumentError(tok_json.string() + ": the tokenizer has " + std::to_string(e->tokenizer_->VocabSize()) +
                                " tokens but the model's vocabulary is " + std::to_string(c.vocab_size));
  }

  const int64_t per_block = KvCache::BytesPerBlock(c, options.block_size, options.kv_dtype);
  const int64_t budget = static_cast<int64_t>(options.kv_cache_gib * 1024.0 * 1024.0 * 1024.0);
  e->num_blocks_ = std::min<int64_t>(budget / std::max<int64_t>(per_block, 1), INT32_MAX);
  if (e->num_blocks_ < 2) {
    return InvalidArgumentError("--kv-cache-gib " + std::to_string(options.kv_cache_gib) + " holds " +
                                std::to_string(e->num_blocks_) + " KV blocks of " + std::to_string(per_block) +
                                " bytes; give it more");
  }
  StatusOr<KvCache> cache = KvCache::Create(c, e->num_blocks_, options.block_size, options.kv_dtype);
  if (!cache.ok()) return cache.status();
  e->cache_ = std::make_unique<KvCache>(std::move(*cache));
  e->max_model_len_ = options.max_model_len > 0 ? options.max_model_len : c.max_position_embeddings;
  if (e->max_model_len_ <= 0) e->max_model_len_ = 2048;
  e->max_model_len_ = std::min<int64_t>(e->max_model_len_, e->num_blocks_ * options.block_size);

  SchedulerOptions so;
  so.max_num_batched_tokens = options.max_num_batched_tokens;
  so.max_num_seqs = options.max_num_seqs;
  so.static_batch_size = options.static_batch_size;
  so.prefill_order = options.prefill_order;
  so.max_overtake_micros = options.max_overtake_micros;
  so.max_model_len = static_cast<int32_t>(e->max_model_len_);
  for (int64_t id : c.eos_token_ids) so.eos_token_ids.push_back(static_cast<int32_t>(id));
  if (so.eos_token_ids.empty() && e->tokenizer_->eos_id()) so.eos_token_ids.push_back(*e->tokenizer_->eos_id());
  // Chat turns end with the template's end-of-turn token (Llama-3's <|eot_id|>, ChatML's
  // <|im_end|>), which config.json does not always list as an EOS.
  if (e->chat_) {
    if (std::optional<int32_t> eot = e->tokenizer_->FindToken(e->chat_->end_of_turn());
        eot && std::find(so.eos_token_ids.begin(), so.eos_token_ids.end(), *eot) == so.eos_token_ids.end()) {
      so.eos_token_ids.push_back(*eot);
    }
  }
  e->eos_ids_ = so.eos_token_ids;
  e->grammars_ = std::make_unique<GrammarCache>(
      structured::TokenVocabulary::Build(*e->tokenizer_, static_cast<int32_t>(c.vocab_size), so.eos_token_ids));
  so.vocab_size = static_cast<int32_t>(c.vocab_size);
  so.kv.num_blocks = static_cast<int32_t>(e->num_blocks_);
  so.kv.block_size = options.block_size;
  so.kv.enable_prefix_caching = options.enable_prefix_caching;
  so.max_loras = options.max_loras;
  StatusOr<std::unique_ptr<LoraRegistry>> loras = LoraRegistry::Create(
      c, {.base_model = options.served_model_name, .max_loras = options.max_loras, .max_lora_rank = options.max_lora_rank});
  if (!loras.ok()) return loras.status();
  e->loras_ = std::move(*loras);
  if (Status s = e->model_->SetLoras(e->loras_.get()); !s.ok()) return s;
  for (const auto& [name, path] : options.loras) {
    if (Status s = e->loras_->Load(name, path); !s.ok()) return s;
  }
  StatusOr<std::unique_ptr<Scheduler>> sched = Scheduler::Create(so);
  if (!sched.ok()) return sched.status();
  e->scheduler_ = std::move(*sched);
  e->pool_ = std::make_unique<kernels::ThreadPool>(std::max(1, options.threads));
  e->options_ = std::move(options);

  // vLLM's metric names, so dashboards and autoscalers built for it work unchanged.
  Metrics& m = e->metrics_;
  // Structured outputs (aicloud's own names): requests by what constrains them, grammar cache
  // lookups and compile times, and requests whose grammar failed while they ran.
  e->structured_requests_total_ = m.AddCounter("aicloud:structured_requests_total",
                                               "Requests whose output a grammar constrains, by kind.", {"model_name", "kind"});
  e->structured_failures_total_ = m.AddCounter("aicloud:structured_failures_total",
                                               "Constrained requests ended by a grammar failure while running.", {"model_name"});
  e->grammars_->SetMetrics(
      m.AddCounter("aicloud:grammar_cache_lookups_total", "Grammar lookups by result (hit, miss, error).", {"result"}),
      m.AddHistogram("aicloud:grammar_compile_seconds", "Time to compile a new constraint into a grammar.", {},
                     {0.001, 0.005, 0.02, 0.1, 0.5, 2, 10}));
  const std::string name = e->options_.served_model_name;
  Engine* self = e.get();
  m.AddGaugeFn("vllm:num_requests_running", "Requests in the running batch.", {"model_name"},
               [self, name] { return std::vector<std::pair<LabelValues, double>>{{{name}, double(self->running_gauge_.load())}}; });
  m.AddGaugeFn("vllm:num_requests_waiting", "Requests waiting to be scheduled.", {"model_name"},
               [self, name] { return std::vector<std::pair<LabelValues, double>>{{{name}, double(self->waiting_gauge_.load())}}; });
  m.AddGaugeFn("vllm:kv_cache_usage_perc", "Fraction of KV-cache blocks in use (1 = full).", {"model_name"},
               [self, name] { return std::vector<std::pair<LabelValues, double>>{{{name}, self->kv_usage_.load()}}; });
  // vLLM's LoRA info gauge: the labels carry the adapters in use; the value is when they were
  // read (Unix seconds).
  m.AddGaugeFn("vllm:lora_requests_info", "Running stats on LoRA requests.",
               {"running_lora_adapters", "waiting_lora_adapters", "max_lora"}, [self] {
                 std::lock_guard<std::mutex> l(self->lora_info_mu_);
                 const double now = std::chrono::duration<double>(
                     std::chrono::system_clock::now().time_since_epoch()).count();
                 return std::vector<std::pair<LabelValues, double>>{
                     {{self->running_loras_, self->waiting_loras_, std::to_string(self->options_.max_loras)}, now}};
               });
  e->prompt_tokens_total_ = m.AddCounter("vllm:prompt_tokens_total", "Prompt tokens processed.", {"model_name"});
  e->generation_tokens_total_ = m.AddCounter("vllm:generation_tokens_total", "Tokens generated.", {"model_name"});
  e->request_success_total_ =
      m.AddCounter("vllm:request_success_total", "Finished requests by finish reason.", {"model_name", "finished_reason"});
  e->preemptions_total_ = m.AddCounter("vllm:num_preemptions_total", "Preemptions (KV recomputed).", {"model_name"});
  const std::vector<double> buckets = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
                                       1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0};
  e->ttft_ = m.AddHistogram("vllm:time_to_first_token_seconds", "Time to first token.", {"model_name"}, buckets);
  e->itl_ = m.AddHistogram("vllm:inter_token_latency_seconds", "Time between consecutive tokens.", {"model_name"}, buckets);
  e->e2e_ = m.AddHistogram("vllm:e2e_request_latency_seconds", "Request latency, arrival to finish.", {"model_name"}, buckets);
  e->queue_time_ = m.AddHistogram("vllm:request_queue_time_seconds", "Time from arrival to first scheduling.", {"model_name"}, buckets);
  e->thread_ = std::thread([self] {
    SetThreadName("engine-step");
    self->Loop();
  });
  return e;
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

// --- requests ---------------------------------------------------------------------------------

StatusOr<std::pair<Request, Engine::Live>> Engine::Prepare(GenerateRequest& g, std::shared_ptr<StreamSignal> signal) {
  Request r;
  r.prompt = g.prompt;
  r.sampling = g.sampling;
  Live live;
  if (g.model != options_.served_model_name) {
    if (!loras_->Contains(g.model)) return NotFoundError("The model `" + g.model + "` does not exist.");
    StatusOr<LoraPin> pin = loras_->Acquire(g.model);  // may read the adapter back from disk
    if (!pin.ok()) return pin.status();
    r.adapter_id = pin->adapter_id();
    live.pin = std::move(*pin);
    live.adapter = g.model;
  }
  live.stream = std::make_shared<Stream>(std::move(signal));
  live.text = std::make_unique<TextStream>(tokenizer_.get(), g.stop, g.skip_special_tokens);
  live.want_logprobs = g.sampling.logprobs.has_value();
  live.prompt_tokens = static_cast<int32_t>(r.prompt.size());
  return std::make_pair(std::move(r), std::move(live));
}

StatusOr<std::shared_ptr<Stream>> Engine::Submit(GenerateRequest g) {
  StatusOr<std::vector<std::shared_ptr<Stream>>> s = SubmitChoices(std::move(g), 1);
  if (!s.ok()) return s.status();
  return std::move((*s)[0]);
}

StatusOr<std::vector<std::shared_ptr<Stream>>> Engine::SubmitChoices(GenerateRequest g, int32_t n,
                                                                     std::shared_ptr<StreamSignal> signal) {
  if (failed_.load()) return UnavailableError("the engine stopped after an internal error");
  if (n < 1) return InvalidArgumentError("n: must be at least 1");
  std::vector<std::pair<Request, Live>> choices;
  // All choices arrived now, also those that enter the scheduler after choice 0's prefill.
  const int64_t arrival = scheduler_->Now();
  for (int32_t i = 0; i < n; ++i) {
    StatusOr<std::pair<Request, Live>> c = Prepare(g, signal);
    if (!c.ok()) return c.status();
    c->first.arrival_micros = arrival;
    if (i > 0 && g.sampling.seed) {
      // SplitMix64 of (seed, choice): independent draws per choice, reproducible per seed.
      uint64_t x = *g.sampling.seed + 0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(i);
      x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
      x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
      c->first.sampling.seed = x ^ (x >> 31);
    }
    choices.push_back(std::move(*c));
  }
  std::vector<std::shared_ptr<Stream>> streams;
  for (auto& c : choices) streams.push_back(c.second.stream);
  {
    std::lock_guard<std::mutex> l(mu_);
    if (waiting_ + n > options_.max_waiting) {
      return ResourceExhaustedError("the engine's queue is full (" + std::to_string(waiting_) +
                                    " requests waiting); retry later");
    }
    RequestId leader = 0;
    std::vector<Request> held;
    for (int32_t i = 0; i < n; ++i) {
      Request& r = choices[static_cast<size_t>(i)].first;
      r.id = next_id_++;
      const RequestId id = r.id;
      if (i == 0) {
        leader = id;
        Status added = scheduler_->Add(std::move(r));
        if (!added.ok()) return added;
      } else {
        held.push_back(std::move(r));
      }
      live_.emplace(id, std::move(choices[static_cast<size_t>(i)].second));
      ++waiting_;
    }
    if (!held.empty()) held_.emplace(leader, std::move(held));
  }
  if (!g.constraint.empty()) structured_requests_total_->Inc({options_.served_model_name, g.constraint});
  return streams;
}

// Called on the loop thread when a leader's prompt is computed (its first token) or it ends.
void Engine::ReleaseHeld(RequestId leader) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = held_.find(leader);
  if (it == held_.end()) return;
  for (Request& r : it->second) {
    const RequestId id = r.id;
    auto live = live_.find(id);
    if (live != live_.end() && live->second.stream->cancelled()) {
      Delta d;
      d.finish_reason = "abort";
      live->second.stream->Push(std::move(d));
      live_.erase(live);
      --waiting_;
      continue;
    }
    // Same request as its leader, which the scheduler already accepted.
    Status added = scheduler_->Add(std::move(r));
    if (!added.ok() && live != live_.end()) {
      Delta d;
      d.error = added;
      d.finish_reason = "abort";
      live->second.stream->Push(std::move(d));
      live_.erase(live);
      --waiting_;
    }
  }
  held_.erase(it);
}

StatusOr<std::vector<std::vector<float>>> Engine::Embed(const std::vector<std::vector<int32_t>>& inputs) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].empty()) return InvalidArgumentError("input[" + std::to_string(i) + "]: empty");
    if (static_cast<int64_t>(inputs[i].size()) > max_model_len_) {
      return InvalidArgumentError("input[" + std::to_string(i) + "]: " + std::to_string(inputs[i].size()) +
                                  " tokens, more than this model's maximum context length " +
                                  std::to_string(max_model_len_));
    }
    for (int32_t t : inputs[i]) {
      if (t < 0 || t >= config().vocab_size) return InvalidArgumentError("input[" + std::to_string(i) + "]: token id " + std::to_string(t) + " is outside the vocabulary");
    }
  }
  std::vector<std::vector<float>> out(inputs.size());
  Status result;
  bool done = false;
  std::mutex done_mu;
  std::condition_variable done_cv;
  auto task = [&] {
    const int64_t H = config().hidden_size;
    const int64_t bs = options_.block_size;
    for (size_t i = 0; i < inputs.size() && result.ok(); ++i) {
      const int64_t n = static_cast<int64_t>(inputs[i].size());
      StatusOr<KvCache> scratch = KvCache::Create(config(), (n + bs - 1) / bs, bs, DType::kF32);
      if (!scratch.ok()) {
        result = scratch.status();
        break;
      }
      std::vector<int32_t> table(static_cast<size_t>((n + bs - 1) / bs));
      for (size_t b = 0; b < table.size(); ++b) table[b] = static_cast<int32_t>(b);
      std::vector<int32_t> pos(static_cast<size_t>(n)), rows(static_cast<size_t>(n));
      std::vector<int64_t> slots(static_cast<size_t>(n));
      std::vector<kernels::AttentionToken> att(static_cast<size_t>(n));
      for (int64_t p = 0; p < n; ++p) {
        pos[p] = static_cast<int32_t>(p);
        rows[p] = static_cast<int32_t>(p);
        slots[p] = p;
        att[p] = {table, static_cast<int32_t>(p + 1)};
      }
      std::vector<float> hidden(static_cast<size_t>(n * H));
      Status s = model_->ForwardHidden(*pool_, {inputs[i], pos, slots, att, rows}, *scratch, hidden.data());
      if (!s.ok()) {
        result = s;
        break;
      }
      std::vector<float> mean(static_cast<size_t>(H), 0.0f);
      for (int64_t p = 0; p < n; ++p) {
        for (int64_t d = 0; d < H; ++d) mean[d] += hidden[p * H + d];
      }
      double norm = 0;
      for (float& v : mean) {
        v /= static_cast<float>(n);
        norm += static_cast<double>(v) * v;
      }
      norm = std::sqrt(norm);
      if (norm > 0) {
        for (float& v : mean) v = static_cast<float>(v / norm);
      }
      out[i] = std::move(mean);
    }
    std::lock_guard<std::mutex> l(done_mu);
    done = true;
    done_cv.notify_all();
  };
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stop_) return UnavailableError("the engine is stopping");
    tasks_.push_back(task);
  }
  cv_.notify_all();
  std::unique_lock<std::mutex> l(done_mu);
  done_cv.wait(l, [&] { return done; });
  if (!result.ok()) return result;
  return out;
}

// --- the loop ---------------------------------------------------------------------------------

void Engine::Loop() {
  for (;;) {
    std::vector<std::function<void()>> tasks;
    std::vector<RequestId> cancelled;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (stop_) break;
      tasks.swap(tasks_);
      for (auto& [id, live] : live_) {
        if (live.stream->cancelled()) cancelled.push_back(id);
      }
    }
    for (auto& t : tasks) t();
    for (RequestId id : cancelled) scheduler_->Abort(id, FinishReason::kAborted);
    if (scheduler_->NumUnfinished() == 0) {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait_for(l, std::chrono::milliseconds(20), [&] { return stop_ || !tasks_.empty(); });
      if (scheduler_->NumUnfinished() == 0) continue;
    }
    Step();
  }
  // Whatever is left ends as aborted.
  std::lock_guard<std::mutex> l(mu_);
  for (auto& [id, live] : live_) {
    Delta d;
    d.finish_reason = "abort";
    live.stream->Push(std::move(d));
  }
  live_.clear();
  held_.clear();
}

// Running adapters as the scheduler counts them (by adapter id); waiting ones are those of
// requests that have not produced a token yet. Names sorted and comma-joined, as vLLM does.
void Engine::UpdateLoraInfo(const SchedulerStats& st) {
  std::set<std::string> running, waiting;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [id, live] : live_) {
      if (live.adapter.empty()) continue;
      const bool in_running = std::find(st.running_adapters.begin(), st.running_adapters.end(),
                                        live.pin.adapter_id()) != st.running_adapters.end();
      if (in_running) running.insert(live.adapter);
      if (!live.started) waiting.insert(live.adapter);
    }
  }
  auto join = [](const std::set<std::string>& names) {
    std::string out;
    for (const std::string& n : names) out += (out.empty() ? "" : ",") + n;
    return out;
  };
  std::lock_guard<std::mutex> l(lora_info_mu_);
  running_loras_ = join(running);
  waiting_loras_ = join(waiting);
}

void Engine::Step() {
  StatusOr<StepPlan> plan = scheduler_->Schedule();
  if (!plan.ok()) {
    failed_.store(true);
    return;
  }
  for (const RequestOutput& out : plan->outputs) Deliver(out);
  const SchedulerStats st = scheduler_->Stats();
  running_gauge_.store(st.num_running);
  waiting_gauge_.store(st.num_waiting);
  kv_usage_.store(st.kv.usage);
  UpdateLoraInfo(st);
  if (plan->empty()) return;

  const std::string& name = options_.served_model_name;
  if (!plan->preempted.empty()) preemptions_total_->Inc({name}, static_cast<double>(plan->preempted.size()));
  attention_.clear();
  logit_rows_.clear();
  adapters_.clear();
  bool any_adapter = false;
  for (const ScheduledSeq& s : plan->seqs) {
    for (int32_t t = 0; t < s.num_tokens; ++t) attention_.push_back({s.block_table, s.start_position + t + 1});
    adapters_.insert(adapters_.end(), static_cast<size_t>(s.num_tokens), s.adapter_id);
    any_adapter |= s.adapter_id != kBaseAdapterId;
    if (s.needs_logits) logit_rows_.push_back(s.token_offset + s.num_tokens - 1);
  }
  const int64_t V = model_->vocab_size();
  if (logits_.size() < logit_rows_.size() * static_cast<size_t>(V)) logits_.resize(logit_rows_.size() * static_cast<size_t>(V));
  ForwardBatch batch{plan->token_ids, plan->positions, plan->slot_mapping, attention_, logit_rows_};
  if (any_adapter) batch.adapters = adapters_;
  Status fw = model_->Forward(*pool_, batch, *cache_, logits_.data());
  std::vector<SampledToken> sampled;
  if (fw.ok()) {
    size_t row = 0;
    for (const ScheduledSeq& s : plan->seqs) {
      if (!s.needs_logits) continue;
      StatusOr<SampleResult> r = sampler_.Sample(*s.sampling, std::span<const float>(logits_.data() + row * V, static_cast<size_t>(V)));
      ++row;
      if (!r.ok() && s.sampling->params().grammar && !eos_ids_.empty()) {
        // The request's own grammar failed (its automaton outgrew its limits, say): end this
        // request with an error, keep serving the others.
        constraint_failures_[s.id] = InternalError("constrained decoding failed: " + std::string(r.status().message()));
        structured_failures_total_->Inc({options_.served_model_name});
        SampleResult end;
        end.token = eos_ids_[0];
        sampled.push_back({s.id, end});
        continue;
      }
      if (!r.ok()) {
        fw = r.status();
        break;
      }
      sampled.push_back({s.id, *r});
    }
  }
  if (!fw.ok()) {
    // A step the model or the sampler refused is a bug, not bad input (requests were checked at
    // admission): fail what runs now rather than loop on it.
    failed_.store(true);
    std::lock_guard<std::mutex> l(mu_);
    for (auto& [id, live] : live_) {
      Delta d;
      d.error = InternalError("engine step failed: " + std::string(fw.message()));
      d.finish_reason = "abort";
      live.stream->Push(std::move(d));
    }
    live_.clear();
    held_.clear();
    return;
  }
  prompt_tokens_total_->Inc({name}, plan->num_prefill_tokens);
  StatusOr<std::vector<RequestOutput>> events = scheduler_->Update(*plan, std::move(sampled));
  if (!events.ok()) {
    failed_.store(true);
    return;
  }
  generation_tokens_total_->Inc({name}, static_cast<double>(events->size()));
  for (const RequestOutput& out : *events) Deliver(out);
  // Publish the state after this step too: when it was the last one, the loop goes idle and the
  // gauges must not keep showing the requests that just finished (autoscalers read them).
  const SchedulerStats after = scheduler_->Stats();
  running_gauge_.store(after.num_running);
  waiting_gauge_.store(after.num_waiting);
  kv_usage_.store(after.kv.usage);
  UpdateLoraInfo(after);
}

void Engine::Deliver(const RequestOutput& out) {
  const std::string& name = options_.served_model_name;
  std::shared_ptr<Stream> stream;
  Live* live = nullptr;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = live_.find(out.id);
    if (it == live_.end()) return;
    live = &it->second;  // erased only below, on this thread
    stream = live->stream;
  }
  Delta d;
  const RequestStats& s = out.stats;
  if (out.sample || out.finish) ReleaseHeld(out.id);
  if (out.sample) {
    const int32_t token = out.sample->token;
    d.tokens.push_back(token);
    if (live->want_logprobs) d.samples.push_back(*out.sample);
    TextStream::Piece p = live->text->Push(token);
    d.text = std::move(p.text);
    if (p.stopped && !out.finish) scheduler_->Abort(out.id, FinishReason::kStopString);
    if (s.num_output_tokens == 1) {
      std::lock_guard<std::mutex> l(mu_);
      --waiting_;
      live->started = true;
      if (s.first_token_micros >= 0 && s.arrival_micros >= 0) ttft_->Observe({name}, (s.first_token_micros - s.arrival_micros) / 1e6);
      if (s.first_scheduled_micros >= 0 && s.arrival_micros >= 0) {
        queue_time_->Observe({name}, (s.first_scheduled_micros - s.arrival_micros) / 1e6);
      }
    } else if (auto it = last_token_micros_.find(out.id); it != last_token_micros_.end()) {
      itl_->Observe({name}, (out.time_micros - it->second) / 1e6);
    }
    last_token_micros_[out.id] = out.time_micros;
  }
  if (auto f = constraint_failures_.find(out.id); f != constraint_failures_.end()) {
    d.error = f->second;
    d.text.clear();
    constraint_failures_.erase(f);
    if (!out.finish) scheduler_->Abort(out.id, FinishReason::kAborted);
  }
  if (out.finish) {
    d.text += live->text->Finish();
    d.finish_reason = std::string(OpenAiFinishReason(*out.finish));
    d.prompt_tokens = s.num_prompt_tokens;
    d.completion_tokens = s.num_output_tokens;
    d.cached_tokens = s.num_cached_tokens;
    request_success_total_->Inc({name, *d.finish_reason});
    if (s.finished_micros >= 0 && s.arrival_micros >= 0) e2e_->Observe({name}, (s.finished_micros - s.arrival_micros) / 1e6);
    last_token_micros_.erase(out.id);
    std::lock_guard<std::mutex> l(mu_);
    if (s.num_output_tokens == 0) --waiting_;
    live_.erase(out.id);
  }
  stream->Push(std::move(d));
}

}  // namespace aicloud::engine
