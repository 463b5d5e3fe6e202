#!/usr/bin/env python3
"""Writes an FP8 copy of a Llama-shaped checkpoint folder in the hub's block
layout (quant_method "fp8", as the Qwen3-*-FP8 releases): every q/k/v/o and
gate/up/down projection becomes float8_e4m3fn with a [ceil(out/128),
ceil(in/128)] f32 `weight_scale_inv` (absmax / 448 per 128x128 block);
embeddings and norms stay as they are; config.json gains the
quantization_config. For BENCHMARKS.md's FP8 entry:

    python3 benchmarks/drivers/gen_llama_checkpoint.py --shape 1b --out /tmp/castserve-bench/llama-1b
    .venv-ref/bin/python benchmarks/drivers/quantize_fp8_block.py \\
        /tmp/castserve-bench/llama-1b /tmp/castserve-bench/llama-1b-fp8

With a third argument "channel", the compressed-tensors float-quantized
layout instead (one absmax / 448 f32 `weight_scale` per output row, [out,
1]), to compare the two scalings' decode on the same weights.

Needs torch and safetensors. Weights belong under /tmp, never in the
repository.
"""

import json
import os
import sys

import torch
from safetensors import safe_open
from safetensors.torch import save_file

BLOCK = 128
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def quantize(weight):
    w = weight.float()
    rows, cols = w.shape
    grid_rows, grid_cols = -(-rows // BLOCK), -(-cols // BLOCK)
    padded = torch.zeros(grid_rows * BLOCK, grid_cols * BLOCK)
    padded[:rows, :cols] = w
    blocks = padded.reshape(grid_rows, BLOCK, grid_cols, BLOCK)
    absmax = blocks.abs().amax(dim=(1, 3))
    scale = (absmax / 448.0).clamp(min=torch.finfo(torch.float32).tiny)
    q = (blocks / scale[:, None, :, None]).reshape(padded.shape)[:rows, :cols]
    return q.to(torch.float8_e4m3fn).contiguous(), scale.contiguous()


def quantize_rows(weight):
    w = weight.float()
    scale = (w.abs().amax(dim=1, keepdim=True) / 448.0).clamp(
        min=torch.finfo(torch.float32).tiny)
    return (w / scale).to(torch.float8_e4m3fn).contiguous(), scale.contiguous()


CHANNEL_CONFIG = {
    "quant_method": "compressed-tensors", "format": "float-quantized",
    "quantization_status": "compressed", "ignore": ["lm_head"],
    "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
        "num_bits": 8, "type": "float", "symmetric": True, "strategy": "channel",
        "dynamic": False}}}}


def main(source, out, layout="block"):
    if layout not in ("block", "channel"):
        sys.exit(f"quantize_fp8_block: layout must be block or channel, not {layout!r}")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(source, "model.safetensors.index.json")) as f:
        index = json.load(f)
    new_map = {}
    for shard in sorted(set(index["weight_map"].values())):
        tensors = {}
        with safe_open(os.path.join(source, shard), "pt") as f:
            for name in f.keys():
                tensor = f.get_tensor(name)
                module = name.rsplit(".", 2)
                if name.endswith(".weight") and module[-2] in PROJECTIONS:
                    if layout == "channel":
                        tensors[name], scale = quantize_rows(tensor)
                        tensors[name[:-len("weight")] + "weight_scale"] = scale
                    else:
                        tensors[name], scale = quantize(tensor)
                        tensors[name[:-len("weight")] + "weight_scale_inv"] = scale
                else:
                    tensors[name] = tensor
        save_file(tensors, os.path.join(out, shard), metadata={"format": "pt"})
        for name in tensors:
            new_map[name] = shard
        print(f"{shard}: {len(tensors)} tensors", flush=True)
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": new_map}, f, indent=2)
    with open(os.path.join(source, "config.json")) as f:
        config = json.load(f)
    config["quantization_config"] = CHANNEL_CONFIG if layout == "channel" else {
        "quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
        "weight_block_size": [BLOCK, BLOCK]}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)


if __name__ == "__main__":
    main(*sys.argv[1:4])
