#!/usr/bin/env python3
r"""Writes the chat template parity references for //text/jinja/tests:parity_test.

For every template under text/jinja/tests/testdata/templates/ (<name>.jinja) this
renders a seeded set of conversations with transformers' own renderer
(transformers.utils.chat_template_utils.render_jinja_template: jinja2's
ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks, loopcontrols,
transformers' tojson, raise_exception, strftime_now, dict and namespace),
passing the special tokens as apply_chat_template does, and writes
text/jinja/tests/testdata/references/<name>.json:

  {"template": "<name>.jinja",
   "special_tokens": {"bos_token": ..., ...},
   "now": "2026-07-04T15:30:00",      # what strftime_now reads
   "cases": [{"messages": [...], "add_generation_prompt": bool,
              "tools": [...]?, "extra": {...}?,
              "expected": "..."}  or  {..., "error": "...",
              "raised": true when raise_exception raised it}]}

It also renders FEATURES, small templates that each exercise one construct
(whitespace control, loops, filters, tests, methods, Python's str/repr of
values, tojson options, undefined), into text/jinja/tests/testdata/features.json:
  [{"template": "...", "context": {...}, "expected": "..."} or
   {..., "error": "..."}]

Seeded: a rerun writes the same files. CI does not run this; the C++ test
compares with the committed files.

  .venv-ref/bin/python tools/gen_chat_template_references.py
"""
import datetime as datetime_module
import json
import os
import random
import sys

import jinja2
from transformers.utils import chat_template_utils

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
TEMPLATES = os.path.join(ROOT, "text/jinja/tests/testdata/templates")
REFERENCES = os.path.join(ROOT, "text/jinja/tests/testdata/references")
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


