#!/usr/bin/python3
"""Writes the small checkpoint fixtures under casting/formats/testdata/ckpt_*.

Run once with Debian's python3 and python3-torch (LibTorch 1.13):
    /usr/bin/python3 tools/gen_checkpoint_fixtures.py
and commit the results; the C++ tests read them without Python.

Files written:
  ckpt_mixed.safetensors        every common dtype, one tensor at an
                                unaligned offset, with __metadata__
  ckpt_sharded.index.json       a 2-shard set (index + two shards)
  ckpt_sharded-0000{1,2}-of-00002.safetensors
  ckpt_state_dict.bin           torch.save of a small module's state_dict
  ckpt_noncontiguous.pt         torch.save of a transposed (strided) tensor
  ckpt_bad_global.pt            torch.save of a dict holding a Python object
  ckpt_expected.txt             one line per tensor:
                                file name dtype shape values...
                                (values as exact decimal text)
"""

import collections
import fractions
import json
import os
import struct

import torch

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                   "casting", "formats", "testdata")

# (name, safetensors dtype, torch dtype or None for raw bytes, shape, values)
MIXED = [
    ("int8_first", "I8", torch.int8, [5], [-128, -1, 0, 1, 127]),
    # Starts at byte 5 of the data region: not 4-byte aligned.
    ("f32_unaligned", "F32", torch.float32, [2, 3],
     [1.5, -2.25, 0.0, 3.0e-3, 1e10, -7.0]),
    ("f16", "F16", torch.float16, [4], [1.0, -0.5, 65504.0, 6.103515625e-05]),
    ("bf16", "BF16", torch.bfloat16, [3], [1.0, -3.0, 0.0078125]),
    ("f64", "F64", torch.float64, [2], [3.141592653589793, -1e-300]),
    ("i64", "I64", torch.int64, [2], [-9007199254740993, 42]),
    ("i32", "I32", torch.int32, [2], [-2147483648, 7]),
    ("i16", "I16", torch.int16, [2], [-32768, 5]),
    ("u8", "U8", torch.uint8, [3], [0, 128, 255]),
    ("bool", "BOOL", torch.bool, [4], [True, False, False, True]),
    # fp8 codes as raw bytes: the values are the codes (decoding is the
    # codec's job, not the reader's).
    ("f8_e4m3", "F8_E4M3", None, [4], [0x38, 0xB8, 0x7E, 0x01]),
    ("f8_e5m2", "F8_E5M2", None, [2, 1], [0x3C, 0xFB]),
    ("u16", "U16", None, [1], [0xBEEF]),
    ("empty", "F32", torch.float32, [0, 4], []),
]


def tensor_bytes(dtype, torch_dtype, values, shape):
    if torch_dtype is None:
        if dtype == "U16":
            return struct.pack("<%dH" % len(values), *values)
        return bytes(values)
    t = torch.tensor(values, dtype=torch_dtype).reshape(shape)
    if torch_dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().tobytes()
    return t.numpy().tobytes()


def value_text(v):
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, float):
        return repr(v)
    return str(v)


def write_safetensors(path, tensors, metadata=None):
    header = {}
    if metadata:
        header["__metadata__"] = metadata
    data = b""
    for name, dtype, torch_dtype, shape, values in tensors:
        raw = tensor_bytes(dtype, torch_dtype, values, shape)
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def expected_lines(file_name, tensors):
    lines = []
    for name, dtype, _, shape, values in tensors:
        lines.append(" ".join([file_name, name, dtype,
                               "x".join(map(str, shape)) or "scalar"] +
                              [value_text(v) for v in values]))
    return lines


def sharded():
    shard1 = [("model.embed", "F32", torch.float32, [2, 2],
               [0.25, 0.5, 0.75, 1.0]),
              ("model.norm", "BF16", torch.bfloat16, [2], [1.0, 2.0])]
    shard2 = [("lm_head", "F16", torch.float16, [2, 2], [-1.0, 2.0, -3.0, 4.0])]
    names = ["ckpt_sharded-00001-of-00002.safetensors",
             "ckpt_sharded-00002-of-00002.safetensors"]
    write_safetensors(os.path.join(OUT, names[0]), shard1, {"format": "pt"})
    write_safetensors(os.path.join(OUT, names[1]), shard2, {"format": "pt"})
    weight_map = {t[0]: names[0] for t in shard1}
    weight_map.update({t[0]: names[1] for t in shard2})
    with open(os.path.join(OUT, "ckpt_sharded.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 30}, "weight_map": weight_map},
                  f, indent=2)
    return (expected_lines("ckpt_sharded.index.json", shard1) +
            expected_lines("ckpt_sharded.index.json", shard2))


def state_dict():
    torch.manual_seed(0)
    module = torch.nn.Sequential(collections.OrderedDict([
        ("proj", torch.nn.Linear(3, 2)),
        ("norm", torch.nn.LayerNorm(2)),
    ]))
    sd = module.state_dict()
    sd["proj.weight"] = torch.round(sd["proj.weight"] * 64) / 64
    sd["proj.bias"] = sd["proj.bias"].to(torch.bfloat16)
    sd["norm.weight"] = torch.tensor([1.0, 0.5], dtype=torch.float16)
    sd["steps"] = torch.tensor([3, -4, 5], dtype=torch.int64)
    # Two views sharing one storage: a contiguous slice at an element offset.
    base = torch.arange(6, dtype=torch.float32)
    sd["shared.tail"] = base[2:]
    sd["shared.head"] = base[:2]
    # A tied weight: the same storage under two names.
    sd["tied.weight"] = sd["proj.weight"]
    torch.save(sd, os.path.join(OUT, "ckpt_state_dict.bin"))
    dtype_names = {torch.float32: "F32", torch.bfloat16: "BF16",
                   torch.float16: "F16", torch.int64: "I64"}
    lines = []
    for name, t in sd.items():
        values = t.float().flatten().tolist() if t.is_floating_point() else \
            t.flatten().tolist()
        lines.append(" ".join(["ckpt_state_dict.bin", name,
                               dtype_names[t.dtype],
                               "x".join(map(str, t.shape))] +
                              [value_text(v) for v in values]))
    torch.save({"t": torch.arange(6.0).reshape(2, 3).t()},
               os.path.join(OUT, "ckpt_noncontiguous.pt"))
    torch.save({"t": torch.zeros(2), "when": fractions.Fraction(1, 3)},
               os.path.join(OUT, "ckpt_bad_global.pt"))
    return lines


def main():
    os.makedirs(OUT, exist_ok=True)
    write_safetensors(os.path.join(OUT, "ckpt_mixed.safetensors"), MIXED,
                      {"format": "pt", "note": "castserve fixture"})
    lines = expected_lines("ckpt_mixed.safetensors", MIXED)
    lines += sharded()
    lines += state_dict()
    with open(os.path.join(OUT, "ckpt_expected.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
