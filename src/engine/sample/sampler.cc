#include "engine/sample/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <numeric>
#include <string>

#include "core/rng.h"

namespace aicloud::engine {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kPosInf = std::numeric_limits<float>::infinity();
// Weights are summed in blocks of this many ids, so a draw finds its block first.
constexpr size_t kBlock = 256;

uint64_t Mix64(uint64_t x) {  // SplitMix64's finaliser
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The generator seed for generated token `index` of a sequence: a function of both alone.
uint64_t DrawSeed(uint64_t seed, int64_t index) {
  return Mix64(seed ^ Mix64(static_cast<uint64_t>(index) + 0x9e3779b97f4a7c15ULL));
}

// exp(x) for x <= 0, within ~2e-7 relative of the true value, exactly 0 below -87.3 (so -inf
// logits get weight 0). Branch-free so loops over it vectorise, and the same bits on every
// platform, unlike libm's. exp(x) = 2^n exp(r), n = round(x / ln 2), r = x - n ln 2 split in
// two parts (Cody & Waite) so r is exact enough; exp(r) on |r| <= ln2 / 2 by its Taylor
// polynomial to degree 7.
inline float FastExp(float x) {
  x = x > -87.3f ? x : -87.3f;  // -inf (and NaN, never passed) land on the clamp too
  const float fn = (x * 1.44269504f + 12582912.0f) - 12582912.0f;  // round to nearest
  const float r = (x - fn * 0.693359375f) + fn * 2.12194440e-4f;
  float p = 1.98412698e-4f;  // 1/7!
  p = p * r + 1.38888889e-3f;
  p = p * r + 8.33333333e-3f;
  p = p * r + 4.16666667e-2f;
  p = p * r + 1.66666667e-1f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t n = static_cast<int32_t>(fn);
  const float scale = std::bit_cast<float>(static_cast<uint32_t>(n + 127) << 23);
  return x == -87.3f ? 0.0f : p * scale;
}

// Sums in a fixed order with four accumulators (deterministic, four times the add throughput
// of one chain).
double Sum(const float* w, size_t n) {
  double a[4] = {0, 0, 0, 0};
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    a[0] += w[i];
    a[1] += w[i + 1];
    a[2] += w[i + 2];
    a[3] += w[i + 3];
  }
  for (; i < n; ++i) a[0] += w[i];
  return (a[0] + a[1]) + (a[2] + a[3]);
}

// Largest value and whether any entry is NaN or +inf, in one branch-free pass.
float MaxAndCheck(const float* x, size_t n, bool* bad) {
  float m[8] = {kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf};
  // Counts entries that are not below +inf: NaN and +inf (-inf is a valid logit).
  float check[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (size_t k = 0; k < 8; ++k) {
      const float v = x[i + k];
      check[k] += v < kPosInf ? 0.0f : 1.0f;
      m[k] = v > m[k] ? v : m[k];
    }
  }
  for (; i < n; ++i) {
    check[0] += x[i] < kPosInf ? 0.0f : 1.0f;
    m[0] = x[i] > m[0] ? x[i] : m[0];
  }
  float c = 0;
  for (float v : check) c += v;
  *bad = c != 0;
  return std::max({m[0], m[1], m[2], m[3], m[4], m[5], m[6], m[7]});
}

// One candidate of the top-p selection.
struct Cand {
  float x;  // logit (after penalties): the order
  float w;  // unnormalised probability
  int32_t id;
};

// A strict total order: more likely first, then the lower id.
inline bool Better(const Cand& a, const Cand& b) { return a.x > b.x || (a.x == b.x && a.id < b.id); }

// Reorders c (using tmp) so that a most-likely-first prefix comes first and returns the length
// of the shortest such prefix whose weight reaches top_p of the total (all of them if rounding
// keeps the sum short). Weights grow with the logit, so: histogram the candidates into kBuckets
// equal logit ranges, accumulate bucket masses from the top until the target is crossed; every
// bucket above the crossing one is kept whole, and only the crossing bucket's members are
// sorted. Two linear passes and one small sort, whatever the shape of the distribution.
constexpr int kBuckets = 1024;

size_t TopPCut(std::vector<Cand>& c, std::vector<Cand>& tmp, double top_p) {
  float lo = c[0].x, hi = c[0].x;
  for (const Cand& e : c) {
    lo = std::min(lo, e.x);
    hi = std::max(hi, e.x);
  }
  const double scale = hi > lo ? kBuckets / (static_cast<double>(hi) - lo) : 0.0;
  // Monotone in x: a larger logit never lands in a later bucket.
  auto bucket = [&](float x) {
    return std::min(kBuckets - 1, static_cast<int>((static_cast<double>(hi) - x) * scale));
  };
  double mass[kBuckets] = {};
  double total = 0;
  for (const Cand& e : c) {
    mass[bucket(e.x)] += e.w;
    total += e.w;
  }
  const double target = top_p * total;
  int cross = kBuckets - 1;
  double before = 0;  // mass of the buckets above `cross`
  for (int b = 0; b < kBuckets; ++b) {
    if (before + mass[b] >= target) {
      cross = b;
      break;
    }
    before += mass[b];
  }
  tmp.clear();
  for (const Cand& e : c) {
    if (bucket(e.x) < cross) tmp.push_back(e);
  }
  const size_t whole = tmp.size();
  for (const Cand& e : c) {
    if (bucket(e.x) == cross) tmp.push_back(e);
  }
  std::sort(tmp.begin() + static_cast<long>(whole), tmp.end(), Better);
  size_t keep = tmp.size();
  double cum = before;
  for (size_t j = whole; j < tmp.size(); ++j) {
    cum += tmp[j].w;
    if (cum >= target) {
      keep = j + 1;
      break;
    }
  }
  c.swap(tmp);
  return keep;
}

// The k best ids by (value desc, id asc), visiting ids in ascending order: a bounded heap
// whose top is the worst kept. Visiting in id order makes "strictly above the worst kept" the
// exact test, ties going to the lower id already kept. O(n + m log k) for m heap updates,
// about k ln(n / k) for unordered data. Above kHeapMaxK, nth_element (KeepTopK) is used.
using HeapEntry = std::pair<float, int32_t>;
constexpr size_t kHeapMaxK = 4096;

// Heap order: the worst on top (lowest value; among equals, the highest id).
inline bool Worse(const HeapEntry& a, const HeapEntry& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

inline void HeapOffer(std::vector<HeapEntry>& heap, size_t k, float v, int32_t id) {
  if (heap.size() < k) {
    heap.push_back({v, id});
    std::push_heap(heap.begin(), heap.end(), Worse);
  } else if (v > heap.front().first) {
    std::pop_heap(heap.begin(), heap.end(), Worse);
    heap.back() = {v, id};
    std::push_heap(heap.begin(), heap.end(), Worse);
  }
}

// Keeps in `ids` exactly the k best of them by (value desc, id asc), still ascending.
// nth_element runs on the values themselves (direct float compares), then one pass picks the
// ids. REQUIRES: ids ascending.
void KeepTopK(std::span<const float> x, std::vector<int32_t>& ids, size_t k,
              std::vector<float>& scratch) {
  if (ids.size() <= k) return;
  scratch.resize(ids.size());
  for (size_t j = 0; j < ids.size(); ++j) scratch[j] = x[static_cast<size_t>(ids[j])];
  std::nth_element(scratch.begin(), scratch.begin() + static_cast<long>(k - 1), scratch.end(),
                   std::greater<float>());
  const float kth = scratch[k - 1];
  size_t above = 0;
  for (int32_t id : ids) above += x[static_cast<size_t>(id)] > kth;
  size_t ties = k - above;  // of those equal to kth, the lowest ids
  size_t out = 0;
  for (int32_t id : ids) {
    const float v = x[static_cast<size_t>(id)];
    if (v > kth || (v == kth && ties > 0)) {
      if (v == kth) --ties;
      ids[out++] = id;
    }
  }
  ids.resize(out);
}

}  // namespace

struct Sampler::Scratch {
  std::vector<float> work;            // penalised logits
  std::vector<int32_t> cand;          // candidate ids
  std::vector<float> w;               // weights exp((x - max) / T), same order as cand (or by id)
  std::vector<double> block_sums;     // all: sums of w per block of kBlock ids
  std::vector<float> values;          // nth_element scratch, logprob exps
  std::vector<HeapEntry> heap;        // top-k heap
  std::vector<Cand> packed;           // top-p selection
  std::vector<Cand> packed_tmp;
  std::vector<int32_t> bucket;        // top-p: logit bucket per id
  std::vector<double> hist;           // top-p: bucket masses, four interleaved copies
  std::vector<int32_t> top;           // logprobs
  bool all = false;                   // every id is a candidate, w indexed by id
  double total = 0;                   // sum of w
};

Sampler::Sampler() : s_(std::make_unique<Scratch>()) {}
Sampler::~Sampler() = default;
Sampler::Sampler(Sampler&&) noexcept = default;
Sampler& Sampler::operator=(Sampler&&) noexcept = default;

// ---- SequenceSampling ----------------------------------------------------------------------

SequenceSampling::SequenceSampling(SamplingParams params, uint64_t seed,
                                   std::span<const int32_t> prompt,
                                   std::span<const int32_t> eos_token_ids)
    : params_(std::move(params)), seed_(seed) {
  if (params_.grammar) matcher_.emplace(params_.grammar);
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
  if (matcher_ && !matcher_->Advance(token)) constraint_violated_ = true;
  if (params_.HasPenalties()) ++output_counts_[token];
}

const structured::TokenMask* SequenceSampling::ConstraintMask() const {
  if (!matcher_) return nullptr;
  const int64_t remaining = std::max<int64_t>(1, params_.max_tokens - num_generated_);
  return &matcher_->Mask(static_cast<int32_t>(remaining));
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
  const structured::TokenMask* allowed = seq.ConstraintMask();
  if (allowed != nullptr && allowed->count == 0) {
    return FailedPreconditionError("sampling: the grammar allows no token here");
  }
  if (p.HasPenalties() || seq.MasksNow() || !p.logit_bias.empty() || allowed != nullptr) {
    std::vector<float>& work = s_->work;
    work.assign(logits.begin(), logits.end());
    if (allowed != nullptr) allowed->Apply(work);
    if (seq.MasksNow()) {
      for (int32_t t : seq.min_tokens_masked()) {
        if (t >= 0 && static_cast<size_t>(t) < vocab) work[static_cast<size_t>(t)] = kNegInf;
      }
    }
    for (const auto& [t, bias] : p.logit_bias) {
      if (t >= 0 && static_cast<size_t>(t) < vocab) work[static_cast<size_t>(t)] += bias;
    }
    ApplyPenalties(seq, work);
    x = work;
  }

  bool bad = false;
  const float mx = MaxAndCheck(x.data(), vocab, &bad);
  if (bad) {
    for (size_t i = 0; i < vocab; ++i) {
      if (!(x[i] < kPosInf)) {
        return InvalidArgumentError("sampling: logit of token " + std::to_string(i) + " is " +
                                    (std::isnan(x[i]) ? "NaN" : "+inf"));
      }
    }
  }
  if (mx == kNegInf) return InvalidArgumentError("sampling: every logit is -inf");

  Scratch& sc = *s_;
  sc.cand.clear();
  sc.w.clear();
  sc.block_sums.clear();
  sc.all = false;
  if (p.IsGreedy() || p.top_k == 1) {
    // The lowest id holding the maximum.
    sc.cand.push_back(static_cast<int32_t>(std::find(x.begin(), x.end(), mx) - x.begin()));
    sc.w.push_back(1.0f);
    sc.total = 1.0;
    return OkStatus();
  }

  const float inv_t = 1.0f / p.temperature;
  const bool top_k_on = p.top_k > 0 && static_cast<size_t>(p.top_k) < vocab;

  if (!top_k_on && p.top_p >= 1.0f && p.min_p <= 0.0f) {
    // No filter: weights for every id in one vectorisable pass, summed per block.
    sc.all = true;
    sc.w.resize(vocab);
    float* w = sc.w.data();
    const float* xs = x.data();
    for (size_t i = 0; i < vocab; ++i) w[i] = FastExp((xs[i] - mx) * inv_t);
    double total = 0;
    for (size_t b = 0; b < vocab; b += kBlock) {
      sc.block_sums.push_back(Sum(w + b, std::min(kBlock, vocab - b)));
      total += sc.block_sums.back();
    }
    sc.total = total;
    return OkStatus();
  }

  // min_p: p_i >= min_p * p_max  <=>  x_i >= max + T * ln(min_p). -inf never survives.
  const bool min_p_on = p.min_p > 0.0f;
  const double x_min =
      min_p_on ? static_cast<double>(mx) +
                     static_cast<double>(p.temperature) * std::log(static_cast<double>(p.min_p))
               : -std::numeric_limits<double>::infinity();
  auto survives = [&](float v) {
    return v != kNegInf && (!min_p_on || static_cast<double>(v) >= x_min);
  };
  if (!top_k_on) return PrepareTopP(x, mx, min_p_on ? x_min : -std::numeric_limits<double>::infinity(), p);
  const size_t k = static_cast<size_t>(p.top_k);
  if (k <= kHeapMaxK) {
    sc.heap.clear();
    for (size_t i = 0; i < vocab; ++i) {
      if (survives(x[i])) HeapOffer(sc.heap, k, x[i], static_cast<int32_t>(i));
    }
    for (const HeapEntry& e : sc.heap) sc.cand.push_back(e.second);
    std::sort(sc.cand.begin(), sc.cand.end());
  } else {
    sc.cand.reserve(vocab);
    for (size_t i = 0; i < vocab; ++i) {
      if (survives(x[i])) sc.cand.push_back(static_cast<int32_t>(i));
    }
    KeepTopK(x, sc.cand, k, sc.values);
  }

  if (p.top_p < 1.0f) {
    sc.packed.resize(sc.cand.size());
    for (size_t j = 0; j < sc.cand.size(); ++j) {
      const float v = x[static_cast<size_t>(sc.cand[j])];
      sc.packed[j] = Cand{v, FastExp((v - mx) * inv_t), sc.cand[j]};
    }
    const size_t keep = TopPCut(sc.packed, sc.packed_tmp, static_cast<double>(p.top_p));
    sc.cand.resize(keep);
    sc.w.resize(keep);
    for (size_t j = 0; j < keep; ++j) {
      sc.cand[j] = sc.packed[j].id;
      sc.w[j] = sc.packed[j].w;
    }
  } else {
    sc.w.resize(sc.cand.size());
    for (size_t j = 0; j < sc.cand.size(); ++j) {
      sc.w[j] = FastExp((x[static_cast<size_t>(sc.cand[j])] - mx) * inv_t);
    }
  }
  sc.total = Sum(sc.w.data(), sc.w.size());
  return OkStatus();
}

// No top_k: min_p (x_min) and top_p < 1 over the whole vocabulary, in passes that vectorise:
// weights for every id; a bucket per id over the logit range [max - 40 T, max] (weights below
// e^-40 of the top one, together < 1e-12 of the mass, so no float top_p below 1 cuts there;
// if rounding ever puts the cut in the last bucket it is simply sorted too); the bucket masses;
// then the ids of the buckets above the one the cut falls in, and that bucket sorted.
Status Sampler::PrepareTopP(std::span<const float> x, float mx, double x_min,
                            const SamplingParams& p) {
  Scratch& sc = *s_;
  const size_t vocab = x.size();
  const float inv_t = 1.0f / p.temperature;
  sc.w.resize(vocab);
  sc.bucket.resize(vocab);
  const float* xs = x.data();
  float* w = sc.w.data();
  int32_t* bk = sc.bucket.data();
  for (size_t i = 0; i < vocab; ++i) w[i] = FastExp((xs[i] - mx) * inv_t);
  // The smallest float >= x_min, so that a float compare equals the exact one.
  float x_min_f = static_cast<float>(x_min);
  if (static_cast<double>(x_min_f) < x_min) x_min_f = std::nextafter(x_min_f, kPosInf);
  const float scale = static_cast<float>(kBuckets) / (40.0f * p.temperature);
  const float last = static_cast<float>(kBuckets - 1);
  for (size_t i = 0; i < vocab; ++i) {
    const float d = std::min((mx - xs[i]) * scale, last);  // -inf lands in the last bucket
    // Filtered by min_p (or -inf): bucket kBuckets, outside the histogram.
    bk[i] = xs[i] >= x_min_f && xs[i] != kNegInf ? static_cast<int32_t>(d) : kBuckets;
  }
  // top_p = 1 (min_p alone): every survivor, no histogram.
  int cross = kBuckets;
  double before = 0, target = 0;
  if (p.top_p < 1.0f) {
    // Four interleaved histograms, so ids falling in one bucket do not form one serial chain
    // of dependent adds; combined in a fixed order.
    std::vector<double>& h = sc.hist;
    h.assign(4 * (kBuckets + 1), 0.0);
    size_t i = 0;
    for (; i + 4 <= vocab; i += 4) {
      for (size_t k = 0; k < 4; ++k) h[k * (kBuckets + 1) + static_cast<size_t>(bk[i + k])] += w[i + k];
    }
    for (; i < vocab; ++i) h[static_cast<size_t>(bk[i])] += w[i];
    double mass[kBuckets];
    double total = 0;
    for (int b = 0; b < kBuckets; ++b) {
      const size_t u = static_cast<size_t>(b);
      mass[b] = (h[u] + h[kBuckets + 1 + u]) + (h[2 * (kBuckets + 1) + u] + h[3 * (kBuckets + 1) + u]);
      total += mass[b];
    }
    target = static_cast<double>(p.top_p) * total;
    cross = kBuckets - 1;
    for (int b = 0; b < kBuckets; ++b) {
      if (before + mass[b] >= target) {
        cross = b;
        break;
      }
      before += mass[b];
    }
  }
  // Branch-free collection: write every id, advance past those kept.
  sc.cand.resize(vocab + 1);
  size_t n = 0;
  for (size_t i = 0; i < vocab; ++i) {
    sc.cand[n] = static_cast<int32_t>(i);
    n += bk[i] < cross;
  }
  sc.cand.resize(n);
  sc.packed.clear();
  if (cross < kBuckets) {
    for (size_t i = 0; i < vocab; ++i) {
      if (bk[i] == cross) sc.packed.push_back(Cand{xs[i], w[i], static_cast<int32_t>(i)});
    }
  }
  std::sort(sc.packed.begin(), sc.packed.end(), Better);
  double cum = before;
  size_t take = sc.packed.size();
  for (size_t j = 0; j < sc.packed.size(); ++j) {
    cum += sc.packed[j].w;
    if (cum >= target) {
      take = j + 1;
      break;
    }
  }
  // Weights follow the candidates (the full-vocabulary w is no longer needed).
  const size_t whole = sc.cand.size();
  for (size_t j = 0; j < whole; ++j) sc.w[j] = w[static_cast<size_t>(sc.cand[j])];
  sc.w.resize(whole);
  for (size_t j = 0; j < take; ++j) {
    sc.cand.push_back(sc.packed[j].id);
    sc.w.push_back(sc.packed[j].w);
  }
  sc.total = Sum(sc.w.data(), sc.w.size());
  return OkStatus();
}

void Sampler::Logprobs(int32_t n, int32_t token, std::span<const float> logits,
                       SampleResult* out) {
  Scratch& sc = *s_;
  const size_t vocab = logits.size();
  bool bad = false;
  const float mx = MaxAndCheck(logits.data(), vocab, &bad);
  sc.values.resize(vocab);
  for (size_t i = 0; i < vocab; ++i) sc.values[i] = FastExp(logits[i] - mx);
  const double lse = static_cast<double>(mx) + std::log(Sum(sc.values.data(), vocab));
  out->logprob = static_cast<float>(static_cast<double>(logits[static_cast<size_t>(token)]) - lse);
  out->top_logprobs.clear();
  if (n <= 0) return;
  sc.heap.clear();
  for (size_t i = 0; i < vocab; ++i) HeapOffer(sc.heap, static_cast<size_t>(n), logits[i], static_cast<int32_t>(i));
  std::sort(sc.heap.begin(), sc.heap.end(), [](const HeapEntry& a, const HeapEntry& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  });
  for (const HeapEntry& e : sc.heap) {
    out->top_logprobs.push_back({e.second, static_cast<float>(static_cast<double>(e.first) - lse)});
  }
}

StatusOr<SampleResult> Sampler::Sample(const SequenceSampling& seq, std::span<const float> logits) {
  AICLOUD_RETURN_IF_ERROR(Prepare(seq, logits));
  const Scratch& sc = *s_;
  SampleResult r;
  if (!sc.all && sc.cand.size() == 1) {
    r.token = sc.cand[0];
  } else {
    Rng rng(DrawSeed(seq.seed(), seq.num_generated()));
    const double u = rng.UniformDouble() * sc.total;
    size_t begin = 0, end = sc.w.size();
    double cum = 0;
    if (!sc.block_sums.empty()) {
      // Find the block, then walk inside it.
      size_t b = 0;
      for (; b + 1 < sc.block_sums.size(); ++b) {
        if (u < cum + sc.block_sums[b]) break;
        cum += sc.block_sums[b];
      }
      begin = b * kBlock;
      end = std::min(sc.w.size(), begin + kBlock);
    }
    size_t pick = begin;
    for (size_t j = begin; j < end; ++j) {
      if (sc.w[j] <= 0) continue;
      pick = j;  // rounding can leave u just above the final sum: the last live one then
      cum += sc.w[j];
      if (u < cum) break;
    }
    if (sc.w[pick] <= 0) {  // a block of zeros at the very end (rounding): the last live weight
      for (size_t j = sc.w.size(); j-- > 0;) {
        if (sc.w[j] > 0) {
          pick = j;
          break;
        }
      }
    }
    r.token = sc.all ? static_cast<int32_t>(pick) : sc.cand[pick];
  }
  if (seq.params().logprobs) Logprobs(*seq.params().logprobs, r.token, logits, &r);
  return r;
}

StatusOr<std::vector<TokenProb>> Sampler::Distribution(const SequenceSampling& seq,
                                                       std::span<const float> logits) {
  AICLOUD_RETURN_IF_ERROR(Prepare(seq, logits));
  const Scratch& sc = *s_;
  std::vector<TokenProb> out;
  for (size_t j = 0; j < sc.w.size(); ++j) {
    if (sc.w[j] <= 0) continue;
    out.push_back({sc.all ? static_cast<int32_t>(j) : sc.cand[j], sc.w[j] / sc.total});
  }
  std::sort(out.begin(), out.end(), [](const TokenProb& a, const TokenProb& b) {
    return a.prob > b.prob || (a.prob == b.prob && a.token < b.token);
  });
  return out;
}

}  // namespace aicloud::engine
