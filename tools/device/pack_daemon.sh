#!/bin/bash
# Packs what tools/device/gpu_check.sh runs on a lent GPU machine that has no
# Bazel, gRPC or network: the CUDA build's binaries (built here with
# `bazel build --config=cuda`) and the shared libraries they need that such a
# machine lacks (Debian's gRPC, protobuf, abseil, prometheus-cpp,
# libmicrohttpd, GnuTLS and their dependencies, found with ldd). Left out:
# LibTorch and NVIDIA's libraries (the machine's torch wheel brings its own;
# gpu_check.sh puts them on LD_LIBRARY_PATH) and the base system libraries
# every x86-64 glibc Linux has (libc, libm, libstdc++, libgcc_s, the loader).
#
# Usage: tools/device/pack_daemon.sh [--no-build] [OUT_DIR]
#   OUT_DIR defaults to tools/device/pack (git-ignored; pass it in the device
#   tool's `carry`). --no-build packs the binaries already in bazel-bin.
# Fails when the folder exceeds 64 MiB (what travels with the working tree).
set -euo pipefail

cd "$(dirname "$0")/../.."
build=1
if [[ "${1:-}" == "--no-build" ]]; then build=0; shift; fi
out="${1:-tools/device/pack}"
readonly max_bytes=$((64 * 1024 * 1024))
# Bazel target -> name in OUT_DIR/bin.
readonly targets=(
  //server:castserve
  //client:castserve-client
  //benchmarks:layerwise_casting_benchmark
  //casting/device:codec_cuda_device_test
  //casting:weight_cuda_test
  //casting/memory:device_model_memory_cuda_test
  //casting/device:side_stream_test
  //models/encoders:cuda_model_test
)

if (( build )); then
  nice -n 19 bazel build --config=cuda "${targets[@]}"
fi
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
binaries=()
for target in "${targets[@]}"; do
  path="bazel-bin/${target#//}"
  path="${path/://}"
  [[ -x "$path" ]] || { echo "pack_daemon: missing $path (build with --config=cuda)" >&2; exit 1; }
  # A default build's binary (bazel-bin holds whichever was built last) has
  # no CUDA: refuse it.
  libs=$(ldd "$path")
  if [[ "$libs" == *libtorch_cpu* && "$libs" != *libtorch_cuda* ]]; then
    echo "pack_daemon: $path was built without --config=cuda" >&2
    exit 1
  fi
  binaries+=("$path")
  install -m 755 "$path" "$out/bin/"
  strip --strip-unneeded "$out/bin/$(basename "$path")"
done

# Whether ldd's resolved path is one the GPU machine provides itself.
provided() {
  case "$1" in
    */torch/lib/*|*/nvidia/*|/usr/local/cuda*) return 0 ;;
  esac
  case "$(basename "$1")" in
    libc.so.*|libm.so.*|libstdc++.so.*|libgcc_s.so.*|ld-linux*|libdl.so.*|\
    libpthread.so.*|librt.so.*) return 0 ;;
  esac
  return 1
}

# ldd on the built binaries: test targets link castserve's own libraries
# from Bazel's _solib folders, through a RUNPATH relative to bazel-bin.
for binary in "${binaries[@]}"; do
  ldd "$binary" | awk '$2 == "=>" && $3 ~ /^\// {print $3}'
done | sort -u | while read -r lib; do
  provided "$lib" && continue
  cp -L "$lib" "$out/lib/"
done
strip --strip-unneeded "$out"/lib/*.so* 2>/dev/null || true
# The newest glibc symbol version the packed files need: the GPU machine's
# glibc must be at least this (gpu_check.py checks it first).
glibc=$(for f in "$out"/bin/* "$out"/lib/*; do objdump -T "$f" 2>/dev/null |
  grep -o 'GLIBC_[0-9.]*'; done | sort -uV | tail -1)
echo "${glibc#GLIBC_}" > "$out/GLIBC_REQUIRED"
{
  echo "packed from $(hostname) at $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD)"
  echo "needs glibc >= ${glibc#GLIBC_}"
  for binary in "$out"/bin/*; do echo "$(basename "$binary"): $(sha256sum < "$binary" | cut -c1-16)"; done
} > "$out/MANIFEST"

# Libraries over 4 MiB travel xz-compressed (ICU's data alone is 30 MiB);
# gpu_check.py decompresses them beside themselves before anything runs.
find "$out/lib" -type f -size +4M -print0 | xargs -0 -r xz -T0 -6
size=$(du -sb "$out" | cut -f1)
echo "pack_daemon: $out holds $(ls "$out/bin" | wc -l) binaries and $(ls "$out/lib" | wc -l) libraries, $((size / 1024 / 1024)) MiB"
if (( size > max_bytes )); then
  echo "pack_daemon: $out is over 64 MiB" >&2
  exit 1
fi
