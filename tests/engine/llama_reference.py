#!/usr/bin/python3
"""Independent reference for the engine's Llama forward pass, written directly in PyTorch.

Reads a Hugging Face-layout checkpoint directory (config.json + model.safetensors or a sharded
model.safetensors.index.json) without the transformers library, runs the Llama architecture in
float32 (RMSNorm, rotary embeddings in the rotate-half convention with optional llama3 frequency
scaling, grouped-query attention with a causal mask, SwiGLU MLP, tied or separate lm_head) and
writes a JSON fixture the C++ tests compare against:

  {"model": {...config summary...}, "prompt": [ids], "probe_ids": [ids],
   "positions": [{"probe_logits": [...], "top": [[id, logit], ...], "sum": s, "sumsq": q}],
   "greedy": [ids]}

probe_logits are the logits of a fixed, spread-out set of vocabulary ids at every prompt
position; top holds the 10 largest; sum/sumsq summarise the whole row. greedy continues the
prompt for --greedy tokens (argmax, ties to the lowest id), recomputing the full sequence each
step so no cache can hide a mistake.

Usage (Debian: apt-get install python3-torch python3-numpy):
  /usr/bin/python3 tests/engine/llama_reference.py MODEL_DIR --prompt 1,2,3 --greedy 16 > out.json
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np
import torch


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = data[base + begin:base + end]
        shape = info["shape"]
        dt = info["dtype"]
        if dt == "F32":
            arr = np.frombuffer(raw, dtype="<f4").astype(np.float32)
        elif dt == "F16":
            arr = np.frombuffer(raw, dtype="<f2").astype(np.float32)
        elif dt == "BF16":
            u16 = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            arr = u16.view(np.float32)
        else:
            raise SystemExit(f"{path}: tensor {name}: unsupported dtype {dt}")
        out[name] = torch.from_numpy(arr.reshape(shape).copy())
    return out


def load(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    index = os.path.join(model_dir, "model.safetensors.index.json")
    tensors = {}
    if os.path.exists(index):
        with open(index) as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
        for s in shards:
            tensors.update(read_safetensors(os.path.join(model_dir, s)))
    else:
        tensors = read_safetensors(os.path.join(model_dir, "model.safetensors"))
    return cfg, tensors


def inv_freq(cfg, head_dim):
    theta = float(cfg.get("rope_theta", 10000.0))
    freqs = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    rs = cfg.get("rope_scaling")
    if rs:
        kind = rs.get("rope_type", rs.get("type"))
        if kind == "llama3":
            factor = rs["factor"]
            low = rs.get("low_freq_factor", 1.0)
            high = rs.get("high_freq_factor", 4.0)
            old_ctx = rs.get("original_max_position_embeddings", 8192)
            low_wavelen = old_ctx / low
            high_wavelen = old_ctx / high
            out = []
            for f in freqs.tolist():
                wavelen = 2 * math.pi / f
                if wavelen < high_wavelen:
                    out.append(f)
                elif wavelen > low_wavelen:
                    out.append(f / factor)
                else:
                    smooth = (old_ctx / wavelen - low) / (high - low)
                    out.append((1 - smooth) * f / factor + smooth * f)
            freqs = torch.tensor(out, dtype=torch.float64)
        elif kind == "linear":
            freqs = freqs / rs["factor"]
        else:
            raise SystemExit(f"unsupported rope_scaling {rs}")
    return freqs


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def forward(cfg, w, ids):
    hidden = cfg["hidden_size"]
    heads = cfg["num_attention_heads"]
    kv_heads = cfg.get("num_key_value_heads", heads)
    head_dim = cfg.get("head_dim", hidden // heads)
    eps = cfg.get("rms_norm_eps", 1e-6)
    layers = cfg["num_hidden_layers"]
    n = len(ids)

    def rms(x, weight):
        var = x.pow(2).mean(-1, keepdim=True)
        return x * torch.rsqrt(var + eps) * weight

    pos = torch.arange(n, dtype=torch.float64)
    angles = torch.outer(pos, inv_freq(cfg, head_dim))          # [n, d/2]
    emb = torch.cat((angles, angles), dim=-1)                   # [n, d]
    cos = emb.cos().to(torch.float32)
    sin = emb.sin().to(torch.float32)

    x = w["model.embed_tokens.weight"][torch.tensor(ids)]      # [n, hidden]
    mask = torch.full((n, n), float("-inf")).triu(1)
    for i in range(layers):
        p = f"model.layers.{i}."
        h = rms(x, w[p + "input_layernorm.weight"])
        q = h @ w[p + "self_attn.q_proj.weight"].T
        k = h @ w[p + "self_attn.k_proj.weight"].T
        v = h @ w[p + "self_attn.v_proj.weight"].T
        if p + "self_attn.q_proj.bias" in w:
            q = q + w[p + "self_attn.q_proj.bias"]
            k = k + w[p + "self_attn.k_proj.bias"]
            v = v + w[p + "self_attn.v_proj.bias"]
        q = q.view(n, heads, head_dim).transpose(0, 1)          # [heads, n, d]
        k = k.view(n, kv_heads, head_dim).transpose(0, 1)
        v = v.view(n, kv_heads, head_dim).transpose(0, 1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        group = heads // kv_heads
        k = k.repeat_interleave(group, dim=0)
        v = v.repeat_interleave(group, dim=0)
        scores = q @ k.transpose(1, 2) / math.sqrt(head_dim) + mask
        att = torch.softmax(scores, dim=-1) @ v                  # [heads, n, d]
        att = att.transpose(0, 1).reshape(n, heads * head_dim)
        x = x + att @ w[p + "self_attn.o_proj.weight"].T
        h = rms(x, w[p + "post_attention_layernorm.weight"])
        gate = h @ w[p + "mlp.gate_proj.weight"].T
        up = h @ w[p + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(gate) * up) @ w[p + "mlp.down_proj.weight"].T
    x = rms(x, w["model.norm.weight"])
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    return x @ head.T                                            # [n, vocab]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("--prompt", required=True, help="comma-separated token ids")
    ap.add_argument("--greedy", type=int, default=16)
    ap.add_argument("--probes", type=int, default=64)
    args = ap.parse_args()
    torch.set_num_threads(2)
    cfg, w = load(args.model_dir)
    prompt = [int(t) for t in args.prompt.split(",")]
    vocab = w["model.embed_tokens.weight"].shape[0]
    probe_ids = sorted(set([0, vocab - 1] + [(i * 7919 + 13) % vocab for i in range(args.probes)]))
    with torch.no_grad():
        logits = forward(cfg, w, prompt)
        positions = []
        for row in logits:
            top = torch.topk(row, 10)
            positions.append({
                "probe_logits": [float(row[i]) for i in probe_ids],
                "top": [[int(i), float(v)] for v, i in zip(top.values, top.indices)],
                "sum": float(row.double().sum()),
                "sumsq": float(row.double().pow(2).sum()),
            })
        seq = list(prompt)
        greedy = []
        for _ in range(args.greedy):
            row = forward(cfg, w, seq)[-1]
            best = int(torch.argmax(row))  # first maximum: the lowest id among ties
            greedy.append(best)
            seq.append(best)
    summary = {k: cfg.get(k) for k in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                                       "num_key_value_heads", "intermediate_size", "vocab_size",
                                       "rope_theta", "rope_scaling", "tie_word_embeddings")}
    json.dump({"model": summary, "prompt": prompt, "probe_ids": probe_ids,
               "positions": positions, "greedy": greedy}, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
