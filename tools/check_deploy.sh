#!/usr/bin/env bash
# Validates deploy/ offline (deploy/README.md, "Validation"): fetches the
# tools (tools/fetch_deploy_tools.sh), then tools/check_deploy.py renders
# every Kubernetes overlay and validates each object, the KServe manifests,
# the Prometheus adapter rules and configuration, and the Dockerfile.
# //tests:deploy_manifests_test runs the same tools/check_deploy.py with the
# same tools (tools/test_all.sh passes their paths).
#
# The Dockerfile's runtime packages are checked against the libraries of the
# built binaries (bazel-bin/, from tools/build_release.sh) when they exist.
# Extra arguments go to tools/check_deploy.py.
set -euo pipefail
cd "$(dirname "$0")/.."

./tools/fetch_deploy_tools.sh
binaries=()
for binary in bazel-bin/server/castserve bazel-bin/client/castserve-client; do
  if [[ -x "${binary}" ]]; then
    binaries+=("--binary=${binary}")
  fi
done
if ((${#binaries[@]} < 2)); then
  echo "check_deploy: no bazel-bin/ binaries; the runtime packages are checked" \
       "once tools/build_release.sh has built them" >&2
fi
exec .venv/bin/python tools/check_deploy.py \
  --kubectl=.venv/deploy-tools/usr/bin/kubectl \
  --hadolint=.venv/bin/hadolint \
  --promtool=promtool \
  "${binaries[@]}" "$@"
