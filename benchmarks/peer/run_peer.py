#!/usr/bin/env python3
"""Peer benchmark: castserve side by side with the Python stack a user would
run instead (PyTorch + transformers, diffusers' layerwise casting, KServe's
Python model server), on the same checkpoints, in one run with interleaved
rounds. Prints tables with same-run ratios castserve / Python and writes a
JSON result file. It never asserts on a time.

Subcommands:
  serving  MiniLM behind KServe v2 gRPC: throughput, latency, peak RSS
  siglip   SigLIP-base vision tower latency, f32 / bf16 / fp8 casting
  llama    Llama-1B-shaped bf16 checkpoint: startup, load, first and second
           forward, f32 compute

Run from the repository root with the peer venv (benchmarks/peer/setup_peer.sh
creates it; this script re-executes itself under it when started with
another Python):
  .venv-peer/bin/python benchmarks/peer/run_peer.py serving --rounds 3
See benchmarks/peer/README.md.
"""

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(HERE))
PEER_VENV = os.environ.get("PEER_VENV", os.path.join(REPO_ROOT, ".venv-peer"))


def reexec_in_venv():
    """Runs this script under the peer venv's Python when the current one
    lacks torch or tritonclient."""
    try:
        import torch  # noqa: F401
        import tritonclient.grpc  # noqa: F401
        return
    except ImportError:
        pass
    python = os.path.join(PEER_VENV, "bin", "python")
    if os.path.exists(python) and os.path.realpath(sys.prefix) != \
            os.path.realpath(PEER_VENV):
        os.execv(python, [python, os.path.abspath(__file__), *sys.argv[1:]])
    sys.exit(f"torch/tritonclient missing and no peer venv at {PEER_VENV}: "
             f"run benchmarks/peer/setup_peer.sh first")


def parse_args(argv=None):
    import common

    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    shared = argparse.ArgumentParser(add_help=False)
    shared.add_argument("--castserve", default=common.DEFAULT_CASTSERVE,
                        help="castserve binary (default: %(default)s)")
    shared.add_argument("--castserve-flag", action="append", default=[],
                        metavar="FLAG",
                        help="extra castserve flag, repeatable (a flag "
                             "castserve rejects as unknown is dropped)")
    shared.add_argument("--threads", type=int, default=1,
                        help="intra-op threads of both sides (castserve: "
                             "--intra-op-threads; Python: "
                             "torch.set_num_threads; both: OMP/MKL_NUM_THREADS)")
    shared.add_argument("--rounds", type=int, default=3,
                        help="interleaved rounds")
    shared.add_argument("--out", default=None, metavar="JSON",
                        help="result file (default: "
                             f"{common.BENCH_DIR}/peer_<subcommand>.json)")
    shared.add_argument("--no-lock", action="store_true",
                        help=f"do not hold {common.LOCK_PATH} while timing")
    shared.add_argument("--keep-logs", action="store_true",
                        help="keep the scratch folder with server logs")
    commands = parser.add_subparsers(dest="command", required=True)

    import bench_llama
    import bench_serving
    import bench_siglip
    helps = {"serving": "MiniLM served over KServe v2 gRPC: req/s, latency, "
                        "peak RSS",
             "siglip": "SigLIP-base vision tower latency, f32/bf16/fp8",
             "llama": "Llama-1B shape: startup, load, first/second forward"}
    for name, module in (("serving", bench_serving), ("siglip", bench_siglip),
                         ("llama", bench_llama)):
        sub = commands.add_parser(
            name, parents=[shared], help=helps[name],
            description=module.__doc__,
            formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(sub)
        sub.set_defaults(module=module)
    args = parser.parse_args(argv)
    args.castserve = os.path.abspath(args.castserve)
    return args


def main():
    reexec_in_venv()
    sys.path.insert(0, HERE)
    import common

    common.offline_env()
    return common.run_subcommand(parse_args())

if __name__ == "__main__":
    sys.exit(main())
