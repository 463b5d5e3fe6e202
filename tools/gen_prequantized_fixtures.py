#!/usr/bin/env python3
"""Writes models/testdata/prequantized/{fp8_block,ct_channel,ct_tensor,fbgemm}:
small Llama folders whose linear weights are pre-quantized fp8 in the layouts
the model hub ships, with reference logits from transformers 5.

Each folder is one seeded f32 LlamaForCausalLM (vocab 64, hidden 64, 2
layers, GQA 4/2 heads, intermediate 96), its seven linear weights per layer
quantized to float8_e4m3fn the way each layout's producer does:

  fp8_block   quant_method "fp8" (transformers' FineGrainedFP8Config, the
              Qwen3-*-FP8 layout): absmax / 448 per 16x32 block,
              `weight_scale_inv` [ceil(out/16), ceil(in/32)] f32,
              dequantized = fp8 * weight_scale_inv.
  ct_channel  compressed-tensors "float-quantized", strategy channel (the
              *-FP8-dynamic layout): absmax / 448 per output row,
              `weight_scale` [out, 1] f32; dynamic per-token fp8 input
              activations in the config.
  ct_tensor   compressed-tensors "float-quantized", strategy tensor (W8A16):
              one absmax / 448, `weight_scale` [1] f32; no activations.
  fbgemm      quant_method "fbgemm_fp8": absmax / 448 per row,
              `weight_scale` [out, 1] f32.

Embeddings, norms and lm_head stay f32 (lm_head in each config's ignore
list, as the producers do). Scales are f32 because the source model is f32:
compressed-tensors dequantizes in the scale's dtype, so bf16 scales would
round the dequantized weights to bf16 in the reference.

reference.safetensors holds input.input_ids, input.attention_mask and
output.logits: the logits of transformers 5 loading the folder itself with
AutoModelForCausalLM.from_pretrained (dtype float32, on the CPU, where it
dequantizes: the fp8 quantizer switches to dequantize=True without a GPU,
compressed-tensors gets dequantize=True). fbgemm_fp8 needs a CUDA GPU in
transformers (its quantizer refuses to load otherwise), so its reference is
transformers' LlamaForCausalLM loading the weights dequantized by fbgemm's
convention (fp8 * weight_scale per row) — the same numbers, stated.
Each reference is checked against the dequantized f32 model here
(max relative error < 1e-5) before it is written.

Usage: .venv-ref/bin/python tools/gen_prequantized_fixtures.py
       [--out models/testdata/prequantized]
"""

import argparse
import json
import os
import shutil

import numpy as np
import torch
import transformers as tf
from safetensors.torch import save_file

SEED = 2511
FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0
BLOCK = (16, 32)
LINEARS = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
           "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]


def llama_config():
    return tf.LlamaConfig(
        vocab_size=64, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        rms_norm_eps=1e-5, rope_theta=10000.0, hidden_act="silu",
        tie_word_embeddings=False, attention_bias=False, mlp_bias=False,
        pad_token_id=0, bos_token_id=1, eos_token_id=2)


def base_model():
    torch.manual_seed(SEED)
    model = tf.LlamaForCausalLM(llama_config()).eval()
    gen = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=gen)
            if "norm" in name:
                param.copy_(1 + 0.1 * noise)
            elif "embed_tokens" in name:
                param.copy_(0.5 * noise)
            else:  # Rows of different norms, as trained weights have.
                rows = torch.empty(param.shape[0]).uniform_(-2.3, 0.0, generator=gen).exp()
                param.copy_(noise * rows[:, None] / param.shape[1] ** 0.5)
    return model


def scale_for(absmax):
    absmax = absmax.clamp(min=torch.finfo(torch.float32).tiny * FP8_MAX)
    return absmax / FP8_MAX


