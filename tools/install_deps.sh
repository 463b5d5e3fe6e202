#!/usr/bin/env bash
# Installs what castserve needs from Debian 12's packages (run as root).
# Usage: tools/install_deps.sh [--cpu-only]
# Quick when everything is present already: it only calls apt-get for
# packages that are missing.
set -euo pipefail

if (($# > 1)) || [[ $# == 1 && "$1" != "--cpu-only" ]]; then
  echo "usage: tools/install_deps.sh [--cpu-only]" >&2
  exit 2
fi

packages=(
  # Build: Bazel and the C++ libraries the daemon links.
  bazel-bootstrap g++ libgrpc++-dev protobuf-compiler protobuf-compiler-grpc
  libprotobuf-dev libabsl-dev prometheus-cpp-dev
  # The metrics port's HTTP(S) server, and GnuTLS for client certificates.
  libmicrohttpd-dev libgnutls28-dev
  # Text: RE2 for the tokenizers' pre-tokenizer patterns, SentencePiece for
  # tokenizer.model files. JSON: castserve reads and writes it with
  # nlohmann/json; RapidJSON and simdjson only build
  # benchmarks/json_benchmark.cc, so that the measurements behind that choice
  # can be repeated.
  libre2-dev libsentencepiece-dev nlohmann-json3-dev rapidjson-dev libsimdjson-dev
  # ICU: Unicode normalization, categories and lower-casing for //text.
  libicu-dev
  # perf_analyzer (from PyPI's tritonclient wheel) needs libb64.
  libb64-0d
  libgtest-dev libgmock-dev libbenchmark-dev
  # The libFuzzer targets (tools/run_fuzzers.sh): clang with its fuzzer and
  # sanitizer runtimes.
  clang libclang-rt-14-dev
  # Tests: Debian's Python with gRPC, promtool, clang-format, openssl (test
  # certificates).
  python3 python3-pip python3-venv python3-numpy python3-grpcio python3-protobuf prometheus clang-format
  openssl
  curl ca-certificates
)

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "ok installed"; then
    missing+=("$package")
  fi
done

if ((${#missing[@]} > 0)); then
  echo "install_deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# LibTorch 2.11.0 (PyPI's torch wheel holds the C++ distribution, with MKL and
# oneDNN inside libtorch_cpu): Debian's libtorch-dev is 1.13. Where nvcc is
# present, also the CUDA runtime wheels `bazel build --config=cuda` links
# against (about 2.6 GB, once) — unless --cpu-only: the run command builds the
# CPU daemon, which needs none of them.
if [[ "${1:-}" != "--cpu-only" && -x /usr/local/cuda/bin/nvcc ]]; then
  "$(dirname "$0")/fetch_libtorch.sh" --cuda >/dev/null
else
  "$(dirname "$0")/fetch_libtorch.sh" >/dev/null
fi
