#!/usr/bin/env python3
"""Writes the log-probability and penalty references of generation.

Log-probabilities: transformers' generate(do_sample=False) with
output_logits=True gives the raw logits of every step (before any logits
processor); their log_softmax is what castserve reports: the chosen token's
log-probability and the TOP most probable ids with theirs (vLLM's default
"raw_logprobs").

Penalties: OpenAI's presence and frequency penalties, counted as OpenAI and
vLLM count them (over the generated tokens only, not the prompt):
    logit[id] -= frequency * count(id);  logit[id] -= presence * (count(id) > 0)
computed here by a LogitsProcessor of this script that transformers runs
after its own repetition penalty (the order vLLM applies them in), greedy.
Every penalty case is checked to differ from plain greedy, so a server that
ignored the penalty would fail the comparison, and every greedy step of every
case to have its two best processed scores at least MIN_GAP apart, so that
another implementation's float rounding cannot pick the other one.

Two files:
  models/testdata/llama/logprobs_reference.json  (the llama decoder fixture;
      models/generation/generation_test.cc and generation_scheduler_test.cc)
  tests/testdata/tiny_llama_logprobs.json  (deploy/model_repository/tiny_llama;
      tests/openai_integration_test.py through the `openai` client)

Run with the reference venv:
  /work/main/.venv-ref/bin/python tools/gen_logprob_references.py
"""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOP = 5
NEW_TOKENS = 16
PENALTY_NEW_TOKENS = 24
# (presence, frequency, repetition): each alone, negative values, and with
# transformers' repetition penalty first.
PENALTIES = [(1.5, 0.0, 1.0), (0.0, 0.7, 1.0), (0.5, 0.4, 1.0),
             (-1.0, -0.3, 1.0), (0.8, 0.3, 1.3)]
# tiny_llama repeats itself rarely (its greedy run repeats one token in 48):
# larger penalties and more tokens, OpenAI's fields only.
TINY_PENALTIES = [(2.0, 0.0, 1.0), (0.0, 2.0, 1.0), (1.0, 1.0, 1.0),
                  (-2.0, 0.0, 1.0), (-1.0, -0.5, 1.0)]
TINY_PENALTY_NEW_TOKENS = 32
# Its greedy runs from "The quick brown fox" repeat nothing for 46 tokens
# and then meet a near-tie: the penalty cases start from another prompt.
TINY_PENALTY_PROMPT = "Once upon a time"


def load(folder):
    import torch
    import transformers as tf

    model = tf.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                    attn_implementation="eager")
    model.eval()
    model.generation_config.eos_token_id = None
    return model


class OpenAiPenalties:
    """OpenAI's presence and frequency penalties over the new tokens."""

    def __init__(self, prompt_length, presence, frequency):
        self.prompt_length = prompt_length
        self.presence = presence
        self.frequency = frequency

    def __call__(self, input_ids, scores):
        import torch

        generated = input_ids[:, self.prompt_length:]
        counts = torch.zeros_like(scores)
        counts.scatter_add_(1, generated, torch.ones_like(generated, dtype=scores.dtype))
        scores = scores - self.frequency * counts
        return scores - self.presence * (counts > 0).to(scores.dtype)


# A greedy step whose two best processed scores are closer than this could
# go either way in another implementation's float rounding: such a case is
# not a reference.
MIN_GAP = 1e-3


class GapRecorder:
    """Records the smallest gap between the two best processed scores."""

    def __init__(self):
        self.min_gap = float("inf")

    def __call__(self, input_ids, scores):
        top = scores.topk(2, dim=-1).values[0]
        self.min_gap = min(self.min_gap, float(top[0] - top[1]))
        return scores


def generate(model, prompt, new_tokens, eos, presence=0.0, frequency=0.0, repetition=1.0,
             gaps=None):
    import torch
    import transformers as tf

    config = tf.GenerationConfig(do_sample=False, num_beams=1, max_new_tokens=new_tokens,
                                 eos_token_id=eos, pad_token_id=0, bos_token_id=1,
                                 repetition_penalty=repetition)
    processors = tf.LogitsProcessorList()
    if presence or frequency:
        processors.append(OpenAiPenalties(len(prompt), presence, frequency))
    recorder = GapRecorder()
    processors.append(recorder)
    ids = torch.tensor([prompt], dtype=torch.long)
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                             generation_config=config, logits_processor=processors,
                             output_logits=True, return_dict_in_generate=True)
    tokens = [int(t) for t in out.sequences[0, len(prompt):]]
    if gaps is not None:
        gaps.append(recorder.min_gap)
    return tokens, [step[0].float() for step in out.logits]


