#!/usr/bin/env python3
r"""Writes the chat template parity references for //text/jinja:parity_test.

For every template under text/jinja/testdata/templates/ (<name>.jinja) this
renders a seeded set of conversations with transformers' own renderer
(transformers.utils.chat_template_utils.render_jinja_template: jinja2's
ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks, loopcontrols,
transformers' tojson, raise_exception, strftime_now, dict and namespace),
passing the special tokens as apply_chat_template does, and writes
text/jinja/testdata/references/<name>.json:

  {"template": "<name>.jinja",
   "special_tokens": {"bos_token": ..., ...},
   "now": "2026-07-04T15:30:00",      # what strftime_now reads
   "cases": [{"messages": [...], "add_generation_prompt": bool,
              "tools": [...]?, "extra": {...}?,
              "expected": "..."}  or  {..., "error": "...",
              "raised": true when raise_exception raised it}]}

Seeded: a rerun writes the same files. CI does not run this; the C++ test
compares with the committed files.

  /root/.venv-ref/bin/python tools/gen_chat_template_references.py
"""
import datetime as datetime_module
import json
import os
import random
import sys

import jinja2
from transformers.utils import chat_template_utils

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
TEMPLATES = os.path.join(ROOT, "text/jinja/testdata/templates")
REFERENCES = os.path.join(ROOT, "text/jinja/testdata/references")
CASES_PER_TEMPLATE = 60
NOW = datetime_module.datetime(2026, 7, 4, 15, 30, 0)

LLAMA3 = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}
QWEN = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
MISTRAL = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
GEMMA = {"bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>",
         "pad_token": "<pad>"}
DEEPSEEK = {"bos_token": "<｜begin▁of▁sentence｜>",
            "eos_token": "<｜end▁of▁sentence｜>"}
SPECIAL_TOKENS = {
    "llama-3.1-8b-instruct": LLAMA3,
    "llama-3.2-3b-instruct": LLAMA3,
    "llama-3.3-70b-instruct": LLAMA3,
    "qwen2.5-7b-instruct": QWEN,
    "qwen3-0.6b": QWEN,
    "qwq-32b": QWEN,
    "mistral-7b-instruct": MISTRAL,
    "mistral-nemo-instruct-2407": MISTRAL,
    "mistral-small-3.2-24b-instruct-2506": MISTRAL,
    "gemma-2-2b-it": GEMMA,
    "gemma-3-it": GEMMA,
    "phi-3.5-mini-instruct": {"bos_token": "<s>", "eos_token": "<|endoftext|>",
                              "unk_token": "<unk>"},
    "phi-4": {"bos_token": "<|endoftext|>", "eos_token": "<|im_end|>"},
    "deepseek-r1-distill-llama-8b": DEEPSEEK,
    "deepseek-r1-distill-qwen-32b": DEEPSEEK,
    "smollm2-instruct": {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>",
                         "unk_token": "<|endoftext|>",
                         "pad_token": "<|im_end|>"},
    "smollm3-3b": {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>",
                   "pad_token": "<|im_end|>"},
    "chatml": {"bos_token": "<s>", "eos_token": "<|im_end|>"},
    "hermes-2-pro-llama-3-8b-tool_use": {"bos_token": "<|begin_of_text|>",
                                         "eos_token": "<|im_end|>"},
}

# Templates that iterate `tools` unconditionally (tool-use variants).
NEEDS_TOOLS = {"hermes-2-pro-llama-3-8b-tool_use"}

TEXTS = [
    "Hello!",
    "What is the capital of France?",
    "",
    "Line one\nLine two\n\nLine four",
    "  padded with spaces  ",
    "\n\nleading and trailing newlines\n\n",
    "Tabs\tand\ttabs",
    "日本語のテキストです。你好，世界！",
    "Emoji: 😀🚀👍🏽 and flags 🇫🇷",
    "Ünïcödé àccents — and “quotes”",
    "Quotes ' and \" and backslash \\ here",
    "Braces {{ not a template }} {% neither %}",
    "<think>\nLet me think.\n</think>\n\nThe answer is 42.",
    "Some reasoning</think>Final answer",
    "<tool_response>\n{\"ok\": true}\n</tool_response>",
    "A longer message. " * 12,
    "Code:\n```python\nprint('hi')\n```",
    "Ends with a newline\n",
    "Math: 2 + 2 = 4; 10 / 3 ≈ 3.33",
    "Ελληνικά και русский текст",
]
SYSTEMS = [
    "You are a helpful assistant.",
    "",
    "You are terse.\nAnswer in one line.",
    "Système: réponds en français 🇫🇷",
    "  You speak like a pirate.  ",
]
TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}]


