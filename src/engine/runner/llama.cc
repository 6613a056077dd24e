#include "engine/runner/llama.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "engine/kernels/matmul.h"
#include "engine/kernels/ops.h"

namespace aicloud::engine {
namespace {

using kernels::Matrix;
using kernels::VectorView;
using kernels::WeightFormat;
using kernels::WeightView;

WeightView ViewOf(const TensorView& t) {
  return {kernels::WeightFormatOf(t.dtype), static_cast<int64_t>(t.shape[0]),
          static_cast<int64_t>(t.shape.size() > 1 ? t.shape[1] : 1), t.data};
}

StatusOr<std::vector<float>> FloatVector(const Checkpoint& c, const std::string& name, int64_t n) {
  StatusOr<const TensorView*> t = c.Require(name, {n});
  if (!t.ok()) return t.status();
  std::vector<float> out(static_cast<size_t>(n));
  // The mapped data may be unaligned for its type: go through a copy.
  std::vector<std::byte> raw((*t)->bytes().begin(), (*t)->bytes().end());
  kernels::ConvertToFloat((*t)->dtype, raw.data(), out.data(), n);
  c.DropPages(*t);
  return out;
}

// Stacks checkpoint matrices (all [*, cols]) into one matrix of format `to`.
StatusOr<Matrix> Fuse(const Checkpoint& c, std::initializer_list<std::pair<std::string, int64_t>> parts,
                      int64_t cols, WeightFormat to) {
  std::vector<WeightView> views;
  for (const auto& [name, rows] : parts) {
    StatusOr<const TensorView*> t = c.Require(name, {rows, cols});
    if (!t.ok()) return t.status();
    views.push_back(ViewOf(**t));
  }
  StatusOr<Matrix> m = kernels::ConcatRows(views, to);
  for (const auto& [name, rows] : parts) c.DropPages(c.Find(name));  // copied: the file's pages can go
  if (!m.ok()) {
    std::string names;
    for (const auto& p : parts) names += (names.empty() ? "" : ", ") + p.first;
    return Status(m.status().code(), names + ": " + std::string(m.status().message()));
  }
  return m;
}

WeightFormat TargetFormat(const std::optional<WeightFormat>& want, DType stored) {
  return want ? *want : kernels::WeightFormatOf(stored);
}

void AddBias(float* rows, int64_t n, int64_t width, const std::vector<float>& bias) {
  if (bias.empty()) return;
  for (int64_t t = 0; t < n; ++t) kernels::Add(rows + t * width, bias.data(), rows + t * width, width);
}

}  // namespace

// --- KvCache ----------------------------------------------------------------------------------

void KvCache::Free::operator()(std::byte* p) const { std::free(p); }

int64_t KvCache::BytesPerBlock(const ModelConfig& config, int64_t block_size, DType type) {
  return 2 * config.num_hidden_layers * block_size * config.num_key_value_heads * config.head_dim *
         static_cast<int64_t>(DTypeSize(type));
}

StatusOr<KvCache> KvCache::Create(const ModelConfig& config, int64_t num_blocks, int64_t block_size,
                                  DType type) {
  if (num_blocks <= 0 || block_size <= 0) {
    return InvalidArgumentError("KV cache: blocks (" + std::to_string(num_blocks) + ") and block size (" +
                                std::to_string(block_size) + ") must be positive");
  }
  if (type != DType::kF32 && type != DType::kF16) {
    return InvalidArgumentError("KV cache: type must be F32 or F16, not " + std::string(DTypeName(type)));
  }
  KvCache c;
  c.num_blocks_ = num_blocks;
  c.block_size_ = block_size;
  c.type_ = type;
  kernels::KvCacheView proto{type, num_blocks, block_size, config.num_key_value_heads, config.head_dim,
                             nullptr, nullptr};
  const size_t pool_bytes = static_cast<size_t>(proto.BlockBytes()) * static_cast<size_t>(num_blocks);
  c.bytes_ = pool_bytes * 2 * static_cast<size_t>(config.num_hidden_layers);
  void* p = nullptr;
  if (::posix_memalign(&p, 64, c.bytes_) != 0 || p == nullptr) {
    return ResourceExhaustedError("KV cache: cannot allocate " + std::to_string(c.bytes_) + " bytes");
  }
  c.memory_.reset(static_cast<std::byte*>(p));
  std::byte* at = c.memory_.get();
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    kernels::KvCacheView v = proto;
    v.k = at;
    v.v = at + pool_bytes;
    at += 2 * pool_bytes;
    c.layers_.push_back(v);
  }
  return c;
}

// --- loading ----------------------------------------------------------------------------------

StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::Load(const Checkpoint& ckpt,
                                                       const ModelLoadOptions& options) {
  if (Status v = ckpt.Validate(); !v.ok()) return v;
  std::unique_ptr<LlamaModel> m(new LlamaModel());
  const ModelConfig& c = ckpt.config();
  m->config_ = c;
  const int64_t H = c.hidden_size, Q = c.q_dim(), KV = c.kv_dim(), I = c.intermediate_size;

  const TensorView* embed = ckpt.Find("model.embed_tokens.weight");
  const WeightFormat fmt = TargetFormat(options.weights, embed->dtype);
  m->format_ = fmt;
  if (fmt == WeightFormat::kQ8 && (H % kernels::kQ8BlockSize != 0 || I % kernels::kQ8BlockSize != 0)) {
    return InvalidArgumentError("int8 weights need hidden_size and intermediate_size divisible by " +
                                std::to_string(kernels::kQ8BlockSize) + " (hidden " + std::to_string(H) +
                                ", intermediate " + std::to_string(I) + ")");
  }
  auto convert = [&](const std::string& name, int64_t rows, int64_t cols) -> StatusOr<Matrix> {
    StatusOr<const TensorView*> t = ckpt.Require(name, {rows, cols});
    if (!t.ok()) return t.status();
    StatusOr<Matrix> out = kernels::ConvertMatrix(ViewOf(**t), TargetFormat(options.weights, (*t)->dtype));
    ckpt.DropPages(*t);  // copied: the file's pages can go, so load never holds both in full
    if (!out.ok()) return Status(out.status().code(), name + ": " + std::string(out.status().message()));
    return out;
  };
  StatusOr<Matrix> e = convert("model.embed_tokens.weight", c.vocab_size, H);
  if (!e.ok()) return e.status();
  m->embed_ = std::move(*e);
  if (!c.tie_word_embeddings) {
    StatusOr<Matrix> head = convert("lm_head.weight", c.vocab_size, H);
    if (!head.ok()) return head.status();
    m->lm_head_ = std::move(*head);
  }
  StatusOr<std::vector<float>> fn = FloatVector(ckpt, "model.norm.weight", H);
  if (!fn.ok()) return fn.status();
  m->final_norm_ = std::move(*fn);

  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    Layer layer;
    StatusOr<std::vector<float>> n1 = FloatVector(ckpt, p + "input_layernorm.weight", H);
    if (!n1.ok()) return n1.status();
    StatusOr<std::vector<float>> n2 = FloatVector(ckpt, p + "post_attention_layernorm.weight", H);
    if (!n2.ok()) return n2.status();
    layer.attn_norm = std::move(*n1);
    layer.mlp_norm = std::move(*n2);
    const DType stored = ckpt.Find(p + "self_attn.q_proj.weight")->dtype;
    StatusOr<Matrix> qkv = Fuse(ckpt,
                                {{p + "self_attn.q_proj.weight", Q},
                                 {p + "self_attn.k_proj.weight", KV},
                                 {p + "self_attn.v_proj.weight", KV}},
                                H, TargetFormat(options.weights, stored));
    if (!qkv.ok()) return qkv.status();
    layer.qkv = std::move(*qkv);
    if (c.qkv_bias) {
      for (const auto& [name, n] : {std::pair{p + "self_attn.q_proj.bias", Q},
                                    std::pair{p + "self_attn.k_proj.bias", KV},
                                    std::pair{p + "self_attn.v_proj.bias", KV}}) {
        StatusOr<std::vector<float>> b = FloatVector(ckpt, name, n);
        if (!b.ok()) return b.status();
        layer.qkv_bias.insert(layer.qkv_bias.end(), b->begin(), b->end());
      }
    }
    StatusOr<Matrix> o = convert(p + "self_attn.o_proj.weight", H, Q);
    if (!o.ok()) return o.status();
    layer.o = std::move(*o);
    if (c.o_bias) {
      StatusOr<std::vector<float>> b = FloatVector(ckpt, p + "self_attn.o_proj.bias", H);
      if (!b.ok()) return b.status();
      layer.o_bias = std::move(*b);
    }
    StatusOr<Matrix> gu = Fuse(ckpt, {{p + "mlp.gate_proj.weight", I}, {p + "mlp.up_proj.weight", I}}, H,
                               TargetFormat(options.weights, stored));
    if (!gu.ok()) return gu.status();
    layer.gate_up = std::move(*gu);
    StatusOr<Matrix> down = convert(p + "mlp.down_proj.weight", H, I);
    if (!down.ok()) return down.status();
    layer.down = std::move(*down);
    m->layers_.push_back(std::move(layer));
  }
  // Positions past the table (longer contexts than the config states) are computed on the fly.
  const int64_t table_positions = std::clamp<int64_t>(c.max_position_embeddings, 1, 32768);
  m->rope_ = std::make_unique<kernels::RopeTable>(RopeInverseFrequencies(c), table_positions);
  return m;
}

