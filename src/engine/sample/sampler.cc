#include "engine/sample/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "core/rng.h"

namespace aicloud::engine {
namespace {

uint64_t Mix64(uint64_t x) {  // SplitMix64's finaliser
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The generator seed for generated token `index` of a sequence: a function of both alone.
uint64_t DrawSeed(uint64_t seed, int64_t index) {
  return Mix64(seed ^ Mix64(static_cast<uint64_t>(index) + 0x9e3779b97f4a7c15ULL));
}

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Reorders ids (with their weights w alongside) so that a most-likely-first prefix comes first,
// and returns the length of the shortest such prefix whose weight reaches `target` (all of
// them if none does). A quickselect that sums weights instead of counting: expected O(n), no
// sort, whatever the shape of the distribution. `better` is a strict total order.
template <typename Better>
size_t TopPCut(std::vector<int32_t>& ids, std::vector<float>& w, double target, Better better) {
  size_t lo = 0, hi = ids.size();  // [0, lo) is kept; the cut lies in [lo, hi]
  double need = target;
  auto swap_at = [&](size_t a, size_t b) {
    std::swap(ids[a], ids[b]);
    std::swap(w[a], w[b]);
  };
  while (hi - lo > 16) {
    // Median of three as pivot, moved to hi - 1.
    const size_t mid = lo + (hi - lo) / 2;
    if (better(ids[mid], ids[lo])) swap_at(mid, lo);
    if (better(ids[hi - 1], ids[lo])) swap_at(hi - 1, lo);
    if (better(ids[mid], ids[hi - 1])) swap_at(mid, hi - 1);
    const int32_t pivot = ids[hi - 1];
    size_t store = lo;
    double above = 0;  // weight strictly better than the pivot
    for (size_t j = lo; j + 1 < hi; ++j) {
      if (better(ids[j], pivot)) {
        above += w[j];
        swap_at(j, store++);
      }
    }
    swap_at(store, hi - 1);  // the pivot lands at `store`
    if (above >= need) {
      hi = store;
    } else if (above + w[store] >= need) {
      return store + 1;
    } else {
      need -= above + w[store];
      lo = store + 1;
    }
  }
  // Few left: sort them and walk.
  std::vector<std::pair<int32_t, float>> rest;
  for (size_t j = lo; j < hi; ++j) rest.emplace_back(ids[j], w[j]);
  std::sort(rest.begin(), rest.end(), [&](const auto& a, const auto& b) { return better(a.first, b.first); });
  double cum = 0;
  for (size_t j = 0; j < rest.size(); ++j) {
    ids[lo + j] = rest[j].first;
    w[lo + j] = rest[j].second;
    cum += rest[j].second;
    if (cum >= need) return lo + j + 1;
  }
  return hi;  // only float rounding gets here: keep the whole bracket
}

}  // namespace

// ---- SequenceSampling ----------------------------------------------------------------------

SequenceSampling::SequenceSampling(SamplingParams params, uint64_t seed,
                                   std::span<const int32_t> prompt,
                                   std::span<const int32_t> eos_token_ids)
    : params_(std::move(params)), seed_(seed) {
  if (params_.min_tokens > 0) {
    masked_ = params_.stop_token_ids;
    if (!params_.ignore_eos) masked_.insert(masked_.end(), eos_token_ids.begin(), eos_token_ids.end());
  }
  if (params_.repetition_penalty != 1.0f) {
    prompt_set_.assign(prompt.begin(), prompt.end());
    std::sort(prompt_set_.begin(), prompt_set_.end());
    prompt_set_.erase(std::unique(prompt_set_.begin(), prompt_set_.end()), prompt_set_.end());
  }
}

void SequenceSampling::Append(int32_t token) {
  ++num_generated_;
  if (params_.HasPenalties()) ++output_counts_[token];
}

int32_t SequenceSampling::OutputCount(int32_t token) const {
  auto it = output_counts_.find(token);
  return it == output_counts_.end() ? 0 : it->second;
}

// ---- Sampler -------------------------------------------------------------------------------

void Sampler::ApplyPenalties(const SequenceSampling& seq, std::span<float> logits) {
  const SamplingParams& p = seq.params();
  const int64_t vocab = static_cast<int64_t>(logits.size());
  auto in_vocab = [vocab](int32_t t) { return t >= 0 && t < vocab; };
  if (p.repetition_penalty != 1.0f) {
    const float r = p.repetition_penalty;
    auto penalise = [&](int32_t t) {
      float& x = logits[static_cast<size_t>(t)];
      x = x > 0 ? x / r : x * r;
    };
    std::span<const int32_t> prompt = seq.prompt_set();
    for (int32_t t : prompt) {
      if (in_vocab(t)) penalise(t);
    }
    for (const auto& [t, count] : seq.output_counts()) {
      if (in_vocab(t) && !std::binary_search(prompt.begin(), prompt.end(), t)) penalise(t);
    }
  }
  if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) {
    for (const auto& [t, count] : seq.output_counts()) {
      if (in_vocab(t) && count > 0) {
        logits[static_cast<size_t>(t)] -=
            p.frequency_penalty * static_cast<float>(count) + p.presence_penalty;
      }
    }
  }
}

Status Sampler::Prepare(const SequenceSampling& seq, std::span<const float> logits) {
  const SamplingParams& p = seq.params();
  const size_t vocab = logits.size();
  if (vocab == 0) return InvalidArgumentError("sampling: empty logits");
  std::span<const float> x = logits;
  if (p.HasPenalties() || seq.MasksNow()) {
    work_.assign(logits.begin(), logits.end());
    for (int32_t t : seq.min_tokens_masked()) {
      if (seq.MasksNow() && t >= 0 && static_cast<size_t>(t) < vocab) work_[static_cast<size_t>(t)] = kNegInf;
    }
    ApplyPenalties(seq, work_);
    x = work_;
  }

  float mx = kNegInf;
  int32_t arg = -1;
  for (size_t i = 0; i < vocab; ++i) {
    const float v = x[i];
    if (std::isnan(v) || v == std::numeric_limits<float>::infinity()) {
      return InvalidArgumentError("sampling: logit of token " + std::to_string(i) + " is " +
                                  (std::isnan(v) ? "NaN" : "+inf"));
    }
    if (v > mx) {  // strict: the lowest id wins ties
      mx = v;
      arg = static_cast<int32_t>(i);
    }
  }
  if (arg < 0) return InvalidArgumentError("sampling: every logit is -inf");

  cand_.clear();
  w_.clear();
  all_ = false;
  if (p.IsGreedy() || p.top_k == 1) {
    cand_.push_back(arg);
    w_.push_back(1.0f);
    total_ = 1.0;
    return OkStatus();
  }

  const float inv_t = 1.0f / p.temperature;
  auto weight = [&](int32_t i) { return std::exp((x[static_cast<size_t>(i)] - mx) * inv_t); };
  const bool top_k_on = p.top_k > 0 && static_cast<size_t>(p.top_k) < vocab;

  if (!top_k_on && p.top_p >= 1.0f && p.min_p <= 0.0f) {
    // No filter: weights for every id, no candidate list, no sort.
    all_ = true;
    w_.resize(vocab);
    double sum = 0;
    for (size_t i = 0; i < vocab; ++i) {
      w_[i] = weight(static_cast<int32_t>(i));
      sum += w_[i];
    }
    total_ = sum;
    return OkStatus();
  }

  // min_p: p_i >= min_p * p_max  <=>  x_i >= max + T * ln(min_p).
  const double x_min =
      p.min_p > 0.0f
          ? static_cast<double>(mx) +
                static_cast<double>(p.temperature) * std::log(static_cast<double>(p.min_p))
          : -std::numeric_limits<double>::infinity();
  cand_.reserve(vocab);
  for (size_t i = 0; i < vocab; ++i) {
    if (x[i] != kNegInf && static_cast<double>(x[i]) >= x_min) {
      cand_.push_back(static_cast<int32_t>(i));
    }
  }

  // A strict total order: more likely first, then the lower id.
  auto better = [&x](int32_t a, int32_t b) {
    const float xa = x[static_cast<size_t>(a)], xb = x[static_cast<size_t>(b)];
    return xa > xb || (xa == xb && a < b);
  };
  if (top_k_on && cand_.size() > static_cast<size_t>(p.top_k)) {
    const size_t k = static_cast<size_t>(p.top_k);
    std::nth_element(cand_.begin(), cand_.begin() + static_cast<long>(k), cand_.end(), better);
    cand_.resize(k);
  }
  if (p.top_p < 1.0f) {
    w_.resize(cand_.size());
    double mass = 0;
    for (size_t j = 0; j < cand_.size(); ++j) {
      w_[j] = weight(cand_[j]);
      mass += w_[j];
    }
    cand_.resize(TopPCut(cand_, w_, static_cast<double>(p.top_p) * mass, better));
  }

  w_.resize(cand_.size());
  double sum = 0;
  for (size_t j = 0; j < cand_.size(); ++j) {
    w_[j] = weight(cand_[j]);
    sum += w_[j];
  }
  total_ = sum;
  return OkStatus();
}

void Sampler::Logprobs(int32_t n, int32_t token, std::span<const float> logits,
                       SampleResult* out) {
  float mx = kNegInf;
  for (float v : logits) mx = std::max(mx, v);
  double sum = 0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - mx);
  const double lse = static_cast<double>(mx) + std::log(sum);
  out->logprob = static_cast<float>(static_cast<double>(logits[static_cast<size_t>(token)]) - lse);
  out->top_logprobs.clear();
  if (n <= 0) return;
  const size_t k = std::min<size_t>(static_cast<size_t>(n), logits.size());
  top_.resize(logits.size());
  std::iota(top_.begin(), top_.end(), 0);
  auto better = [&logits](int32_t a, int32_t b) {
    const float xa = logits[static_cast<size_t>(a)], xb = logits[static_cast<size_t>(b)];
    return xa > xb || (xa == xb && a < b);
  };
  std::partial_sort(top_.begin(), top_.begin() + static_cast<long>(k), top_.end(), better);
  for (size_t j = 0; j < k; ++j) {
    out->top_logprobs.push_back(
        {top_[j], static_cast<float>(static_cast<double>(logits[static_cast<size_t>(top_[j])]) - lse)});
  }
}

