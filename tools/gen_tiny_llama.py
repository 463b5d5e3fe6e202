#!/usr/bin/env python3
"""Writes tiny_llama: a small LlamaForCausalLM with RANDOM weights.

It exists to show castserve's generation API (gRPC ModelStreamInfer, REST
generate / generate_stream, castserve-client generate) and to test it end to
end; what it generates is meaningless text. Its vocabulary is that of the
committed byte-fallback BPE tokenizer text/testdata/bpe-llama2/tokenizer.json
(1,756 ids; <s> = 1 is BOS, </s> = 2 is EOS), which is copied beside the
weights so that the daemon takes and returns text.

Writes into the folder given (default deploy/model_repository/tiny_llama/hf):
  config.json, generation_config.json, model.safetensors, tokenizer.json,
and next to this script's repository tests/testdata/tiny_llama_greedy.json:
transformers' generate(do_sample=False) of 32 new tokens for one text prompt
(f32, EOS on), the reference the end-to-end test compares castserve with.
The seed is the first from SEED on whose greedy run produces all 32 tokens
without EOS, so the reference is 32 tokens long.

Run with a Python that has torch, transformers and tokenizers (the peer venv):
  /work/main/.venv-peer/bin/python tools/gen_tiny_llama.py
"""
import json
import os
import re
import shutil
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKENIZER = os.path.join(ROOT, "text", "testdata", "bpe-llama2", "tokenizer.json")
REFERENCE = os.path.join(ROOT, "tests", "testdata", "tiny_llama_greedy.json")
DEFAULT_OUT = os.path.join(ROOT, "deploy", "model_repository", "tiny_llama", "hf")
SEED = 17
PROMPT = "The quick brown fox"
MAX_NEW_TOKENS = 32
BOS, EOS = 1, 2


def make_model(seed, vocab_size):
    import torch
    import transformers as tf

    torch.manual_seed(seed)
    config = tf.LlamaConfig(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        rms_norm_eps=1e-5, rope_theta=10000.0, hidden_act="silu",
        tie_word_embeddings=True, attention_bias=False, mlp_bias=False,
        bos_token_id=BOS, eos_token_id=EOS, pad_token_id=0,
        initializer_range=0.4)
    config._attn_implementation = "eager"
    model = tf.LlamaForCausalLM(config).eval()
    return model


def greedy(model, prompt_ids):
    import torch
    import transformers as tf

    config = tf.GenerationConfig(do_sample=False, num_beams=1, max_new_tokens=MAX_NEW_TOKENS,
                                 eos_token_id=EOS, pad_token_id=0, bos_token_id=BOS)
    ids = torch.tensor([prompt_ids], dtype=torch.long)
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                             generation_config=config)
    return [int(t) for t in out[0, len(prompt_ids):]]


def main():
    import tokenizers

    out = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_OUT
    tokenizer = tokenizers.Tokenizer.from_file(TOKENIZER)
    vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
    prompt_ids = tokenizer.encode(PROMPT).ids  # With BOS, as the daemon encodes.
    if prompt_ids[0] != BOS:
        raise AssertionError(f"the tokenizer added no BOS: {prompt_ids}")
    for seed in range(SEED, SEED + 100):
        model = make_model(seed, vocab_size)
        tokens = greedy(model, prompt_ids)
        if len(tokens) == MAX_NEW_TOKENS and EOS not in tokens:
            break
    else:
        raise AssertionError("no seed gave 32 tokens without EOS")

    os.makedirs(out, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    model.generation_config.eos_token_id = EOS
    model.generation_config.bos_token_id = BOS
    model.generation_config.save_pretrained(out)
    shutil.copyfile(TOKENIZER, os.path.join(out, "tokenizer.json"))

    os.makedirs(os.path.dirname(REFERENCE), exist_ok=True)
    with open(REFERENCE, "w", encoding="utf-8") as f:
        text = json.dumps({
            "comment": "transformers generate(do_sample=False), f32, written by "
                       "tools/gen_tiny_llama.py; tiny_llama has random weights",
            "seed": seed,
            "prompt": PROMPT,
            "prompt_ids": prompt_ids,
            "max_tokens": MAX_NEW_TOKENS,
            "output_ids": tokens,
            "text_output": tokenizer.decode(tokens, skip_special_tokens=True),
        }, indent=1, ensure_ascii=False)
        # One line per list of ids.
        f.write(re.sub(r"\[[\d,\s]*\]", lambda m: re.sub(r"\s+", " ", m.group(0)), text) + "\n")
    print(f"seed {seed}: {tokens}")


if __name__ == "__main__":
    main()