def logprobs_of(tokens, logits):
    steps = []
    for token, step in zip(tokens, logits):
        logprobs = step.log_softmax(-1)
        values, ids = logprobs.topk(TOP)
        steps.append({"token": token, "logprob": float(logprobs[token]),
                      "top_ids": [int(i) for i in ids],
                      "top_logprobs": [float(v) for v in values]})
    return steps


def penalty_cases(model, prompt, new_tokens, eos, penalties):
    """Plain greedy and each penalty case; AssertionError when a case
    changes nothing or has a near-tie."""
    gaps = []
    plain, _ = generate(model, prompt, new_tokens, eos, gaps=gaps)
    cases = []
    for presence, frequency, repetition in penalties:
        tokens, _ = generate(model, prompt, new_tokens, eos, presence, frequency, repetition,
                             gaps=gaps)
        if tokens == plain:
            raise AssertionError(f"penalties {presence}, {frequency} change nothing")
        cases.append({"presence_penalty": presence, "frequency_penalty": frequency,
                      "repetition_penalty": repetition, "generated": tokens})
    if min(gaps) < MIN_GAP:
        raise AssertionError(f"a greedy step has a near-tie ({min(gaps):.2e})")
    return plain, cases


def header():
    import torch
    import transformers as tf

    return {"generator": "tools/gen_logprob_references.py", "transformers": tf.__version__,
            "torch": torch.__version__, "dtype": "float32", "do_sample": False,
            "logprobs": "log_softmax of the raw logits (output_logits)", "top": TOP}


def fixture_reference():
    folder = os.path.join(ROOT, "models", "testdata", "llama")
    with open(os.path.join(folder, "generation_reference.json")) as f:
        prompts = [case["prompt"] for case in json.load(f)["cases"][:2]]
    model = load(folder)
    cases = []
    gaps = []
    for prompt in prompts:
        tokens, logits = generate(model, prompt, NEW_TOKENS, None, gaps=gaps)
        cases.append({"prompt": prompt, "steps": logprobs_of(tokens, logits)})
    if min(gaps) < MIN_GAP:
        raise AssertionError(f"a greedy step has a near-tie ({min(gaps):.2e})")
    plain, penalties = penalty_cases(model, prompts[0], PENALTY_NEW_TOKENS, None, PENALTIES)
    return dict(header(), logprob_cases=cases,
                penalty_prompt=prompts[0], penalty_max_new_tokens=PENALTY_NEW_TOKENS,
                penalty_plain=plain, penalty_cases=penalties)


def tiny_llama_reference():
    import tokenizers

    folder = os.path.join(ROOT, "deploy", "model_repository", "tiny_llama", "hf")
    with open(os.path.join(ROOT, "tests", "testdata", "tiny_llama_greedy.json")) as f:
        greedy = json.load(f)
    tokenizer = tokenizers.Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    model = load(folder)
    prompt = greedy["prompt_ids"]
    gaps = []
    tokens, logits = generate(model, prompt, NEW_TOKENS, 2, gaps=gaps)
    if min(gaps) < MIN_GAP:
        raise AssertionError(f"a greedy step has a near-tie ({min(gaps):.2e})")
    steps = logprobs_of(tokens, logits)
    for step in steps:
        step["text"] = tokenizer.decode([step["token"]], skip_special_tokens=False)
        step["top_texts"] = [tokenizer.decode([i], skip_special_tokens=False)
                             for i in step["top_ids"]]
    penalty_prompt = tokenizer.encode(TINY_PENALTY_PROMPT).ids  # With BOS.
    _, penalties = penalty_cases(model, penalty_prompt, TINY_PENALTY_NEW_TOKENS, 2,
                                 TINY_PENALTIES)
    for case in penalties:
        case["text_output"] = tokenizer.decode(case["generated"], skip_special_tokens=True)
    return dict(header(), prompt=greedy["prompt"], prompt_ids=prompt,
                max_tokens=NEW_TOKENS, steps=steps,
                penalty_prompt=TINY_PENALTY_PROMPT, penalty_prompt_ids=penalty_prompt,
                penalty_max_tokens=TINY_PENALTY_NEW_TOKENS, penalty_cases=penalties)


def write(ref, path):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(ref, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print("wrote", os.path.relpath(path, ROOT))


def main():
    write(fixture_reference(),
          os.path.join(ROOT, "models", "testdata", "llama", "logprobs_reference.json"))
    write(tiny_llama_reference(),
          os.path.join(ROOT, "tests", "testdata", "tiny_llama_logprobs.json"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
