#!/usr/bin/env bash
# Builds the llama.cpp peer (benchmarks/peer/README.md, "llama.cpp"):
#  1. downloads the source distribution of llama-cpp-python (PyPI) pinned by
#     version and sha256 — it vendors llama.cpp's full tree, converter included;
#  2. builds llama-server from it with the system cmake (CPU only,
#     -DGGML_NATIVE=ON, Release) into $PEER_HOME/bin;
#  3. the peer venv (setup_peer_venv.sh) plus the gguf package (0.19.0) from
#     the same tree, and converts the Llama-1B
#     benchmark checkpoint (benchmarks/drivers/gen_llama_checkpoint.py --shape
#     1b, made if missing) to GGUF F32, BF16 and Q8_0 with
#     convert_hf_to_gguf.py.
#
# Usage: benchmarks/peer/setup_llamacpp.sh [--jobs N]
# Env:   PEER_HOME            (default ~/.cache/castserve/peer)
#        CASTSERVE_BENCH_DIR  (default /tmp/castserve-bench; the checkpoint is
#                             $CASTSERVE_BENCH_DIR/llama-1b, the GGUF files go
#                             to $CASTSERVE_BENCH_DIR/llama-1b-gguf)
# Idempotent: each step is skipped when its output exists.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "${HERE}/../.." && pwd)"
PEER_HOME="${PEER_HOME:-${HOME}/.cache/castserve/peer}"
DATA="${CASTSERVE_BENCH_DIR:-/tmp/castserve-bench}"
CKPT="${DATA}/llama-1b"
GGUF_DIR="${DATA}/llama-1b-gguf"
JOBS=4
if [[ "${1:-}" == "--jobs" ]]; then JOBS="$2"; fi

VERSION="0.3.36"
SDIST="llama_cpp_python-${VERSION}.tar.gz"
SDIST_SHA256="832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"

mkdir -p "${PEER_HOME}/dl" "${PEER_HOME}/bin"
if [[ ! -f "${PEER_HOME}/dl/${SDIST}" ]]; then
  python3 -m pip download --no-deps --no-binary :all: \
    "llama-cpp-python==${VERSION}" -d "${PEER_HOME}/dl"
fi
echo "${SDIST_SHA256}  ${PEER_HOME}/dl/${SDIST}" | sha256sum -c -
SRC="${PEER_HOME}/src/llama_cpp_python-${VERSION}/vendor/llama.cpp"
if [[ ! -f "${SRC}/CMakeLists.txt" ]]; then
  mkdir -p "${PEER_HOME}/src"
  tar xzf "${PEER_HOME}/dl/${SDIST}" -C "${PEER_HOME}/src"
fi

BUILD="${PEER_HOME}/build-${VERSION}"
if [[ ! -x "${PEER_HOME}/bin/llama-server" ]]; then
  # No curl/openssl (nothing is downloaded at run time), no prebuilt web UI
  # (it would be fetched), static libraries so the binaries stand alone.
  cmake -S "${SRC}" -B "${BUILD}" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON \
    -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DGGML_CUDA=OFF -DGGML_VULKAN=OFF
  # llama-server links the multimodal library too: ~210 compile steps.
  cmake --build "${BUILD}" -j "${JOBS}" --target llama-server
  cp "${BUILD}/bin/llama-server" "${PEER_HOME}/bin/llama-server"
fi
"${PEER_HOME}/bin/llama-server" --version 2>&1 | head -3

VENV="${PEER_HOME}/venv"
"${HERE}/setup_peer_venv.sh"
if [[ "$("${VENV}/bin/pip" show gguf 2>/dev/null | sed -n "s/^Version: //p")" != "0.19.0" ]]; then
  "${VENV}/bin/pip" install --quiet --no-deps "${SRC}/gguf-py"
fi

if [[ ! -f "${CKPT}/config.json" ]]; then
  "${VENV}/bin/python" "${ROOT}/benchmarks/drivers/gen_llama_checkpoint.py" --shape 1b --out "${CKPT}"
fi
mkdir -p "${GGUF_DIR}"
# F32 and BF16 as the checkpoint's bf16 converts; Q8_0 by the same converter
# (its own Q8_0 quantizer: blocks of 32 with an f16 scale, what llama-quantize
# writes for Q8_0 too).
for t in f32 bf16 q8_0; do
  if [[ ! -f "${GGUF_DIR}/llama-1b-${t}.gguf" ]]; then
    "${VENV}/bin/python" "${HERE}/convert_llama_gguf.py" --convert "${SRC}/convert_hf_to_gguf.py" \
      --checkpoint "${CKPT}" --outtype "${t}" --outfile "${GGUF_DIR}/llama-1b-${t}.gguf"
  fi
done
ls -la "${GGUF_DIR}"
