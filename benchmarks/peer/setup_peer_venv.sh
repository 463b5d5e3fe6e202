#!/usr/bin/env bash
# The venv of the llama.cpp and ONNX Runtime peers ($PEER_HOME/venv, default
# ~/.cache/castserve/peer/venv): the pins below, from PyPI. torch is PyPI's
# (CUDA) build, about 5 GB with its nvidia-* wheels; it runs on a CPU-only
# machine. Used by setup_llamacpp.sh (convert_hf_to_gguf.py needs torch and
# transformers; the gguf package is installed from the llama.cpp tree) and
# setup_onnxruntime.sh (export and onnxruntime). Idempotent: a stamp file
# records the pins.
set -euo pipefail
PEER_HOME="${PEER_HOME:-${HOME}/.cache/castserve/peer}"
VENV="${PEER_HOME}/venv"
PINS=(
  "torch==2.11.0" "transformers==5.24.0" "safetensors==0.8.0"
  "tokenizers==0.23.3" "numpy==2.2.6" "onnxruntime==1.31.1" "onnx==1.23.2"
  "onnxscript==0.7.2" "psutil==5.9.8" "requests==2.34.2"
  "sentencepiece==0.2.1" "pyyaml==6.0.4" "tqdm==4.70.1"
)
STAMP="${VENV}/.peer-pins"
if [[ -x "${VENV}/bin/python" && -f "${STAMP}" && "$(cat "${STAMP}")" == "${PINS[*]}" ]]; then
  exit 0
fi
[[ -x "${VENV}/bin/python" ]] || python3 -m venv "${VENV}"
"${VENV}/bin/pip" install --quiet "${PINS[@]}"
echo "${PINS[*]}" >"${STAMP}"
echo "peer venv: ${VENV}"
