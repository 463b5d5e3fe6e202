#!/usr/bin/python3
"""Writes a Llama-shaped bf16 checkpoint folder for the lazy-load benchmarks.

    python3 benchmarks/drivers/gen_llama_checkpoint.py --shape 1b --out /tmp/castserve-bench/llama-1b
    python3 benchmarks/drivers/gen_llama_checkpoint.py --shape 8b --out /tmp/castserve-bench/llama-8b

The folder looks like a Hugging Face one: config.json (LlamaConfig keys),
model-0000N-of-0000M.safetensors and model.safetensors.index.json. Shards are
filled in the model's state-dict order up to --max-shard-gb (as
transformers' save_pretrained does), and inside a shard the tensors are
sorted by name (as the safetensors serializer does), so the on-disk order is
that of real checkpoints: layers.10 comes before layers.2.

Weights are seeded and realistic in scale (projections and embeddings
N(0, 0.02^2), RMSNorm gains near 1), but not independent: a pool of random
bf16 values is drawn once and each tensor is a slice of it at its own offset,
tiled. The values do not matter for timing; they are finite and of the size a
trained model has. An 8B-shaped checkpoint (16 GB) takes about as long as the
disk needs to write it. Weights belong under /tmp, never in the repository.

Needs numpy only (no torch).
"""

import argparse
import json
import os
import struct
import sys
import time

import numpy as np

SHAPES = {
    # Llama-3.2-1B.
    "1b": dict(hidden_size=2048, num_hidden_layers=16, intermediate_size=8192,
               num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
               tie_word_embeddings=True, max_position_embeddings=131072,
               rope_scaling={"factor": 32.0, "high_freq_factor": 4.0,
                             "low_freq_factor": 1.0,
                             "original_max_position_embeddings": 8192,
                             "rope_type": "llama3"},
               default_max_shard_gb=2.0),
    # A small Llama for quick serving-path measurements (prefix caching's
    # time to first token): Llama-1B's head dim and grouping, 8 layers.
    "small": dict(hidden_size=512, num_hidden_layers=8, intermediate_size=1408,
                  num_attention_heads=8, num_key_value_heads=2,
                  vocab_size=32000, tie_word_embeddings=True,
                  max_position_embeddings=4096, rope_scaling=None,
                  default_max_shard_gb=1.0),
    # Llama-3-8B.
    "8b": dict(hidden_size=4096, num_hidden_layers=32, intermediate_size=14336,
               num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
               tie_word_embeddings=False, max_position_embeddings=8192,
               rope_scaling=None, default_max_shard_gb=5.0),
}

POOL_ELEMENTS = 64 << 20  # 128 MiB of bf16.
WEIGHT_STD = 0.02
BF16_ONE = 0x3F80


def config_json(shape):
    s = SHAPES[shape]
    return {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        # Llama 3's ids; within the small shape's vocabulary there.
        "bos_token_id": 128000 if s["vocab_size"] > 128001 else 1,
        "eos_token_id": 128001 if s["vocab_size"] > 128001 else 2,
        "head_dim": s["hidden_size"] // s["num_attention_heads"],
        "hidden_act": "silu",
        "hidden_size": s["hidden_size"],
        "initializer_range": WEIGHT_STD,
        "intermediate_size": s["intermediate_size"],
        "max_position_embeddings": s["max_position_embeddings"],
        "mlp_bias": False,
        "model_type": "llama",
        "num_attention_heads": s["num_attention_heads"],
        "num_hidden_layers": s["num_hidden_layers"],
        "num_key_value_heads": s["num_key_value_heads"],
        "pretraining_tp": 1,
        "rms_norm_eps": 1e-05,
        "rope_scaling": s["rope_scaling"],
        "rope_theta": 500000.0,
        "tie_word_embeddings": s["tie_word_embeddings"],
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "vocab_size": s["vocab_size"],
    }


