#!/bin/bash
# Builds the checkpoint-reader libFuzzer targets with clang (Debian: clang,
# libclang-rt-14-dev) and runs each for MAX_TOTAL_TIME seconds (default 180).
# The committed seed corpora under casting/fuzz/corpus_* are copied to a
# scratch folder first, so runs never grow them; crashes land in $WORK.
#
#   tools/run_fuzzers.sh                  # build and run both, in parallel
#   MAX_TOTAL_TIME=600 tools/run_fuzzers.sh safetensors
set -euo pipefail
cd "$(dirname "$0")/.."

MAX_TOTAL_TIME="${MAX_TOTAL_TIME:-180}"
WORK="${WORK:-/tmp/castserve_fuzz}"
TARGETS=("${@:-safetensors torch_zip}")
TARGETS=(${TARGETS[*]})
mkdir -p "$WORK"

ABSL_LIBS="-labsl_statusor -labsl_status -labsl_str_format_internal \
  -labsl_strings -labsl_strings_internal -labsl_int128 -labsl_cord \
  -labsl_cord_internal -labsl_cordz_info -labsl_cordz_functions \
  -labsl_cordz_handle -labsl_exponential_biased -labsl_synchronization \
  -labsl_time -labsl_time_zone -labsl_stacktrace -labsl_symbolize \
  -labsl_debugging_internal -labsl_demangle_internal -labsl_malloc_internal \
  -labsl_graphcycles_internal -labsl_raw_logging_internal \
  -labsl_throw_delegate -labsl_base -labsl_spinlock_wait"
COMMON_SRCS="casting/mapped_file.cc casting/safe_copy.cc casting/checkpoint.cc"
declare -A SRCS=(
  [safetensors]="casting/json_value.cc casting/safetensors_reader.cc"
  [torch_zip]="casting/state_dict_unpickler.cc casting/torch_zip_reader.cc"
)

for target in "${TARGETS[@]}"; do
  echo "building ${target}_fuzzer"
  clang++ -std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined \
    -fno-sanitize-recover=undefined -I. \
    "casting/fuzz/${target}_fuzzer.cc" ${SRCS[$target]} ${COMMON_SRCS} \
    ${ABSL_LIBS} -o "$WORK/${target}_fuzzer"
done

pids=()
for target in "${TARGETS[@]}"; do
  corpus="$WORK/corpus_${target}"
  mkdir -p "$corpus" "$WORK/artifacts_${target}"
  cp casting/fuzz/corpus_${target}/* "$corpus/"
  echo "running ${target}_fuzzer for ${MAX_TOTAL_TIME}s (log: $WORK/${target}.log)"
  "$WORK/${target}_fuzzer" -max_total_time="$MAX_TOTAL_TIME" -max_len=65536 \
    -rss_limit_mb=4096 -artifact_prefix="$WORK/artifacts_${target}/" \
    "$corpus" >"$WORK/${target}.log" 2>&1 &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
for target in "${TARGETS[@]}"; do
  echo "== ${target}: $(grep -E '^#[0-9]+.*DONE|Done [0-9]+ runs' "$WORK/${target}.log" | tail -1)"
  ls "$WORK/artifacts_${target}"
done
exit $status
