#!/usr/bin/env bash
# Compiles castserve's LibTorch-using code against a LibTorch 2.x: the headers
# and libraries inside PyPI's `torch` wheel (about 540 MB, CUDA build). Only
# compiles (the wheel's CUDA libraries need NVIDIA's runtime packages to
# link), which is what shows the code is written for both 1.13 and 2.x.
#
# Usage: tools/check_libtorch2.sh [TARGET...]   (default: the LibTorch users)
set -euo pipefail
cd "$(dirname "$0")/.."

work="${LIBTORCH2_DIR:-/tmp/castserve-libtorch2}"
if [[ ! -d "$work/torch/include" ]]; then
  mkdir -p "$work"
  python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$work" torch
  python3 -m zipfile -e "$work"/torch-*.whl "$work"
fi
version=$(sed -n "s/^__version__ = '\(.*\)'/\1/p" "$work/torch/version.py")
echo "check_libtorch2: LibTorch ${version}"

# The source packages, named (not //...): another output base's bazel-*
# symlinks in the tree would otherwise be loaded as packages.
packages="//casting/... + //models/... + //server/... + //client/..."
targets=("$@")
if ((${#targets[@]} == 0)); then
  mapfile -t targets < <(LIBTORCH="$work/torch" bazel --output_base="$work/bazel" \
    query --output=label \
    "kind('cc_.*', rdeps(${packages}, //third_party:libtorch)) except attr(tags, manual, ${packages})")
  ((${#targets[@]} > 0)) || { echo "check_libtorch2: no targets found" >&2; exit 1; }
fi
LIBTORCH="$work/torch" bazel --output_base="$work/bazel" build --config=libtorch2 \
  --experimental_convenience_symlinks=ignore --keep_going \
  --output_groups=compilation_outputs "${targets[@]}"
