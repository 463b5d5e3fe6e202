#!/usr/bin/env python3
r"""Differential check of castserve's chat template interpreter against jinja2.

Generates random templates from a small Jinja grammar (expressions over a
fixed context with filters, tests, methods and operators; if/for/set/
namespace/macro statements; whitespace control), renders each with jinja2 as
transformers configures it and with //text/jinja/tests:render_chat_template, and
reports every difference:

  - both rendered, different text                     (a wrong prompt)
  - jinja2 failed, castserve rendered                  (a wrong prompt)
  - with --strict: jinja2 rendered, castserve failed (without it these
    are counted as "castserve stricter": errors, never wrong prompts)
  - raise_exception messages that differ

Refusals of unsupported constructs are counted, not reported. Seeded.

  bazel build //text/jinja/tests:render_chat_template
  .venv-ref/bin/python tools/diff_chat_templates.py --count 3000 --seed 1
"""
import argparse
import copy
import datetime as datetime_module
import json
import os
import random
import subprocess
import sys

import jinja2
from transformers.utils import chat_template_utils

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
BINARY = os.path.join(ROOT, "bazel-bin/text/jinja/tests/render_chat_template")

CONTEXT = {
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hello  World\n"},
        {"role": "assistant", "content": "<think>hm</think>Hi 😀"},
    ],
    "s": "Hello World", "n": 3, "f": 2.5, "l": [3, 1, 2],
    "d": {"b": 1, "a": "x"}, "e": "", "t": True, "z": None,
    "u": "ünï 你好", "nums": [1, 2, 3, 4],
}
ATOMS = ["s", "n", "f", "l", "d", "e", "t", "z", "u", "nums", "missing",
         "'lit'", '"dq"', "0", "-2", "1.5", "[1, 'a']", "{'k': 'v'}", "none",
         "true", "false", "messages", "messages[0]", "messages[-1].content",
         "d.a", "d['b']", "l[1:]", "s[::-1]", "nums[1:3]", "x", "ns.v",
         "loop.index", "(1, 2)", "'a\\nb'", "' pad '", "10", "7"]
FILTERS = ["upper", "lower", "trim", "length", "first", "last", "list",
           "string", "int", "float", "tojson", "join(', ')", "join",
           "default('dflt')", "reverse", "sort", "unique", "items",
           "capitalize", "title", "replace('l', 'L')", "abs", "round", "sum",
           "max", "min", "indent(2)", "e", "selectattr('role')",
           "map(attribute='role')", "select('odd')", "reject('even')",
           "dictsort", "count", "d(1)", "tojson(indent=2)", "safe",
           "rejectattr('role', 'equalto', 'user')", "sort(reverse=true)",
           "trim('H')", "int(5)", "first | upper", "list | length"]
TESTS = ["defined", "undefined", "none", "string", "number", "integer",
         "float", "mapping", "iterable", "sequence", "odd", "even", "true",
         "false", "boolean", "lower", "upper", "eq 3", "in [1, 2, 3]",
         "divisibleby 2", "callable", "not none", "not defined", "gt 2",
         "sameas none"]
BINOPS = ["+", "-", "*", "/", "//", "%", "~", "==", "!=", "<", ">", "<=",
          ">=", "in", "not in", "and", "or", "**"]
METHODS = [".strip()", ".upper()", ".split()", ".split('l')",
           ".startswith('H')", ".endswith('d')", ".replace('o', '0')",
           ".lstrip('H')", ".title()", ".get('a')", ".get('q', 0)",
           ".items()", ".keys()", ".values()", ".find('o')", ".count('l')",
           ".rstrip()", ".rsplit(' ', 1)", ".lower()", ".capitalize()"]


def expression(rng, depth=0):
    choice = rng.randrange(9 if depth < 3 else 2)
    if choice == 0:
        return rng.choice(ATOMS)
    if choice == 1:
        return f"{rng.choice(ATOMS)} | {rng.choice(FILTERS)}"
    if choice == 2:
        return (f"({expression(rng, depth + 1)} {rng.choice(BINOPS)} "
                f"{expression(rng, depth + 1)})")
    if choice == 3:
        return f"not {expression(rng, depth + 1)}"
    if choice == 4:
        return f"{rng.choice(ATOMS)} is {rng.choice(TESTS)}"
    if choice == 5:
        return f"{rng.choice(ATOMS)}{rng.choice(METHODS)}"
    if choice == 6:
        return (f"({expression(rng, depth + 1)} if {expression(rng, depth + 1)}"
                f" else {expression(rng, depth + 1)})")
    if choice == 7:
        return f"[{expression(rng, depth + 1)}, {expression(rng, depth + 1)}]"
    return f"({expression(rng, depth + 1)}) | {rng.choice(FILTERS)}"


def tag(rng, body):
    left = rng.choice(["{%", "{%-", "{%", "{%+"])
    right = rng.choice(["%}", "-%}", "%}"])
    return f"{left} {body} {right}"


def text(rng):
    return rng.choice(["", "a", " b ", "\n", "  \n", "\n  ", "x\ny", "\t"])