class FixedClock(datetime_module.datetime):
    @classmethod
    def now(cls, tz=None):
        return NOW


def text(rng):
    return rng.choice(TEXTS)


def alternating(rng, turns, system):
    messages = []
    if system:
        messages.append({"role": "system", "content": rng.choice(SYSTEMS)})
    for turn in range(turns):
        role = "user" if turn % 2 == 0 else "assistant"
        messages.append({"role": role, "content": text(rng)})
    return messages


def parts(rng):
    return [{"type": "text", "text": text(rng)},
            {"type": "text", "text": text(rng)}]


def conversations(rng):
    """Yields (messages, add_generation_prompt, tools, extra)."""
    for index in range(CASES_PER_TEMPLATE):
        kind = index % 12
        generation = index % 2 == 0
        if kind in (0, 1, 2, 3, 4):
            turns = 1 + 2 * rng.randrange(3) + (index % 3 == 1)
            yield alternating(rng, turns, system=kind % 2 == 0), generation, \
                None, None
        elif kind == 5:  # Multi-turn ending with the assistant.
            yield alternating(rng, 4, system=True), False, None, None
        elif kind == 6:  # Bad role orders: templates that check raise.
            bad = rng.choice([
                [{"role": "user", "content": "a"},
                 {"role": "user", "content": "b"}],
                [{"role": "assistant", "content": "a"},
                 {"role": "user", "content": "b"}],
                [{"role": "system", "content": "s"},
                 {"role": "assistant", "content": "a"}],
            ])
            yield bad, generation, None, None
        elif kind == 7:  # Content as a list of parts.
            messages = alternating(rng, 1, system=False)
            messages[0]["content"] = parts(rng)
            yield messages, True, None, None
        elif kind == 8:  # Tools offered.
            yield alternating(rng, 1, system=index % 4 == 0), True, TOOLS, None
        elif kind == 9:  # A tool call and its answer.
            messages = [
                {"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": "",
                 "tool_calls": [{"type": "function", "id": "call9abc12",
                                 "function": {"name": "get_weather",
                                              "arguments": {"city": "Paris"}}}]},
                {"role": "tool", "content": "{\"temperature\": 21}",
                 "tool_call_id": "call9abc12"},
            ]
            yield messages, True, TOOLS, None
        elif kind == 10:  # Reasoning fields and template switches.
            messages = alternating(rng, 3, system=False)
            messages[1]["reasoning_content"] = "I should answer briefly."
            yield messages, generation, None, {"enable_thinking": False}
        else:  # Empty conversation pieces and long runs.
            yield alternating(rng, 7, system=True), generation, None, None


def render(template, special_tokens, messages, generation, tools, extra):
    kwargs = dict(special_tokens)
    kwargs.update(extra or {})
    return chat_template_utils.render_jinja_template(
        conversations=[messages], tools=tools, chat_template=template,
        add_generation_prompt=generation, **kwargs)[0][0]


def main():
    chat_template_utils.datetime = FixedClock
    os.makedirs(REFERENCES, exist_ok=True)
    counts = {}
    for file_name in sorted(os.listdir(TEMPLATES)):
        if not file_name.endswith(".jinja"):
            continue
        name = file_name[:-len(".jinja")]
        with open(os.path.join(TEMPLATES, file_name), encoding="utf-8") as f:
            template = f.read()
        special_tokens = SPECIAL_TOKENS[name]
        rng = random.Random(name)
        cases = []
        for messages, generation, tools, extra in conversations(rng):
            if name in NEEDS_TOOLS:
                tools = TOOLS
            case = {"messages": messages, "add_generation_prompt": generation}
            if tools is not None:
                case["tools"] = tools
            if extra is not None:
                case["extra"] = extra
            try:
                case["expected"] = render(template, special_tokens,
                                          json.loads(json.dumps(messages)),
                                          generation, tools, extra)
            except jinja2.exceptions.TemplateError as error:
                case["error"] = str(error)
                case["raised"] = type(error) is jinja2.exceptions.TemplateError
            except (TypeError, ValueError, KeyError) as error:
                case["error"] = f"{type(error).__name__}: {error}"
                case["raised"] = False
            cases.append(case)
        counts[name] = (len(cases), sum("error" in c for c in cases))
        with open(os.path.join(REFERENCES, name + ".json"), "w",
                  encoding="utf-8") as f:
            json.dump({"template": file_name, "special_tokens": special_tokens,
                       "now": NOW.isoformat(), "cases": cases}, f,
                      ensure_ascii=False, indent=1)
            f.write("\n")
    for name, (total, errors) in counts.items():
        print(f"{name}: {total} conversations ({errors} expected errors)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