StatusOr<SampleResult> Sampler::Sample(const SequenceSampling& seq, std::span<const float> logits) {
  AICLOUD_RETURN_IF_ERROR(Prepare(seq, logits));
  SampleResult r;
  if (!all_ && cand_.size() == 1) {
    r.token = cand_[0];
  } else {
    Rng rng(DrawSeed(seq.seed(), seq.num_generated()));
    const double u = rng.UniformDouble() * total_;
    double cum = 0;
    size_t pick = 0;
    for (size_t j = 0; j < w_.size(); ++j) {
      if (w_[j] <= 0) continue;
      pick = j;  // rounding can leave u just above the final sum: the last live one then
      cum += w_[j];
      if (u < cum) break;
    }
    r.token = all_ ? static_cast<int32_t>(pick) : cand_[pick];
  }
  if (seq.params().logprobs) Logprobs(*seq.params().logprobs, r.token, logits, &r);
  return r;
}

StatusOr<std::vector<TokenProb>> Sampler::Distribution(const SequenceSampling& seq,
                                                       std::span<const float> logits) {
  AICLOUD_RETURN_IF_ERROR(Prepare(seq, logits));
  std::vector<TokenProb> out;
  for (size_t j = 0; j < w_.size(); ++j) {
    if (w_[j] <= 0) continue;
    out.push_back({all_ ? static_cast<int32_t>(j) : cand_[j], w_[j] / total_});
  }
  std::sort(out.begin(), out.end(), [](const TokenProb& a, const TokenProb& b) {
    return a.prob > b.prob || (a.prob == b.prob && a.token < b.token);
  });
  return out;
}

}  // namespace aicloud::engine