FEATURES = [
    # Whitespace control, trim_blocks and lstrip_blocks.
    ("a\n  {% if true %}\n  b\n  {% endif %}\nc", {}),
    ("a  {%- if true -%}  b  {%- endif -%}  c", {}),
    ("a\n{{- ' x ' -}}\nb", {}),
    ("  {{ 1 }}\n  {% if true %}y{% endif %}  \n", {}),
    ("{% if true +%}\nkeep{%+ endif %}", {}),
    ("x {# comment #}\ny\n  {# own line #}\nz", {}),
    ("line\r\nwindows\rmac\n\n", {}),
    ("{% for i in [1, 2] %}\n  {{ i }}\n{% endfor %}\n", {}),
    ("\t{% set x = 1 %}\t{{ x }}", {}),
    ("a {{- '' }}\u3000{%- if true %}b{% endif %}", {}),
    # Values printed as Python prints them.
    ("{{ [1, 'a', none, true, 1.5] }}|{{ {'k': [1, {'n': none}]} }}", {}),
    ("{{ (1,) }}{{ (1, 2) }}{{ () }}", {}),
    ("{{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1.0e-5 }} {{ 3 / 2 }} {{ 2.0 }} "
     "{{ 123456789.0 * 10 }} {{ -0.0 }}", {}),
    ("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 10 }} "
     "{{ 2 ** -1 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }}", {}),
    ("{{ 'it''s' }} {{ \"a'b\" }} {{ ['it\\'s', 'q\"'] }} "
     "{{ ['\\n\\t\\x01', '\\\\'] }}", {}),
    ("{{ ['é', '😀', '\\u200b'] }}", {}),
    ("{{ x }}|{{ x.y is defined }}|{{ none }}|{{ true }}", {"x": {"y": None}}),
    ("{{ 'a' ~ 1 ~ none ~ undefined_name ~ [1] }}", {}),
    ("{{ 1 if false }}|{{ 'yes' if 0 else 'no' }}|{{ [] or 'empty' }}|"
     "{{ 'a' and 'b' }}", {}),
    # Undefined.
    ("{{ missing }}|{{ missing is defined }}|{{ missing | length }}|"
     "{{ missing | default('d') }}|{% for x in missing %}x{% endfor %}", {}),
    ("{{ missing.attribute }}", {}),
    ("{{ d.nope }}|{{ d['nope'] }}|{{ l[5] }}|{{ d.nope is defined }}",
     {"d": {"a": 1}, "l": [1]}),
    ("{{ d.nope.deeper }}", {"d": {}}),
    ("{{ missing + 1 }}", {}),
    ("{{ none.attribute }}", {}),
    # Loops.
    ("{% for x in xs %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}"
     "/{{ loop.revindex0 }}/{{ loop.first }}/{{ loop.last }}/{{ loop.length }}"
     "/{{ loop.previtem is defined }}/{{ loop.nextitem }};{% endfor %}",
     {"xs": ["a", "b", "c"]}),
    ("{% for x in xs if x != 'b' %}{{ loop.index }}{{ x }}{% else %}none"
     "{% endfor %}|{% for x in [] %}x{% else %}empty{% endfor %}",
     {"xs": ["a", "b", "c"]}),
    ("{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}"
     "{% if x > 4 %}{% break %}{% endif %}{{ x }}{% endfor %}", {}),
    ("{% for k, v in d.items() %}{{ k }}={{ v }},{% endfor %}"
     "{% for k in d %}{{ k }}{% endfor %}", {"d": {"b": 1, "a": 2}}),
    ("{% for a in [1, 2] %}{% for b in 'xy' %}{{ loop.depth }}{{ a }}{{ b }}"
     "{{ loop.cycle('+', '-') }}{% endfor %}{% endfor %}", {}),
    ("{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = i * 10 %}{{ x }}"
     "{% endfor %}{{ x }}", {}),
    ("{{ range(3) | list }}{{ range(1, 10, 3) | list }}"
     "{{ range(5, 0, -2) | list }}", {}),
    # Scoping, namespace, macros, block set.
    ("{% set ns = namespace(found=false, n=0) %}{% for m in ms %}"
     "{% if m == 2 %}{% set ns.found = true %}{% endif %}"
     "{% set ns.n = ns.n + m %}{% endfor %}{{ ns.found }} {{ ns.n }}",
     {"ms": [1, 2, 3]}),
    ("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}"
     "{{ greet('a') }} {{ greet('b', '?') }} {{ greet(name='c') }}", {}),
    ("{% set a, b = [1, 2] %}{{ a }}{{ b }}{% set t = 1, 2 %}{{ t }}", {}),
    ("{% set block %}  x {{ 1 }}\n{% endset %}[{{ block }}]"
     "{% set up | upper %}abc{% endset %}{{ up }}", {}),
    ("{% generation %}kept {{ 1 }}{% endgeneration %}", {}),
    ("{{ dict(a=1, b='x') }} {{ namespace(a=1) }}", {}),
    # Filters.
    ("{{ '  a b  ' | trim }}|{{ 'xxaxx' | trim('x') }}|{{ 'ab' | upper }}|"
     "{{ 'AB' | lower }}|{{ 'hello world' | capitalize }}|"
     "{{ 'hello-wORLD (x)y' | title }}", {}),
    ("{{ [1, 2, 3] | length }} {{ 'héllo' | length }} {{ {'a': 1} | count }}"
     " {{ [3, 1] | first }} {{ [3, 1] | last }} {{ 'abc' | list }}"
     " {{ 'abc' | reverse }} {{ [1, 2] | reverse | list }}", {}),
    ("{{ ['a', 'b'] | join(', ') }} {{ [1, 2] | join }} "
     "{{ users | join(',', attribute='name') }}",
     {"users": [{"name": "x"}, {"name": "y"}]}),
    ("{{ 'aXbXc' | replace('X', '-') }} {{ 'aaa' | replace('a', 'b', 2) }}"
     " {{ 'ab' | replace('', '.') }}", {}),
    ("{{ '42' | int }} {{ '4.7' | int }} {{ 'x' | int(7) }} {{ 4.9 | int }}"
     " {{ '3.5' | float }} {{ 'x' | float }} {{ 3 | float }} {{ 1 | string }}"
     " {{ -3 | abs }} {{ 2.567 | round(2) }} {{ 2.5 | round }}"
     " {{ 2.1 | round(0, 'ceil') }}", {}),
    ("{{ none | default('x') }} {{ '' | default('x', true) }} {{ 0 | d(5) }}",
     {}),
    ("{{ xs | selectattr('on') | map(attribute='n') | list }}"
     "{{ xs | rejectattr('on') | map(attribute='n') | join }}"
     "{{ xs | selectattr('n', 'equalto', 2) | list | length }}"
     "{{ [1, 2, 3, 4] | select('odd') | list }}"
     "{{ [1, none, 3] | reject('none') | list }}"
     "{{ ['a', 'b'] | map('upper') | list }}",
     {"xs": [{"n": 1, "on": True}, {"n": 2, "on": False}, {"n": 3}]}),
    ("{{ [3, 1, 2] | sort }} {{ ['b', 'A', 'c'] | sort }} "
     "{{ [3, 1, 2] | sort(reverse=true) }} {{ [1, 2, 1, 3] | unique | list }}"
     " {{ [1, 5, 3] | max }} {{ [4, 2] | min }} {{ [1, 2.5] | sum }}"
     " {{ {'b': 1, 'a': 2} | dictsort }}", {}),
    ("{{ {'a': 1, 'b': [1, 2]} | items | list }}", {}),
    ("{{ 'line1\nline2\n\nline4' | indent }}|"
     "{{ 'a\nb' | indent(2, true) }}|{{ 'a\n\nb' | indent('> ', blank=true) }}",
     {}),
    ("{{ '<a href=\"x\">&\\'</a>' | e }} {{ 'x' | safe }}", {}),
    # tojson as transformers defines it.
    ("{{ d | tojson }}|{{ d | tojson(indent=2) }}|{{ d | tojson(indent=4) }}|"
     "{{ d | tojson(sort_keys=true) }}|"
     "{{ d | tojson(separators=(',', ':')) }}|{{ d | tojson(ensure_ascii=true) }}",
     {"d": {"z": "é\"\n\t\u0001😀<>&", "a": [1, 2.5, None, True, {}], "e": []}}),
    ("{{ 1.0 | tojson }} {{ 1e100 | tojson }} {{ 'x' | tojson }}", {}),
    ("{{ missing | tojson }}", {}),
    # Tests.
    ("{{ 1 is number }}{{ true is number }}{{ 1 is integer }}"
     "{{ true is integer }}{{ 1.0 is float }}{{ 'a' is string }}"
     "{{ {} is mapping }}{{ [] is iterable }}{{ 'a' is iterable }}"
     "{{ 1 is iterable }}{{ none is none }}{{ true is boolean }}"
     "{{ false is false }}{{ true is true }}{{ [] is sequence }}"
     "{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}"
     "{{ 'ab' is lower }}{{ 'AB' is upper }}{{ 1 is eq 1 }}"
     "{{ 1 is ne 2 }}{{ 1 is lt 2 }}{{ 2 is gt 1 }}{{ 2 is ge 2 }}"
     "{{ 1 is le 1 }}{{ 'a' is in 'abc' }}{{ none is sameas none }}"
     "{{ 1 is not string }}{{ range is callable }}", {}),
    # Operators and comparisons.
    ("{{ 1 == 1.0 }}{{ true == 1 }}{{ 'a' < 'b' }}{{ [1, 2] < [1, 3] }}"
     "{{ 1 < 2 < 3 }}{{ 3 > 2 > 5 }}{{ 'b' in 'abc' }}{{ 2 in [1, 2] }}"
     "{{ 'k' in {'k': 1} }}{{ 'z' not in 'abc' }}{{ not 0 }}{{ -(-2) }}"
     "{{ 'ab' * 3 }}{{ [0] * 2 }}{{ [1] + [2] }}{{ 'a' + 'b' }}"
     "{{ 1 + 2 * 3 - 4 / 2 }}{{ (1 + 2) * 3 }}", {}),
    ("{{ 'a' + 1 }}", {}),
    ("{{ 'a' < 1 }}", {}),
    ("{{ 1 // 0 }}", {}),
    # String and dict methods.
    ("{{ '  x  '.strip() }}|{{ 'xyx'.strip('x') }}|{{ '\n a'.lstrip() }}|"
     "{{ 'a \n'.rstrip() }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|"
     "{{ 'a b c'.split(' ', 1) }}|{{ 'a.b.c'.rsplit('.', 1) }}|"
     "{{ 'abc'.startswith('ab') }}|{{ 'abc'.endswith(('x', 'c')) }}|"
     "{{ 'ab'.upper() }}|{{ 'hello world'.title() }}|{{ 'aXa'.replace('a', 'b') }}|"
     "{{ 'abcb'.find('b') }}|{{ 'abcb'.count('b') }}|{{ '-'.join(['a', 'b']) }}|"
     "{{ 'x{}y{}'.format(1, 'z') }}|{{ 'éa'.find('a') }}", {}),
    ("{{ d.get('a') }}|{{ d.get('z') }}|{{ d.get('z', 5) }}|{{ d.keys() | list }}|"
     "{{ d.values() | list }}|{{ d.items() | list }}|{{ d['a'] }}|{{ d.a }}",
     {"d": {"a": 1, "b": "x"}}),
    ("{{ 'straße'.upper() }} {{ 'ΑΣ'.lower() }} {{ 'ǆ'.title() }} "
     "{{ 'İ'.lower() | length }} {{ 'ß' | upper }}", {}),
    # Subscripts and slices.
    ("{{ xs[0] }}{{ xs[-1] }}{{ xs[1:] }}{{ xs[:-1] }}{{ xs[::-1] }}"
     "{{ xs[::2] }}{{ 'héllo'[1:3] }}{{ 'abc'[-1] }}{{ xs[5:] }}{{ xs.0 }}",
     {"xs": [1, 2, 3, 4]}),
    # raise_exception and strftime_now.
    ("{{ raise_exception('Custom: ' ~ 42) }}", {}),
    ("{{ strftime_now('%d %b %Y %H:%M:%S %A %j') }}", {}),
    # Literals.
    ("{{ 'a' 'b' }} {{ 1_000 }} {{ 1.5e3 }} {{ 'tab\\there' }} "
     "{{ '\\u00e9\\x41\\101' }} {{ True }} {{ None }}", {}),
    ("{{ {'a': 1}['a'] }} {{ [1, 2,][1] }} {{ {'a': 1,} }}", {}),
    # Corners found worth pinning.
    ("x {% if true %}y{% endif %} z\n  {%+ if true %}k{% endif %}\n"
     "\t{#- c -#}\n  {%- if true %}\n  a\n{%- endif %}", {}),
    ("{{ (1, 2)[0] }}{{ (1, 2, 3)[1:] }}{{ true * 'ab' }}{{ 2 ** 3 ** 2 }}"
     "{{ -1 | abs }}{{ 10 / 4 * 2 }}{{ not missing is defined }}", {}),
    ("{% for m in ms %}{{ loop.previtem }}>{{ m }}>{{ loop.nextitem }};"
     "{% endfor %}", {"ms": [{"a": 1}, "s", 2.5]}),
    ("{% for k, v in d | dictsort %}{{ k }}{{ v }}{% endfor %}"
     "{{ (ms | last).role }}{{ ms | selectattr('role', 'equalto', 'u') | list"
     " | length }}{{ ms | map(attribute='role') | join('/') }}",
     {"d": {"b": 2, "a": 1},
      "ms": [{"role": "s"}, {"role": "u"}, {"role": "u"}]}),
    ("[{{ '\u3000 a\u00a0' | trim }}][{{ ' x '.strip() }}]"
     "[{{ none | string }}][{{ [] | first }}][{{ 12 | string | length }}]", {}),
    ("{% macro m(ns) %}{% set ns.v = ns.v + 1 %}{{ ns.v }}{% endmacro %}"
     "{% set ns = namespace(v=0) %}{{ m(ns) }}{{ m(ns) }}{{ ns.v }}", {}),
    ("{% for i in [1, 2] %}{% set b %}<{{ i }}>{% endset %}{{ b }}"
     "{% endfor %}{{ b is defined }}", {}),
    ("{{ '0x1A' | int(0, 16) }} {{ ' 12 ' | int }} {{ '1_000' | int }}"
     " {{ '1e3' | int }} {{ '-2.5' | float }} {{ 'inf' | float }}"
     " {{ true | int }} {{ none | int }}", {}),
    ("{{ {'k': (1, 2), 'n': {'x': 'y'}} }} {{ {'k': (1, 2)} | tojson }}"
     " {{ 1e22 | tojson }} {{ '\u2028' | tojson }} {{ [] | tojson(indent=2) }}",
     {}),
    ("{{ m.content if m.content is string else m.content[0].text }}"
     "{{ 'x' if m.missing is defined and m.missing else 'y' }}",
     {"m": {"content": [{"type": "text", "text": "part"}]}}),
    ("{{ messages[0].content.split('\n')[0] | upper }}|"
     "{{ messages | length > 1 }}|{{ messages[-1]['role'] == 'user' }}",
     {"messages": [{"role": "user", "content": "first line\nsecond"}]}),
    ("{{ x.y.z | default('d') }}", {"x": {}}),
    ("{{ 1 is sameas true }}{{ '' is defined }}{{ 0 is false }}"
     "{{ 1 is true }}{{ none is number }}{{ 1.5 is integer }}", {}),
    ("{% set ns = namespace(items=[]) %}{% for i in range(3) %}"
     "{% set ns.items = ns.items + [i * i] %}{% endfor %}{{ ns.items }}"
     "{{ ns.items | sum }}{{ ns.items | reverse | list }}", {}),
    ("{% for x in [1, 2] %}{% continue %}{% else %}E1{% endfor %}"
     "{% for x in [1, 2] %}{% if x == 1 %}{% continue %}{% endif %}{{ x }}"
     "{% else %}E2{% endfor %}{% for x in [1] %}{% break %}{% else %}E3"
     "{% endfor %}{{ 1 | round }}{{ 2 | round(1) }}{{ 2 | round(0, 'floor') }}",
     {}),
    ("{{ ms | selectattr('r') }}", {"ms": [{"r": 1}]}),
    ("{{ [1, missing] }}", {}),
    ("{{ d.items() }} {{ d.keys() }} {{ d.values() | list }} "
     "{{ d.items() | length }} {{ 'a' in d.keys() }}", {"d": {"a": 1}}),
    ("{{ missing | int }}", {}),
    ("{% set g = ms | selectattr('r') %}{% for m in g %}{{ m.r }}{% endfor %}"
     "|{% for m in g %}again{% endfor %}|{{ g | list }}|"
     "{{ 'yes' if ms | selectattr('x') else 'no' }}|"
     "{{ (ms | map(attribute='r') | first) }}|{{ ms | reverse | list }}",
     {"ms": [{"r": 1}, {"r": 2}]}),
    ("{{ 'a,b' | replace(',', '\\n') }}|{{ 'a\\tb' | replace('\\t', ' ') }}", {}),
]


def render_features():
    features = []
    for template, context in FEATURES:
        feature = {"template": template, "context": context}
        try:
            feature["expected"] = chat_template_utils._compile_jinja_template(
                template).render(**context)
        except Exception as error:  # Every error jinja2 raises is expected.
            feature["error"] = str(error)
            feature["raised"] = type(error) is jinja2.exceptions.TemplateError
        features.append(feature)
    with open(os.path.join(ROOT, "text/jinja/tests/testdata/features.json"), "w",
              encoding="utf-8") as f:
        json.dump(features, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"features: {len(features)} templates")


def main():
    chat_template_utils.datetime = FixedClock
    render_features()
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
