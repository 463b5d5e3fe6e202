#!/usr/bin/env bash
# The Python reference stack the fixture generators and parity references
# are written with (tools/gen_*_fixtures.py, tools/gen_chat_template_references.py,
# tools/diff_chat_templates.py, benchmarks/drivers/quantize_fp8_block.py and
# transformers_forward.py): PyPI's torch, transformers 5, jinja2 (the chat
# template reference), compressed-tensors and accelerate (transformers' FP8
# loaders), ml_dtypes (fp8 round trips), sentence-transformers, sentencepiece
# and protobuf (tools/gen_unigram_fixtures.py trains SentencePiece models and
# transformers reads them).
# Usage: tools/setup_reference_venv.sh   (then .venv-ref/bin/python TOOL ...)
# Env: REF_VENV, the venv (default: <repo>/.venv-ref). Idempotent.
# torch's PyPI wheel is the CUDA build (its nvidia-* dependencies are about
# 5 GB); it runs on a CPU-only machine.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${REF_VENV:-${ROOT}/.venv-ref}"
PINS=(
  "torch==2.11.0" "transformers==5.24.0" "safetensors==0.8.0"
  "tokenizers==0.23.3" "jinja2==3.1.6" "compressed-tensors==0.20.1"
  "accelerate==1.15.0" "sentence-transformers==6.2.0" "numpy==1.26.4"
  "ml_dtypes==0.5.4" "sentencepiece==0.2.1" "protobuf==6.33.6"
)
if [[ -x "${VENV}/bin/python" ]] &&
    "${VENV}/bin/python" - "${PINS[@]}" <<'PY' 2>/dev/null; then
import sys
from importlib.metadata import version
for pin in sys.argv[1:]:
    name, want = pin.split("==")
    assert version(name) == want, pin
PY
  exit 0
fi
python3 -m venv "${VENV}"
"${VENV}/bin/pip" install --quiet "${PINS[@]}"
echo "setup_reference_venv: ${VENV}"
