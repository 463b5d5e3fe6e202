#!/usr/bin/env bash
# The README's run command: installs what is missing, builds castserve and
# serves the embedded default model repository (deploy/model_repository) on
# gRPC port 8001 and metrics port 8002. Extra arguments go to castserve.
set -euo pipefail
cd "$(dirname "$0")/.."

./tools/install_deps.sh
bazel build //server:castserve //client:castserve-client
exec "$(bazel info bazel-bin)/server/castserve" \
  --model-repository=deploy/model_repository "$@"