int64_t LlamaModel::weight_bytes() const {
  size_t b = embed_.bytes() + lm_head_.bytes() + final_norm_.size() * 4;
  for (const Layer& l : layers_) {
    b += l.qkv.bytes() + l.o.bytes() + l.gate_up.bytes() + l.down.bytes();
    b += (l.attn_norm.size() + l.mlp_norm.size() + l.qkv_bias.size() + l.o_bias.size()) * 4;
  }
  return static_cast<int64_t>(b);
}

// --- the step ---------------------------------------------------------------------------------

Status LlamaModel::Check(const ForwardBatch& b, const KvCache& cache) const {
  const size_t n = b.tokens.size();
  if (b.positions.size() != n || b.slots.size() != n || b.attention.size() != n ||
      (!b.adapters.empty() && b.adapters.size() != n)) {
    return InvalidArgumentError("forward batch: " + std::to_string(n) + " tokens but " +
                                std::to_string(b.positions.size()) + " positions, " +
                                std::to_string(b.slots.size()) + " slots, " +
                                std::to_string(b.attention.size()) + " attention views, " +
                                std::to_string(b.adapters.size()) + " adapter ids");
  }
  const int64_t slots = cache.num_blocks() * cache.block_size();
  for (size_t i = 0; i < n; ++i) {
    if (b.tokens[i] < 0 || b.tokens[i] >= config_.vocab_size) {
      return InvalidArgumentError("forward batch: token " + std::to_string(b.tokens[i]) + " at row " +
                                  std::to_string(i) + " is outside the vocabulary of " +
                                  std::to_string(config_.vocab_size));
    }
    if (b.slots[i] < 0 || b.slots[i] >= slots) {
      return InvalidArgumentError("forward batch: slot " + std::to_string(b.slots[i]) + " at row " +
                                  std::to_string(i) + " is outside the cache (" + std::to_string(slots) +
                                  " slots)");
    }
    if (b.positions[i] < 0) {
      return InvalidArgumentError("forward batch: negative position at row " + std::to_string(i));
    }
  }
  for (int32_t r : b.logit_rows) {
    if (r < 0 || static_cast<size_t>(r) >= n) {
      return InvalidArgumentError("forward batch: logit row " + std::to_string(r) + " is not a token of the step");
    }
  }
  if (cache.layer(0).kv_heads != config_.num_key_value_heads || cache.layer(0).head_dim != config_.head_dim) {
    return InvalidArgumentError("forward batch: the KV cache was made for another model shape");
  }
  return kernels::ValidateAttention(b.attention, config_.num_attention_heads, cache.layer(0));
}

Status LlamaModel::SetLoras(const LoraRegistry* registry) {
  if (registry != nullptr) AICLOUD_RETURN_IF_ERROR(CheckLoraBase(config_, registry->base_config()));
  loras_ = registry;
  return OkStatus();
}

Status LlamaModel::PrepareLoras(const ForwardBatch& b) {
  lora_.Clear();
  if (b.adapters.empty()) return OkStatus();
  if (loras_ == nullptr) {
    for (size_t i = 0; i < b.adapters.size(); ++i) {
      if (b.adapters[i] != kBaseAdapterId) {
        return FailedPreconditionError("forward batch: token " + std::to_string(i) + " asks for LoRA adapter " +
                                       std::to_string(b.adapters[i]) + " but the model has no adapters");
      }
    }
    return OkStatus();
  }
  return loras_->Resolve(b.adapters, lora_);
}

