#!/usr/bin/env bash
# Builds what castserve ships: the daemon (//server:castserve) and its client
# (//client:castserve-client). tools/run_server.sh (the README's run command)
# and deploy/Dockerfile's builder stage both build through this script, so the
# image holds the binaries the README runs.
#
# Usage: tools/build_release.sh [--install-dir=DIR] [BAZEL_BUILD_OPTION...]
#   --install-dir=DIR  also copy the two binaries into DIR (bazel-bin is a
#                      symlink into Bazel's cache, which an image cannot COPY)
#   other arguments go to `bazel build` (e.g. --compilation_mode=opt).
# Env: BAZEL, the Bazel command with its startup options (default: bazel);
#      LIBTORCH, another LibTorch root (third_party/libtorch.bzl).
set -euo pipefail
cd "$(dirname "$0")/.."

read -r -a bazel <<<"${BAZEL:-bazel}"
install_dir=""
build_options=()
for arg in "$@"; do
  case "${arg}" in
    --install-dir=*) install_dir="${arg#--install-dir=}" ;;
    --install-dir)
      echo "build_release: --install-dir needs a value: --install-dir=DIR" >&2
      exit 2 ;;
    *) build_options+=("${arg}") ;;
  esac
done

targets=(//server:castserve //client:castserve-client)
"${bazel[@]}" build "${build_options[@]}" "${targets[@]}"

if [[ -n "${install_dir}" ]]; then
  bin="$("${bazel[@]}" info "${build_options[@]}" bazel-bin)"
  mkdir -p "${install_dir}"
  install -m 0755 "${bin}/server/castserve" "${bin}/client/castserve-client" \
    "${install_dir}/"
  echo "build_release: castserve and castserve-client in ${install_dir}"
fi
