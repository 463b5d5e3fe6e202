#!/usr/bin/env python3
"""Writes greedy-generation references for the decoder fixtures.

For each of models/testdata/{llama,mistral,qwen2} this loads the committed
checkpoint with transformers in f32 and writes generation_reference.json next
to it: transformers' generate(do_sample=False) from two prompts of different
lengths, 32 new tokens with EOS disabled (so all 32 are produced), and one
case whose EOS is forced to a token the greedy run produces mid-way (so the
generation stops there, the EOS token included). The C++ tests
(models/generation/generation_test.cc) compare castserve's Generate with these files.

It also writes generation_batch_reference.json: one batched
generate(do_sample=False) over prompts of different lengths (left-padded,
with the attention mask, so each row's positions start at 0 at its first
real token), 32 new tokens each, EOS disabled. The scheduler's test
(models/generation/generation_scheduler_test.cc) runs the prompts concurrently and
compares every token.

Run with a Python that has torch and transformers (the peer venv):
  /work/main/.venv-peer/bin/python tools/gen_generation_references.py
It only writes the generation_reference.json files; the other fixture files
are left as they are.
"""
import json
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = {"llama": 2001, "mistral": 2002, "qwen2": 2003}
PROMPT_LENGTHS = (5, 19)
MAX_NEW_TOKENS = 32
FIRST_ID = 3  # prompts avoid pad (0), bos (1) and eos (2)
FORCED_EOS_STEP = 9  # the forced EOS is generated at this step or before
BATCH_PROMPT_LENGTHS = (3, 8, 13, 21, 6)
BATCH_SEED_OFFSET = 100


def greedy(model, prompt, eos_token_id, max_new_tokens):
    import torch
    import transformers as tf

    config = tf.GenerationConfig(do_sample=False, num_beams=1, max_new_tokens=max_new_tokens,
                                 eos_token_id=eos_token_id, pad_token_id=0, bos_token_id=1)
    ids = torch.tensor([prompt], dtype=torch.long)
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                             generation_config=config)
    return [int(t) for t in out[0, len(prompt):]]


def batch_reference(name):
    import torch
    import transformers as tf

    folder = os.path.join(ROOT, "models", "testdata", name)
    model = tf.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                    attn_implementation="eager")
    model.eval()
    model.generation_config.eos_token_id = None
    rng = np.random.default_rng(FIXTURES[name] + BATCH_SEED_OFFSET)
    vocab = model.config.vocab_size
    prompts = [[int(t) for t in rng.integers(FIRST_ID, vocab, n)] for n in BATCH_PROMPT_LENGTHS]
    longest = max(len(p) for p in prompts)
    # Left padding with pad id 0 and mask 0: generation continues every row.
    ids = torch.tensor([[0] * (longest - len(p)) + p for p in prompts], dtype=torch.long)
    mask = torch.tensor([[0] * (longest - len(p)) + [1] * len(p) for p in prompts],
                        dtype=torch.long)
    config = tf.GenerationConfig(do_sample=False, num_beams=1, max_new_tokens=MAX_NEW_TOKENS,
                                 eos_token_id=None, pad_token_id=0, bos_token_id=1)
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
    cases = []
    for row, prompt in enumerate(prompts):
        tokens = [int(t) for t in out[row, longest:]]
        if len(tokens) != MAX_NEW_TOKENS:
            raise AssertionError(f"{name}: row {row} has {len(tokens)} tokens")
        cases.append({"prompt": prompt, "max_new_tokens": MAX_NEW_TOKENS,
                      "eos_token_ids": [], "generated": tokens})
    return {"generator": "tools/gen_generation_references.py",
            "transformers": tf.__version__, "torch": torch.__version__,
            "dtype": "float32", "do_sample": False, "batched": True,
            "padding_side": "left", "cases": cases}


def write(ref, path):
    with open(path, "w") as f:
        cases = ref["cases"]
        head = json.dumps({k: v for k, v in ref.items() if k != "cases"})[:-1]
        body = ",\n  ".join(json.dumps(c) for c in cases)
        f.write(f'{head},\n "cases": [\n  {body}\n ]\n}}\n')


def references(name):
    import torch
    import transformers as tf

    folder = os.path.join(ROOT, "models", "testdata", name)
    model = tf.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                    attn_implementation="eager")
    model.eval()
    model.generation_config.eos_token_id = None
    rng = np.random.default_rng(FIXTURES[name])
    vocab = model.config.vocab_size
    cases = []
    prompts = [[int(t) for t in rng.integers(FIRST_ID, vocab, n)] for n in PROMPT_LENGTHS]
    for prompt in prompts:
        tokens = greedy(model, prompt, None, MAX_NEW_TOKENS)
        if len(tokens) != MAX_NEW_TOKENS:
            raise AssertionError(f"{name}: {len(tokens)} tokens without EOS")
        cases.append({"prompt": prompt, "max_new_tokens": MAX_NEW_TOKENS,
                      "eos_token_ids": [], "generated": tokens})
    # Forced EOS: a token generated at a step where it did not occur before,
    # so that generation stops exactly there.
    # Tiny random models fall into loops early, so the step is the latest
    # first occurrence at or before FORCED_EOS_STEP.
    first = cases[0]["generated"]
    step = max(i for i in range(FORCED_EOS_STEP + 1) if first[i] not in first[:i])
    eos = first[step]
    tokens = greedy(model, prompts[0], eos, MAX_NEW_TOKENS)
    if tokens != first[:step + 1]:
        raise AssertionError(f"{name}: forced EOS {eos} gave {tokens}, expected {first[:step + 1]}")
    cases.append({"prompt": prompts[0], "max_new_tokens": MAX_NEW_TOKENS,
                  "eos_token_ids": [eos], "generated": tokens})
    return {"generator": "tools/gen_generation_references.py",
            "transformers": tf.__version__, "torch": torch.__version__,
            "dtype": "float32", "do_sample": False, "cases": cases}


def main():
    for name in FIXTURES:
        folder = os.path.join(ROOT, "models", "testdata", name)
        ref = references(name)
        write(ref, os.path.join(folder, "generation_reference.json"))
        print(name, [len(c["generated"]) for c in ref["cases"]])
        batch = batch_reference(name)
        write(batch, os.path.join(folder, "generation_batch_reference.json"))
        print(name, "batch", [len(c["prompt"]) for c in batch["cases"]])
    return 0


if __name__ == "__main__":
    sys.exit(main())
