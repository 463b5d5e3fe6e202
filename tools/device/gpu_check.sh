#!/bin/bash
# The H200 check of issue 15, on a lent GPU machine (x86-64, python3 with
# torch 2.11.0+cu130, no Bazel, no gRPC, no network), in under 8 minutes:
#   (a) the CUDA kernel exactness tests and the other GPU test targets;
#   (b) Experiment 1 on the GPU: the SigLIP-so400m-shaped tower in fp32 and
#       bf16 resident, fp8 e5m2 / bf16 and fp8 e4m3 per-row / bf16, footprint
#       and caching-allocator peak at batch 1, 4, 16, latency at batch 16;
#   (c) the daemon serving that model on KIND_GPU, driven by castserve-client,
#       with its GPU metrics and ModelStatistics scraped.
# Results: OUT_DIR/results.json (one entry per part: PASSED, FAILED or
# SKIPPED with the reason) beside each part's raw outputs and logs.
#
# The binaries come prebuilt from tools/device/pack_daemon.sh (the CUDA build
# here, with the non-torch shared libraries they need); they run against the
# machine's own torch and NVIDIA libraries, found through python3.
#
# Usage: tools/device/gpu_check.sh OUT_DIR [--pack=DIR] [--model=DIR]
#          [--parts=kernels,experiment,daemon] [--seconds=N] [--python=BIN]
#   --python   the python3 whose torch the binaries use (default python3)
#   --pack     the packed folder (default tools/device/pack)
#   --model    an existing gen_siglip_so400m.py folder (default: generated
#              under OUT_DIR/..., 1.6 GB, only when a GPU is present)
#   --seconds  load duration of part (c) (default 30)
# Exit status: 0 when no part FAILED (SKIPPED parts included), 1 otherwise,
# 2 on bad arguments.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# Standard library only: any python3 runs it; --python names the one with
# torch (default: python3).
exec python3 "$here/gpu_check.py" "$@"