def statements(rng, depth=0, in_loop=False):
    parts = []
    for _ in range(rng.randrange(1, 4)):
        choice = rng.randrange(8 if depth < 2 else 3)
        parts.append(text(rng))
        if choice == 0:
            left = rng.choice(["{{", "{{-"])
            right = rng.choice(["}}", "-}}"])
            parts.append(f"{left} {expression(rng)} {right}")
        elif choice == 1:
            parts.append(tag(rng, f"set x = {expression(rng)}"))
        elif choice == 2:
            parts.append(rng.choice(["{# c #}", "{#- c -#}", "\n  {# c #}\n"]))
        elif choice == 3:
            parts.append(tag(rng, f"if {expression(rng)}"))
            parts.append(statements(rng, depth + 1, in_loop))
            if rng.random() < 0.5:
                parts.append(tag(rng, f"elif {expression(rng)}"))
                parts.append(statements(rng, depth + 1, in_loop))
            if rng.random() < 0.5:
                parts.append(tag(rng, "else"))
                parts.append(statements(rng, depth + 1, in_loop))
            parts.append(tag(rng, "endif"))
        elif choice == 4:
            target = rng.choice(["x", "m", "k, v"])
            iterable = rng.choice(["messages", "l", "nums", "s", "d",
                                   "d.items()", "range(3)", "missing",
                                   expression(rng)])
            condition = f" if {expression(rng)}" if rng.random() < 0.3 else ""
            parts.append(tag(rng, f"for {target} in {iterable}{condition}"))
            parts.append(statements(rng, depth + 1, True))
            if rng.random() < 0.3:
                parts.append(tag(rng, "else"))
                parts.append(statements(rng, depth + 1, in_loop))
            parts.append(tag(rng, "endfor"))
        elif choice == 5 and in_loop:
            parts.append(tag(rng, rng.choice(["break", "continue"])))
        elif choice == 5:
            parts.append(tag(rng, f"set ns = namespace(v={expression(rng)})"))
        elif choice == 6:
            parts.append(tag(rng, f"set ns.v = {expression(rng)}"))
        else:
            parts.append("{% macro mac(a, b='B') %}[{{ a }}{{ b }}]"
                         "{% endmacro %}{{ mac(" + expression(rng) + ") }}")
    return "".join(parts)


class FixedClock(datetime_module.datetime):
    @classmethod
    def now(cls, tz=None):
        return datetime_module.datetime(2026, 7, 4, 15, 30, 0)


def render_python(template):
    try:
        compiled = chat_template_utils._compile_jinja_template(template)
        # A fresh copy: jinja2's filters may change the context in place
        # (indent of a list extends it).
        return {"ok": True,
                "text": compiled.render(**copy.deepcopy(CONTEXT))}
    except jinja2.exceptions.TemplateError as error:
        raised = type(error) is jinja2.exceptions.TemplateError
        return {"ok": False, "error": str(error), "raised": raised}
    except Exception as error:  # TypeError, ValueError, ... as jinja2 lets through.
        return {"ok": False, "error": f"{type(error).__name__}: {error}"}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--show", type=int, default=10)
    parser.add_argument("--strict", action="store_true",
                        help="also report renders castserve refuses")
    args = parser.parse_args()
    chat_template_utils.datetime = FixedClock
    rng = random.Random(args.seed)
    templates = [statements(rng) for _ in range(args.count)]
    lines = "".join(json.dumps({"template": t, "context": CONTEXT}) + "\n"
                    for t in templates)
    result = subprocess.run([BINARY], input=lines.encode(), capture_output=True,
                            check=True)
    outputs = [json.loads(line) for line in result.stdout.decode().splitlines()]
    assert len(outputs) == len(templates)
    counts = {"same": 0, "both failed": 0, "unsupported": 0,
              "castserve stricter": 0, "different": 0}
    shown = 0
    for template, theirs in zip(templates, outputs):
        ours = render_python(template)
        if ours["ok"] and theirs["ok"] and ours["text"] == theirs["text"]:
            counts["same"] += 1
            continue
        if not ours["ok"] and not theirs["ok"]:
            if ours.get("raised") and theirs.get("raised") != ours["error"]:
                pass  # A raise_exception whose text differs: report it.
            else:
                counts["both failed"] += 1
                continue
        if ours["ok"] and not theirs["ok"] and (
                "unsupported construct" in theirs["error"]):
            counts["unsupported"] += 1
            continue
        if ours["ok"] and not theirs["ok"] and not args.strict:
            # jinja2 rendered what castserve refuses (a lazy filter never
            # consumed, printing a generator's address): an error, never a
            # wrong prompt.
            counts["castserve stricter"] += 1
            continue
        counts["different"] += 1
        if shown < args.show:
            shown += 1
            print(json.dumps({"template": template, "jinja2": ours,
                              "castserve": theirs}, ensure_ascii=False))
    print(counts)
    return 1 if counts["different"] else 0


if __name__ == "__main__":
    sys.exit(main())
