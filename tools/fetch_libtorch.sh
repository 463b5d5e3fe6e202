#!/usr/bin/env bash
# Fetches the LibTorch castserve builds against: the C++ distribution inside
# PyPI's torch 2.11.0 wheel (+cu130: torch/lib and torch/include), plus the
# two CUDA 13.0 runtime libraries that libtorch_cpu.so loads even on a machine
# without a GPU (libcudart.so.13, libcupti.so.13, from NVIDIA's PyPI wheels).
# Every wheel is pinned by sha256. Quick when the cache is complete already.
#
# Layout (the wheels' own: torch/lib's RPATH finds ../../nvidia/cu13/lib):
#   $CASTSERVE_CACHE/libtorch-2.11.0/torch/{lib,include}
#   $CASTSERVE_CACHE/libtorch-2.11.0/nvidia/cu13/lib
# CASTSERVE_CACHE defaults to ~/.cache/castserve; third_party/libtorch.bzl
# reads the same default. Prints the LibTorch root on its last line.
set -euo pipefail

cache="${CASTSERVE_CACHE:-${HOME}/.cache/castserve}"
root="${cache}/libtorch-2.11.0"
stamp="${root}/.complete"

if [[ -f "${stamp}" ]]; then
  echo "${root}/torch"
  exit 0
fi

# name==version  sha256 of the one wheel pip picks for CPython 3.11 on x86-64.
wheels=(
  "torch==2.11.0 7aa2f9bbc6d4595ba72138026b2074be1233186150e9292865e04b7a63b8c67a"
  "nvidia-cuda-runtime==13.0.96 7f82250d7782aa23b6cfe765ecc7db554bd3c2870c43f3d1821f1d18aebf0548"
  "nvidia-cuda-cupti==13.0.85 4eb01c08e859bf924d222250d2e8f8b8ff6d3db4721288cf35d14252a4d933c8"
)

download="${cache}/wheels"
mkdir -p "${download}"
requirements="${download}/requirements.txt"
: >"${requirements}"
for wheel in "${wheels[@]}"; do
  read -r spec sha256 <<<"${wheel}"
  echo "${spec} --hash=sha256:${sha256}" >>"${requirements}"
done

echo "fetch_libtorch: downloading LibTorch 2.11.0+cu130 (about 545 MB, sha256-pinned) into ${cache}" >&2
# --require-hashes refuses any file whose sha256 differs from the pin.
python3 -m pip download --quiet --no-deps --require-hashes \
  --only-binary=:all: --platform manylinux_2_28_x86_64 \
  --platform manylinux_2_25_x86_64 --platform manylinux_2_17_x86_64 \
  --python-version 3.11 --implementation cp --abi cp311 \
  -d "${download}" -r "${requirements}" >&2

rm -rf "${root}.partial"
mkdir -p "${root}.partial"
for file in "${download}"/torch-2.11.0-*.whl; do
  python3 - "${file}" "${root}.partial" <<'PY'
import sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as archive:
    for name in archive.namelist():
        if name.startswith(("torch/lib/", "torch/include/")) or name == "torch/version.py":
            archive.extract(name, dest)
PY
done
for file in "${download}"/nvidia_cuda_runtime-*.whl "${download}"/nvidia_cuda_cupti-*.whl; do
  python3 -m zipfile -e "${file}" "${root}.partial"
done
rm -rf "${root}"
mv "${root}.partial" "${root}"
touch "${stamp}"
# The downloaded wheels are not needed once unpacked.
rm -f "${download}"/*.whl
echo "${root}/torch"
