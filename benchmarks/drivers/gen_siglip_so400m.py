#!/usr/bin/env python3
"""Writes a SigLIP-so400m-shaped vision checkpoint folder with seeded random weights.

The shape is google/siglip-so400m-patch14-384's vision tower: hidden 1152, 27
layers, intermediate 4304, 16 heads, patch 14, image 384, with the
attention-pooling head (about 428 M parameters, 1.6 GB of f32). The weights are
random but of realistic scale (projections N(0, 0.02), layer norms near 1,
small biases), so that fp8 storage meets the value ranges it would meet in a
real checkpoint. Each tensor has its own seed (seed + index in name order), so
the output is byte-for-byte the same on every run.

Usage:
  python3 benchmarks/drivers/gen_siglip_so400m.py [OUT_DIR] [--image-size N]
      [--layers N] [--seed N]

OUT_DIR defaults to /tmp/castserve_bench/siglip_so400m. Needs only numpy.
Never commit the output: it is 1.6 GB.
"""

import argparse
import json
import os
import struct
import sys
import time

import numpy as np

HIDDEN = 1152
INTERMEDIATE = 4304
HEADS = 16
PATCH = 14
CHANNELS = 3


def config_json(image_size, layers):
    return {
        "architectures": ["SiglipVisionModel"],
        "attention_dropout": 0.0,
        "hidden_act": "gelu_pytorch_tanh",
        "hidden_size": HIDDEN,
        "image_size": image_size,
        "intermediate_size": INTERMEDIATE,
        "layer_norm_eps": 1e-06,
        "model_type": "siglip_vision_model",
        "num_attention_heads": HEADS,
        "num_channels": CHANNELS,
        "num_hidden_layers": layers,
        "patch_size": PATCH,
        "torch_dtype": "float32",
    }


def tensor_specs(image_size, layers):
    """(name, shape, kind) for every tensor; kind picks the initialisation."""
    # The patch convolution drops the remainder: 384 -> 27 x 27 patches.
    patches = (image_size // PATCH) ** 2
    specs = [
        ("vision_model.embeddings.patch_embedding.weight",
         (HIDDEN, CHANNELS, PATCH, PATCH), "conv"),
        ("vision_model.embeddings.patch_embedding.bias", (HIDDEN,), "bias"),
        ("vision_model.embeddings.position_embedding.weight",
         (patches, HIDDEN), "proj"),
    ]

    def linear(name, out_features, in_features):
        return [(name + ".weight", (out_features, in_features), "proj"),
                (name + ".bias", (out_features,), "bias")]

    def layer_norm(name):
        return [(name + ".weight", (HIDDEN,), "norm_weight"),
                (name + ".bias", (HIDDEN,), "bias")]

    def mlp(name):
        return (linear(name + ".fc1", INTERMEDIATE, HIDDEN) +
                linear(name + ".fc2", HIDDEN, INTERMEDIATE))

    for i in range(layers):
        prefix = f"vision_model.encoder.layers.{i}"
        specs += layer_norm(prefix + ".layer_norm1")
        for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
            specs += linear(f"{prefix}.self_attn.{proj}", HIDDEN, HIDDEN)
        specs += layer_norm(prefix + ".layer_norm2")
        specs += mlp(prefix + ".mlp")
    specs += layer_norm("vision_model.post_layernorm")
    head = "vision_model.head"
    specs += [
        (head + ".probe", (1, 1, HIDDEN), "proj"),
        (head + ".attention.in_proj_weight", (3 * HIDDEN, HIDDEN), "proj"),
        (head + ".attention.in_proj_bias", (3 * HIDDEN,), "bias"),
    ]
    specs += linear(head + ".attention.out_proj", HIDDEN, HIDDEN)
    specs += layer_norm(head + ".layernorm")
    specs += mlp(head + ".mlp")
    return sorted(specs)  # safetensors files list keys sorted, as HF writes.


def make_tensor(shape, kind, rng):
    values = rng.standard_normal(int(np.prod(shape)), dtype=np.float32)
    if kind == "proj":
        values *= 0.02
    elif kind == "conv":
        values *= 1.0 / np.sqrt(CHANNELS * PATCH * PATCH)
    elif kind == "bias":
        values *= 0.01
    elif kind == "norm_weight":
        values *= 0.02
        values += 1.0
    return values


def write_checkpoint(out_dir, image_size, layers, seed):
    specs = tensor_specs(image_size, layers)
    header = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape, _ in specs:
        nbytes = 4 * int(np.prod(shape))
        header[name] = {"dtype": "F32", "shape": list(shape),
                        "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    header_bytes = json.dumps(header, separators=(",", ":")).encode()
    header_bytes += b" " * (-len(header_bytes) % 8)  # Data 8-byte aligned.
    path = os.path.join(out_dir, "model.safetensors")
    tmp_path = path + ".tmp"
    with open(tmp_path, "wb") as f:
        f.write(struct.pack("<Q", len(header_bytes)))
        f.write(header_bytes)
        for index, (name, shape, kind) in enumerate(specs):
            rng = np.random.default_rng(seed + index)
            f.write(make_tensor(shape, kind, rng).astype("<f4").tobytes())
    os.replace(tmp_path, path)
    num_params = sum(int(np.prod(shape)) for _, shape, _ in specs)
    return num_params, offset


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", nargs="?",
                        default="/tmp/castserve_bench/siglip_so400m")
    parser.add_argument("--image-size", type=int, default=384)
    parser.add_argument("--layers", type=int, default=27)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.image_size < PATCH:
        sys.exit(f"--image-size must be at least {PATCH}")
    os.makedirs(args.out_dir, exist_ok=True)
    start = time.time()
    with open(os.path.join(args.out_dir, "config.json"), "w") as f:
        json.dump(config_json(args.image_size, args.layers), f, indent=2)
        f.write("\n")
    num_params, data_bytes = write_checkpoint(
        args.out_dir, args.image_size, args.layers, args.seed)
    print(f"wrote {args.out_dir}: {num_params / 1e6:.2f} M parameters, "
          f"{data_bytes / 2**20:.2f} MiB of f32, {time.time() - start:.1f} s")


if __name__ == "__main__":
    main()
