#!/usr/bin/env python3
"""Builds the decoder fixtures of the architectures added on the shared decoder
blocks (models/decoder/, models/architectures/): qwen3, gemma3_text, phi3.

Each is a small, randomly initialised transformers 5 model (fixed seed) saved
with save_pretrained into models/testdata/<name>/ together with:

  reference.safetensors             inputs, f32 logits of the f32 model
                                    (eager attention) and the logits of the
                                    model whose castable weights went through
                                    each storage format and back
                                    (roundtrip.<FORMAT>.output.logits), as
                                    tools/gen_model_fixtures.py writes them
  generation_reference.json         greedy generate() from two prompts, and a
                                    forced-EOS case
  generation_batch_reference.json   one batched, left-padded greedy generate()
  generation_config.json            written by save_pretrained
  generation_reference.F8_E4M3FN_per_row.json
                                    greedy generate() of the same prompts by
                                    the model whose castable weights went
                                    through F8_E4M3FN with per-row scales
                                    (what layerwise casting computes)

The round trips, the casting decisions and the generation references reuse
tools/gen_model_fixtures.py and tools/gen_generation_references.py, so the
C++ tests read these fixtures exactly as the llama/mistral/qwen2 ones.

Run with the reference venv (torch 2.11, transformers 5.x, ml_dtypes):
  .venv-ref/bin/python tools/gen_decoder_fixtures.py [--only NAME ...]
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_generation_references as generation  # noqa: E402
import gen_model_fixtures as fixtures  # noqa: E402

OUT = os.path.join(fixtures.REPO_ROOT, "models", "testdata")
SEEDS = {"qwen3": 1007, "gemma3_text": 1008, "phi3": 1009}
GENERATION_SEEDS = {"qwen3": 2004, "gemma3_text": 2005, "phi3": 2006}


def build(name):
    """(model, forward inputs, notes) for fixture `name`."""
    import torch
    import transformers as tf

    seed = SEEDS[name]
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    common = dict(attn_implementation="eager", pad_token_id=0, bos_token_id=1,
                  eos_token_id=2)
    if name == "qwen3":
        # head_dim 16 != hidden / heads (8): q/k norms over an explicit head.
        config = tf.Qwen3Config(
            vocab_size=192, hidden_size=32, intermediate_size=80, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            max_position_embeddings=128, rms_norm_eps=1e-6,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
            attention_bias=False, use_sliding_window=False, hidden_act="silu",
            tie_word_embeddings=False, **common)
        model = tf.Qwen3ForCausalLM(config)
        lengths = [13, 7]
        notes = ("model.safetensors; q_norm/k_norm per head (head_dim 16, hidden 32), "
                 "no biases, GQA 4/2, rope_theta 1e6, untied lm_head")
    elif name == "gemma3_text":
        # Four layers: sliding, sliding, global, sliding; a window of 5
        # tokens (shorter than the prompts), a linear-scaled global rope and
        # a local rope of its own, both soft caps set (transformers 5 applies
        # the final one; its Gemma3Attention ignores attn_logit_softcapping).
        config = tf.Gemma3TextConfig(
            vocab_size=160, hidden_size=48, intermediate_size=96, num_hidden_layers=4,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            max_position_embeddings=128, rms_norm_eps=1e-6, query_pre_attn_scalar=24,
            sliding_window=5,
            layer_types=["sliding_attention", "sliding_attention", "full_attention",
                         "sliding_attention"],
            rope_parameters={
                "full_attention": {"rope_type": "linear", "factor": 2.0,
                                   "rope_theta": 1000000.0},
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
            attn_logit_softcapping=8.0, final_logit_softcapping=6.0,
            hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True, **common)
        model = tf.Gemma3ForCausalLM(config)
        lengths = [12, 6]
        notes = ("model.safetensors; tied embeddings scaled by sqrt(48); layers "
                 "sliding/sliding/full/sliding, sliding_window 5; +1-offset RMSNorms "
                 "before and after attention and MLP, q/k norms; query_pre_attn_scalar 24; "
                 "final soft cap 6 (attn_logit_softcapping 8 is ignored by transformers 5); "
                 "global rope linear x2 theta 1e6, "
                 "local theta 1e4")
    elif name == "phi3":
        # LongRoPE with partial rotary (half of each head of 12): the forward
        # runs 70 tokens, past original_max_position_embeddings (64), so the
        # long factors apply; generation stays below (short factors).
        config = tf.Phi3Config(
            vocab_size=200, hidden_size=48, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
            original_max_position_embeddings=64, rms_norm_eps=1e-5, hidden_act="silu",
            rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                             "partial_rotary_factor": 0.5,
                             "short_factor": [1.0, 1.25, 1.5],
                             "long_factor": [1.5, 3.0, 6.0]},
            tie_word_embeddings=False, **common)
        model = tf.Phi3ForCausalLM(config)
        lengths = [70, 23]
        notes = ("model.safetensors; fused qkv_proj and gate_up_proj; GQA 4/2 of head 12, "
                 "partial rotary 0.5; longrope (original 64 of 256 positions; the 70-token "
                 "row uses the long factors)")
    else:
        raise ValueError(name)
    fixtures.reinit_(model, seed)
    model.eval()
    inputs = fixtures.text_inputs(rng, config.vocab_size, lengths, with_token_types=False)
    return model, inputs, notes


CAST_FORMAT = "F8_E4M3FN:per_row"


def cast_generation_reference(name):
    """Greedy tokens of the round-tripped model for generation_reference's
    prompts (no EOS), as gen_generation_references writes them."""
    import torch
    import transformers as tf

    folder = os.path.join(OUT, name)
    model = tf.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                    attn_implementation="eager")
    model.eval()
    model.generation_config.eos_token_id = None
    rt = fixtures.round_tripped_model(model, CAST_FORMAT)
    with open(os.path.join(folder, "generation_reference.json")) as f:
        prompts = [c["prompt"] for c in json.load(f)["cases"] if not c["eos_token_ids"]]
    cases = [{"prompt": p, "max_new_tokens": generation.MAX_NEW_TOKENS, "eos_token_ids": [],
              "generated": generation.greedy(rt, p, None, generation.MAX_NEW_TOKENS)}
             for p in prompts]
    return {"generator": "tools/gen_decoder_fixtures.py", "transformers": tf.__version__,
            "torch": torch.__version__, "dtype": "float32", "do_sample": False,
            "weights": f"castable weights round-tripped through {CAST_FORMAT}", "cases": cases}


def make(name, report):
    model, inputs, notes = build(name)
    folder = os.path.join(OUT, name)
    fixtures.fresh_dir(folder)
    model.save_pretrained(folder, safe_serialization=True)
    metadata = {"fixture": name, "model_class": type(model).__name__,
                "model_type": model.config.model_type, "seed": str(SEEDS[name]),
                "fixture_generator": "tools/gen_decoder_fixtures.py"}
    accuracy, _ = fixtures.write_reference(os.path.join(folder, "reference.safetensors"),
                                           model, inputs, ["logits"], metadata)
    generation.FIXTURES[name] = GENERATION_SEEDS[name]
    generation.write(generation.references(name),
                     os.path.join(folder, "generation_reference.json"))
    generation.write(generation.batch_reference(name),
                     os.path.join(folder, "generation_batch_reference.json"))
    generation.write(cast_generation_reference(name),
                     os.path.join(folder, f"generation_reference.{CAST_FORMAT.replace(':', '_')}.json"))
    report[name] = {"model_class": type(model).__name__, "notes": notes,
                    "inputs": {k: list(v.shape) for k, v in inputs.items()},
                    "accuracy": accuracy, "files": fixtures.dir_files(folder)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="*", default=None, help="fixtures to build")
    args = parser.parse_args(argv)
    import torch
    import transformers

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    names = args.only or list(SEEDS)
    report = {}
    for name in names:
        print("building", name, flush=True)
        make(name, report)
    path = os.path.join(OUT, "decoder_fixtures.json")
    existing = {}
    if os.path.exists(path):
        with open(path) as f:
            existing = json.load(f).get("fixtures", {})
    existing.update(report)
    with open(path, "w") as f:
        json.dump({"generator": "tools/gen_decoder_fixtures.py",
                   "versions": {"torch": torch.__version__,
                                "transformers": transformers.__version__},
                   "fixtures": existing}, f, indent=1, sort_keys=True)
        f.write("\n")
    for name, r in report.items():
        print(name, {k: round(v, 6) for k, v in r["accuracy"].items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