void LlamaModel::Run(kernels::ThreadPool& pool, const ForwardBatch& b, KvCache& cache) {
  const ModelConfig& c = config_;
  const int64_t n = static_cast<int64_t>(b.tokens.size());
  const int64_t H = c.hidden_size, Q = c.q_dim(), KV = c.kv_dim(), I = c.intermediate_size;
  const int64_t W = Q + 2 * KV;  // fused qkv row
  const float eps = static_cast<float>(c.rms_norm_eps);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  auto grow = [](std::vector<float>& v, int64_t size) {
    if (v.size() < static_cast<size_t>(size)) v.resize(static_cast<size_t>(size));
  };
  grow(x_, n * H);
  grow(h_, n * H);
  grow(qkv_, n * W);
  grow(attn_, n * Q);
  grow(gu_, n * 2 * I);
  grow(act_, n * I);
  float* x = x_.data();
  float* h = h_.data();
  (void)kernels::EmbeddingLookup(embed_.view(), b.tokens, x);  // ids checked by Check

  // Row-wise kernels split over the pool when there are many rows (prefill).
  auto rows = [&](int64_t count, auto&& fn) {
    if (count < 8) {
      fn(0, count);
    } else {
      pool.ParallelFor(count, fn, 4);
    }
  };
  const std::vector<int32_t> positions(b.positions.begin(), b.positions.end());
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& L = layers_[l];
    const kernels::KvCacheView kv = cache.layer(static_cast<int64_t>(l));
    const VectorView attn_norm{DType::kF32, H, L.attn_norm.data()};
    const VectorView mlp_norm{DType::kF32, H, L.mlp_norm.data()};
    rows(n, [&](int64_t s, int64_t e) { kernels::RmsNorm(x + s * H, e - s, H, attn_norm, eps, h + s * H); });
    kernels::MatMul(pool, h, n, L.qkv.view(), qkv_.data());
    if (!lora_.empty()) ApplyLora(pool, lora_, static_cast<int64_t>(l), QkvTargets(c), h, H, qkv_.data(), W);
    AddBias(qkv_.data(), n, W, L.qkv_bias);
    rows(n, [&](int64_t s, int64_t e) {
      kernels::Rope(qkv_.data() + s * W, e - s, c.num_attention_heads, c.head_dim, W, positions.data() + s, *rope_);
      kernels::Rope(qkv_.data() + s * W + Q, e - s, c.num_key_value_heads, c.head_dim, W, positions.data() + s,
                    *rope_);
    });
    kernels::StoreKv(kv, b.slots.data(), qkv_.data() + Q, W, qkv_.data() + Q + KV, W, n);
    kernels::PagedAttention(pool, qkv_.data(), W, b.attention, c.num_attention_heads, kv, scale, attn_.data(), Q);
    kernels::MatMul(pool, attn_.data(), n, L.o.view(), h);
    if (!lora_.empty()) ApplyLora(pool, lora_, static_cast<int64_t>(l), LoraModule::kO, attn_.data(), Q, h, H, 0);
    AddBias(h, n, H, L.o_bias);
    kernels::Add(x, h, x, n * H);
    rows(n, [&](int64_t s, int64_t e) { kernels::RmsNorm(x + s * H, e - s, H, mlp_norm, eps, h + s * H); });
    kernels::MatMul(pool, h, n, L.gate_up.view(), gu_.data());
    if (!lora_.empty()) ApplyLora(pool, lora_, static_cast<int64_t>(l), GateUpTargets(c), h, H, gu_.data(), 2 * I);
    rows(n, [&](int64_t s, int64_t e) { kernels::SiluMulRows(gu_.data() + s * 2 * I, e - s, I, act_.data() + s * I); });
    kernels::MatMul(pool, act_.data(), n, L.down.view(), h);
    if (!lora_.empty()) ApplyLora(pool, lora_, static_cast<int64_t>(l), LoraModule::kDown, act_.data(), I, h, H, 0);
    kernels::Add(x, h, x, n * H);
  }
  const int64_t r = static_cast<int64_t>(b.logit_rows.size());
  grow(final_, r * H);
  const VectorView final_norm{DType::kF32, H, final_norm_.data()};
  for (int64_t i = 0; i < r; ++i) {
    kernels::RmsNorm(x + static_cast<int64_t>(b.logit_rows[static_cast<size_t>(i)]) * H, 1, H, final_norm, eps,
                     final_.data() + i * H);
  }
}

Status LlamaModel::Forward(kernels::ThreadPool& pool, const ForwardBatch& b, KvCache& cache, float* logits) {
  if (Status s = Check(b, cache); !s.ok()) return s;
  if (b.tokens.empty()) return OkStatus();
  if (Status s = PrepareLoras(b); !s.ok()) return s;
  Run(pool, b, cache);
  const WeightView head = lm_head_.rows() > 0 ? lm_head_.view() : embed_.view();
  if (!b.logit_rows.empty()) {
    kernels::MatMul(pool, final_.data(), static_cast<int64_t>(b.logit_rows.size()), head, logits);
  }
  return OkStatus();
}

Status LlamaModel::ForwardHidden(kernels::ThreadPool& pool, const ForwardBatch& b, KvCache& cache, float* out) {
  if (Status s = Check(b, cache); !s.ok()) return s;
  if (b.tokens.empty()) return OkStatus();
  if (Status s = PrepareLoras(b); !s.ok()) return s;
  Run(pool, b, cache);
  std::memcpy(out, final_.data(), b.logit_rows.size() * static_cast<size_t>(config_.hidden_size) * sizeof(float));
  return OkStatus();
}

}  // namespace aicloud::engine
