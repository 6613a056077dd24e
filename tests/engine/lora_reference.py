#!/usr/bin/python3
"""Independent reference for the engine's LoRA adapters, written directly in PyTorch.

Runs the Llama forward pass of llama_reference.py (same directory: its safetensors reader, RoPE
tables and architecture) with a PEFT LoRA adapter applied the way PEFT's LoraLayer does it:
every adapted linear layer returns

    y = x W^T + (x A^T B^T) * scale,   scale = lora_alpha / r   (lora_alpha / sqrt(r) with use_rslora)

with A = ...lora_A.weight [r, in] and B = ...lora_B.weight [out, r] read from
adapter_model.safetensors. Without --adapter it computes the bare base model. The output is the
fixture format of llama_reference.py plus an "adapter" summary:

  {"model": {...}, "adapter": {"r", "lora_alpha", "use_rslora", "scale", "target_modules",
   "modules"}, "prompt": [...], "probe_ids": [...], "positions": [...], "greedy": [...]}

Usage (Debian: apt-get install python3-torch python3-numpy):
  /usr/bin/python3 tests/engine/lora_reference.py MODEL_DIR --adapter ADAPTER_DIR \
      --prompt 1,2,3 --greedy 12 > out.json
"""
import argparse
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_reference as base  # noqa: E402

PREFIX = "base_model.model."
SUPPORTED = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def load_adapter(adapter_dir):
    with open(os.path.join(adapter_dir, "adapter_config.json")) as f:
        cfg = json.load(f)
    if cfg.get("fan_in_fan_out") or cfg.get("bias", "none") != "none" or cfg.get("modules_to_save"):
        raise SystemExit(f"{adapter_dir}: options outside plain LoRA are not modelled here")
    r = cfg["r"]
    alpha = cfg["lora_alpha"]
    scale = alpha / math.sqrt(r) if cfg.get("use_rslora") else alpha / r
    tensors = base.read_safetensors(os.path.join(adapter_dir, "adapter_model.safetensors"))
    modules = {}
    for name, t in tensors.items():
        if not name.startswith(PREFIX):
            raise SystemExit(f"{adapter_dir}: unexpected tensor {name}")
        key = name[len(PREFIX):]
        for part in ("A", "B"):
            suffix = f".lora_{part}.weight"
            if key.endswith(suffix):
                modules.setdefault(key[:-len(suffix)], {})[part] = t
                break
        else:
            raise SystemExit(f"{adapter_dir}: unexpected tensor {name}")
    for key, ab in modules.items():
        if set(ab) != {"A", "B"} or key.rsplit(".", 1)[-1] not in SUPPORTED:
            raise SystemExit(f"{adapter_dir}: incomplete or unsupported module {key}")
    summary = {"r": r, "lora_alpha": alpha, "use_rslora": bool(cfg.get("use_rslora")), "scale": scale,
               "target_modules": cfg["target_modules"], "modules": len(modules)}
    return modules, scale, summary


def forward(cfg, w, ids, lora, scale):
    """llama_reference.forward with every projection going through linear()."""
    hidden = cfg["hidden_size"]
    heads = cfg["num_attention_heads"]
    kv_heads = cfg.get("num_key_value_heads", heads)
    head_dim = cfg.get("head_dim", hidden // heads)
    eps = cfg.get("rms_norm_eps", 1e-6)
    n = len(ids)

    def rms(x, weight):
        var = x.pow(2).mean(-1, keepdim=True)
        return x * torch.rsqrt(var + eps) * weight

    def linear(x, module):
        y = x @ w[module + ".weight"].T
        if module + ".bias" in w:
            y = y + w[module + ".bias"]
        ab = lora.get(module)
        if ab is not None:
            y = y + (x @ ab["A"].T @ ab["B"].T) * scale
        return y

    pos = torch.arange(n, dtype=torch.float64)
    angles = torch.outer(pos, base.inv_freq(cfg, head_dim))
    emb = torch.cat((angles, angles), dim=-1)
    cos = emb.cos().to(torch.float32)
    sin = emb.sin().to(torch.float32)

    x = w["model.embed_tokens.weight"][torch.tensor(ids)]
    mask = torch.full((n, n), float("-inf")).triu(1)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms(x, w[p + "input_layernorm.weight"])
        q = linear(h, p + "self_attn.q_proj").view(n, heads, head_dim).transpose(0, 1)
        k = linear(h, p + "self_attn.k_proj").view(n, kv_heads, head_dim).transpose(0, 1)
        v = linear(h, p + "self_attn.v_proj").view(n, kv_heads, head_dim).transpose(0, 1)
        q = q * cos + base.rotate_half(q) * sin
        k = k * cos + base.rotate_half(k) * sin
        group = heads // kv_heads
        k = k.repeat_interleave(group, dim=0)
        v = v.repeat_interleave(group, dim=0)
        scores = q @ k.transpose(1, 2) / math.sqrt(head_dim) + mask
        att = (torch.softmax(scores, dim=-1) @ v).transpose(0, 1).reshape(n, heads * head_dim)
        x = x + linear(att, p + "self_attn.o_proj")
        h = rms(x, w[p + "post_attention_layernorm.weight"])
        act = torch.nn.functional.silu(linear(h, p + "mlp.gate_proj")) * linear(h, p + "mlp.up_proj")
        x = x + linear(act, p + "mlp.down_proj")
    x = rms(x, w["model.norm.weight"])
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    return x @ head.T


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("--adapter", help="PEFT adapter directory; none: the base model")
    ap.add_argument("--prompt", required=True, help="comma-separated token ids")
    ap.add_argument("--greedy", type=int, default=16)
    ap.add_argument("--probes", type=int, default=64)
    args = ap.parse_args()
    torch.set_num_threads(2)
    cfg, w = base.load(args.model_dir)
    lora, scale, summary = ({}, 0.0, None)
    if args.adapter:
        lora, scale, summary = load_adapter(args.adapter)
    prompt = [int(t) for t in args.prompt.split(",")]
    vocab = w["model.embed_tokens.weight"].shape[0]
    probe_ids = sorted(set([0, vocab - 1] + [(i * 7919 + 13) % vocab for i in range(args.probes)]))
    with torch.no_grad():
        logits = forward(cfg, w, prompt, lora, scale)
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
            row = forward(cfg, w, seq, lora, scale)[-1]
            best = int(torch.argmax(row))
            greedy.append(best)
            seq.append(best)
    model = {k: cfg.get(k) for k in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                                     "num_key_value_heads", "intermediate_size", "vocab_size",
                                     "rope_theta", "rope_scaling", "tie_word_embeddings")}
    json.dump({"model": model, "adapter": summary, "prompt": prompt, "probe_ids": probe_ids,
               "positions": positions, "greedy": greedy}, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