def state_dict_shapes(shape):
    """(name, shape, kind) in LlamaForCausalLM.state_dict() order."""
    s = SHAPES[shape]
    h, m, v = s["hidden_size"], s["intermediate_size"], s["vocab_size"]
    kv = s["num_key_value_heads"] * (h // s["num_attention_heads"])
    out = [("model.embed_tokens.weight", (v, h), "matrix")]
    for i in range(s["num_hidden_layers"]):
        p = "model.layers.%d." % i
        out += [(p + "self_attn.q_proj.weight", (h, h), "matrix"),
                (p + "self_attn.k_proj.weight", (kv, h), "matrix"),
                (p + "self_attn.v_proj.weight", (kv, h), "matrix"),
                (p + "self_attn.o_proj.weight", (h, h), "matrix"),
                (p + "mlp.gate_proj.weight", (m, h), "matrix"),
                (p + "mlp.up_proj.weight", (m, h), "matrix"),
                (p + "mlp.down_proj.weight", (h, m), "matrix"),
                (p + "input_layernorm.weight", (h,), "norm"),
                (p + "post_attention_layernorm.weight", (h,), "norm")]
    out.append(("model.norm.weight", (h,), "norm"))
    if not s["tie_word_embeddings"]:
        out.append(("lm_head.weight", (v, h), "matrix"))
    return out


def to_bf16_bits(values):
    """float32 -> bf16 bit patterns (uint16), rounding to nearest even."""
    bits = values.astype(np.float32).view(np.uint32)
    rounded = bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))
    return (rounded >> 16).astype(np.uint16)


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def shard_tensors(tensors, max_shard_bytes):
    shards, current, current_bytes = [], [], 0
    for t in tensors:
        size = numel(t[1]) * 2
        if current and current_bytes + size > max_shard_bytes:
            shards.append(current)
            current, current_bytes = [], 0
        current.append(t)
        current_bytes += size
    if current:
        shards.append(current)
    return [sorted(shard, key=lambda t: t[0]) for shard in shards]


def tensor_chunks(name, kind, count, pool, rng):
    """Yields the tensor's bf16 data as pool slices (no copy for matrices)."""
    if kind == "norm":
        gains = 1.0 + 0.05 * rng.standard_normal(count, dtype=np.float32)
        yield to_bf16_bits(gains)
        return
    offset = int(rng.integers(0, len(pool)))
    remaining = count
    while remaining:
        take = min(remaining, len(pool) - offset)
        yield pool[offset:offset + take]
        remaining -= take
        offset = 0


def write_shard(path, tensors, pool, rng):
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape, _ in tensors:
        size = numel(shape) * 2
        header[name] = {"dtype": "BF16", "shape": list(shape),
                        "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # Data starts 8-byte aligned.
    with open(path, "wb", buffering=0) as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for name, shape, kind in tensors:
            for chunk in tensor_chunks(name, kind, numel(shape), pool, rng):
                f.write(memoryview(chunk).cast("B"))
    return offset


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-shard-gb", type=float, default=None,
                        help="decimal GB per shard (8b: 5, 1b: 2)")
    parser.add_argument("--force", action="store_true",
                        help="rewrite even if the folder looks complete")
    args = parser.parse_args()

    index_path = os.path.join(args.out, "model.safetensors.index.json")
    if os.path.exists(index_path) and not args.force:
        print("%s exists; --force to rewrite" % index_path)
        return 0
    os.makedirs(args.out, exist_ok=True)
    start = time.time()
    rng = np.random.default_rng(args.seed)
    pool = to_bf16_bits(
        WEIGHT_STD * rng.standard_normal(POOL_ELEMENTS, dtype=np.float32))
    max_gb = args.max_shard_gb or SHAPES[args.shape]["default_max_shard_gb"]
    shards = shard_tensors(state_dict_shapes(args.shape), int(max_gb * 1e9))
    weight_map, total = {}, 0
    for i, tensors in enumerate(shards):
        name = "model-%05d-of-%05d.safetensors" % (i + 1, len(shards))
        total += write_shard(os.path.join(args.out, name), tensors, pool, rng)
        weight_map.update({t[0]: name for t in tensors})
        print("wrote %s (%d tensors)" % (name, len(tensors)), flush=True)
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config_json(args.shape), f, indent=2)
    with open(index_path, "w") as f:
        json.dump({"metadata": {"total_size": total},
                   "weight_map": dict(sorted(weight_map.items()))}, f, indent=2)
    seconds = time.time() - start
    print("%s: %.2f GB of bf16 in %d shards, %.1f s (%.2f GB/s)" %
          (args.out, total / 1e9, len(shards), seconds, total / 1e9 / seconds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