def quantize_blocks(w):
    """Per-block absmax / 448 (ragged edge blocks included)."""
    rows, cols = w.shape
    br, bc = BLOCK
    grid = (-(-rows // br), -(-cols // bc))
    scales = torch.empty(grid)
    q = torch.empty_like(w, dtype=FP8)
    for i in range(grid[0]):
        for j in range(grid[1]):
            block = w[i * br:(i + 1) * br, j * bc:(j + 1) * bc]
            s = scale_for(block.abs().max())
            scales[i, j] = s
            q[i * br:(i + 1) * br, j * bc:(j + 1) * bc] = (block / s).to(FP8)
    return q, scales


def quantize_rows(w):
    s = scale_for(w.abs().amax(dim=1, keepdim=True))
    return (w / s).to(FP8), s


def quantize_tensor(w):
    s = scale_for(w.abs().max()).reshape(1)
    return (w / s).to(FP8), s


def dequantize(q, scales, layout):
    q = q.float()
    if layout == "fp8_block":
        br, bc = BLOCK
        full = scales.repeat_interleave(br, 0)[:q.shape[0]].repeat_interleave(bc, 1)
        return q * full[:, :q.shape[1]]
    return q * scales  # [out, 1] or [1]


LAYOUTS = {
    "fp8_block": ("weight_scale_inv", quantize_blocks, {
        "quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
        "weight_block_size": list(BLOCK), "modules_to_not_convert": ["lm_head"]}),
    "fbgemm": ("weight_scale", quantize_rows, {
        "quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0,
        "modules_to_not_convert": ["lm_head"]}),
}


def compressed_tensors_config(strategy, dynamic_inputs):
    from compressed_tensors.quantization import (QuantizationArgs, QuantizationConfig,
                                                 QuantizationScheme)

    weights = QuantizationArgs(num_bits=8, type="float", strategy=strategy,
                               symmetric=True, dynamic=False)
    inputs = (QuantizationArgs(num_bits=8, type="float", strategy="token", symmetric=True,
                               dynamic=True) if dynamic_inputs else None)
    config = QuantizationConfig(
        config_groups={"group_0": QuantizationScheme(
            targets=["Linear"], weights=weights, input_activations=inputs)},
        format="float-quantized", quantization_status="compressed", ignore=["lm_head"])
    dumped = config.model_dump()
    dumped["quant_method"] = "compressed-tensors"
    return dumped


def quantized_state(model, quantize, scale_name):
    state = {}
    for name, tensor in model.state_dict().items():
        module = name.rsplit(".", 1)[0]
        if name.endswith(".weight") and module.split(".", 3)[-1] in LINEARS:
            q, s = quantize(tensor)
            state[name] = q.contiguous()
            state[f"{module}.{scale_name}"] = s.contiguous()
        else:
            state[name] = tensor.contiguous()
    return state


def dequantized_model(state, layout, scale_name):
    model = tf.LlamaForCausalLM(llama_config()).eval()
    plain = {}
    for name, tensor in state.items():
        if name.endswith(scale_name):
            continue
        scale = state.get(name[:-len("weight")] + scale_name)
        plain[name] = tensor.float() if scale is None else dequantize(tensor, scale, layout)
    model.load_state_dict(plain)
    return model


def inputs():
    rng = np.random.default_rng(SEED)
    ids = np.zeros((2, 11), np.int64)
    mask = np.zeros((2, 11), np.int64)
    for b, n in enumerate([11, 6]):
        ids[b, :n] = rng.integers(1, 64, size=n)
        mask[b, :n] = 1
    return torch.from_numpy(ids), torch.from_numpy(mask)


def logits_of(model, ids, mask):
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask).logits.float()


def transformers_load(folder, layout):
    kwargs = {"dtype": torch.float32}
    if layout.startswith("ct_"):
        kwargs["quantization_config"] = tf.CompressedTensorsConfig(dequantize=True)
    model = tf.AutoModelForCausalLM.from_pretrained(folder, **kwargs).eval()
    for name, module in model.named_modules():  # the dequantized load is dense
        if isinstance(module, torch.nn.Linear):
            assert module.weight.dtype == torch.float32, (layout, name, module.weight.dtype)
    return model


def write_folder(out, layout, base, ids, mask):
    if layout in LAYOUTS:
        scale_name, quantize, quantization = LAYOUTS[layout]
    else:
        strategy = {"ct_channel": "channel", "ct_tensor": "tensor"}[layout]
        scale_name, quantize = "weight_scale", {
            "channel": quantize_rows, "tensor": quantize_tensor}[strategy]
        quantization = compressed_tensors_config(strategy, dynamic_inputs=layout == "ct_channel")
    folder = os.path.join(out, layout)
    if os.path.isdir(folder):
        shutil.rmtree(folder)
    os.makedirs(folder)
    state = quantized_state(base, quantize, scale_name)
    save_file(state, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    config = llama_config().to_dict()
    config["architectures"] = ["LlamaForCausalLM"]
    config["dtype"] = "float32"
    config["quantization_config"] = quantization
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")

    expected = logits_of(dequantized_model(state, layout, scale_name), ids, mask)
    if layout == "fbgemm":
        reference = expected  # transformers' fbgemm_fp8 loads only on a GPU.
        how = "transformers LlamaForCausalLM on the fbgemm-dequantized weights"
    else:
        reference = logits_of(transformers_load(folder, layout), ids, mask)
        how = "transformers AutoModelForCausalLM.from_pretrained(folder), dequantized"
    error = ((reference - expected).abs().max() / expected.abs().max()).item()
    assert error < 1e-5, (layout, error)
    f32 = logits_of(base, ids, mask)
    cosine = torch.nn.functional.cosine_similarity(reference.flatten(), f32.flatten(), dim=0)
    save_file({"input.input_ids": ids, "input.attention_mask": mask,
               "output.logits": reference.contiguous()},
              os.path.join(folder, "reference.safetensors"),
              metadata={"generator": "tools/gen_prequantized_fixtures.py", "reference": how,
                        "transformers": tf.__version__, "torch": torch.__version__})
    for name in os.listdir(folder):
        os.chmod(os.path.join(folder, name), 0o644)
    size = os.path.getsize(os.path.join(folder, "model.safetensors"))
    print(f"{layout}: {size} bytes, reference vs own dequantization {error:.1e}, "
          f"cosine vs the f32 model {cosine:.6f} ({how})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="models/testdata/prequantized")
    args = parser.parse_args()
    torch.set_num_threads(1)
    base = base_model()
    ids, mask = inputs()
    for layout in ["fp8_block", "ct_channel", "ct_tensor", "fbgemm"]:
        write_folder(args.out, layout, base, ids, mask)


if __name__ == "__main__":
    main()
