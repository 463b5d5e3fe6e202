#!/usr/bin/env python3
"""castserve side by side with the native runtimes a user would pick for
speed on a CPU: llama.cpp's server for generation, ONNX Runtime for
embeddings (issue 26). One run, interleaved rounds, same threads; prints
tables with ratios within the run and writes a JSON result. Never asserts on
a time.

Subcommands:
  llamacpp  Llama-1B shape: prefill, single-stream decode, aggregate with N
            streams, CPU-seconds per token, peak RSS; castserve f32 / bf16 /
            fp8 storage against llama.cpp F32 / BF16 / Q8_0
  ort       all-MiniLM-L6-v2: latency at batch 1/8/32 x sequence 16/128,
            castserve served (REST) against ONNX Runtime in-process

Setup (once): benchmarks/peer/setup_llamacpp.sh, setup_onnxruntime.sh.
Run from the repository root, e.g.
  ~/.cache/castserve/peer/venv/bin/python benchmarks/peer/run_native_peers.py \\
      llamacpp --threads 1 --rounds 2 --out benchmarks/results/peer_llamacpp_t1.json
See benchmarks/peer/README.md, "Native peers".
"""

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bench_llamacpp  # noqa: E402
import bench_ort  # noqa: E402
import common  # noqa: E402


def main():
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    shared = argparse.ArgumentParser(add_help=False)
    shared.add_argument("--castserve", default=common.DEFAULT_CASTSERVE)
    shared.add_argument("--castserve-flag", action="append", default=[],
                        metavar="FLAG")
    shared.add_argument("--threads", type=int, default=1)
    shared.add_argument("--rounds", type=int, default=2)
    shared.add_argument("--out", default=None, metavar="JSON")
    shared.add_argument("--no-lock", action="store_true")
    shared.add_argument("--keep-logs", action="store_true")
    commands = parser.add_subparsers(dest="command", required=True)
    for name, module in (("llamacpp", bench_llamacpp), ("ort", bench_ort)):
        sub = commands.add_parser(name, parents=[shared],
                                  description=module.__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(sub)
        sub.set_defaults(module=module)
    args = parser.parse_args()
    args.castserve = os.path.abspath(args.castserve)
    return common.run_subcommand(args)

if __name__ == "__main__":
    sys.exit(main())
