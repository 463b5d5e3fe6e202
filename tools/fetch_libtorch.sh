#!/usr/bin/env bash
# Fetches the LibTorch castserve builds against: the C++ distribution inside
# PyPI's torch 2.11.0 wheel (+cu130: torch/lib and torch/include), plus the
# two CUDA 13.0 runtime libraries that libtorch_cpu.so loads even on a machine
# without a GPU (libcudart.so.13, libcupti.so.13, from NVIDIA's PyPI wheels).
# Every wheel is pinned by sha256. Quick when the cache is complete already.
#
# `--cuda` adds what linking libtorch_cuda.so needs (`bazel build
# --config=cuda`): the CUDA 13.0 runtime wheels the torch wheel declares in its
# METADATA (Requires-Dist) — cuBLAS, cuDNN, NCCL, cuSPARSELt, NVSHMEM, cuFFT,
# cuFile, cuRAND, cuSOLVER, cuSPARSE, nvJitLink, NVRTC, NVTX — at the versions
# pip resolves for torch==2.11.0 (about 2.6 GB more). The toolkit's own copies
# are not used: the wheel was linked against these.
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
cuda_stamp="${root}/.complete-cuda"

with_cuda=false
case "${1:-}" in
  "") ;;
  --cuda) with_cuda=true ;;
  *)
    echo "usage: $0 [--cuda]" >&2
    exit 2
    ;;
esac

# name==version  sha256, resolved by pip for torch==2.11.0 (x86-64, CPython 3.11).
cuda_wheels=(
  "nvidia-cublas==13.1.0.3 ee8722c1f0145ab246bccb9e452153b5e0515fd094c3678df50b2a0888b8b171"
  "nvidia-cudnn-cu13==9.19.0.56 d20e1734305e9d68889a96e3f35094d733ff1f83932ebe462753973e53a572bf"
  "nvidia-nccl-cu13==2.28.9 e4553a30f34195f3fa1da02a6da3d6337d28f2003943aa0a3d247bbc25fefc42"
  "nvidia-cusparselt-cu13==0.8.0 25e30a8a7323935d4ad0340b95a0b69926eee755767e8e0b1cf8dd85b197d3fd"
  "nvidia-nvshmem-cu13==3.4.5 290f0a2ee94c9f3687a02502f3b9299a9f9fe826e6d0287ee18482e78d495b80"
  "nvidia-cufft==12.0.0.61 6c44f692dce8fd5ffd3e3df134b6cdb9c2f72d99cf40b62c32dde45eea9ddad3"
  "nvidia-cufile==1.15.1.6 08a3ecefae5a01c7f5117351c64f17c7c62efa5fffdbe24fc7d298da19cd0b44"
  "nvidia-curand==10.4.0.35 1aee33a5da6e1db083fe2b90082def8915f30f3248d5896bcec36a579d941bfc"
  "nvidia-cusolver==12.0.4.66 0a759da5dea5c0ea10fd307de75cdeb59e7ea4fcb8add0924859b944babf1112"
  "nvidia-cusparse==12.6.3.3 2b3c89c88d01ee0e477cb7f82ef60a11a4bcd57b6b87c33f789350b59759360b"
  "nvidia-nvjitlink==13.0.88 13a74f429e23b921c1109976abefacc69835f2f433ebd323d3946e11d804e47b"
  "nvidia-cuda-nvrtc==13.0.88 ad9b6d2ead2435f11cbb6868809d2adeeee302e9bb94bcf0539c7a40d80e8575"
  "nvidia-nvtx==13.0.85 4936d1d6780fbe68db454f5e72a42ff64d1fd6397df9f363ae786930fd5c1cd4"
)

# pip download of pinned wheels for x86-64 CPython 3.11 into $2 (a folder);
# --require-hashes refuses any file whose sha256 differs from the pin.
download_pinned() {
  local -n pinned=$1
  local folder=$2
  local requirements="${folder}/requirements.txt"
  mkdir -p "${folder}"
  : >"${requirements}"
  local wheel spec sha256
  for wheel in "${pinned[@]}"; do
    read -r spec sha256 <<<"${wheel}"
    echo "${spec} --hash=sha256:${sha256}" >>"${requirements}"
  done
  python3 -m pip download --quiet --no-deps --require-hashes \
    --only-binary=:all: --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_27_x86_64 --platform manylinux_2_25_x86_64 \
    --platform manylinux_2_24_x86_64 --platform manylinux_2_18_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux2010_x86_64 --platform manylinux1_x86_64 \
    --python-version 3.11 --implementation cp --abi cp311 \
    -d "${folder}" -r "${requirements}" >&2
}

# Unpacks the CUDA wheels into the root, where libtorch_cuda.so's RPATH
# ($ORIGIN/../../nvidia/{cu13,cudnn,nccl,cusparselt,nvshmem}/lib) finds them.
fetch_cuda() {
  local download="${cache}/wheels-cuda"
  echo "fetch_libtorch: downloading the CUDA 13.0 runtime wheels torch 2.11.0 links against (about 2.6 GB, sha256-pinned)" >&2
  download_pinned cuda_wheels "${download}"
  local file
  for file in "${download}"/*.whl; do
    python3 -m zipfile -e "${file}" "${root}"
  done
  touch "${cuda_stamp}"
  rm -f "${download}"/*.whl
}

if [[ -f "${stamp}" ]]; then
  if [[ "${with_cuda}" == true && ! -f "${cuda_stamp}" ]]; then
    fetch_cuda
  fi
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
echo "fetch_libtorch: downloading LibTorch 2.11.0+cu130 (about 545 MB, sha256-pinned) into ${cache}" >&2
download_pinned wheels "${download}"

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
if [[ "${with_cuda}" == true ]]; then
  fetch_cuda
fi
echo "${root}/torch"
