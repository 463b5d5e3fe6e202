#!/usr/bin/env bash
# Runs generation_benchmark ($1) briefly on the llama fixture: it must exit 0,
# print a row per configuration, sequence count and mode, and find the
# continuous tokens equal to the sequential ones; then --compare_paths: a
# storage row per cast config whose greedy tokens equal the copy path's.
set -euo pipefail
out="$("$1" --model=models/testdata/llama --sequences=1,3 --new_tokens=4 \
  --prompt_tokens=5 --block_tokens=4 --threads=1)"
echo "$out"
rows="$(grep -cE ' (sequential|continuous) ' <<<"$out")"
if [[ "$rows" != 12 ]]; then
  echo "expected 12 rows, got $rows" >&2
  exit 1
fi
if grep -E ' continuous ' <<<"$out" | grep -qE ' no$'; then
  echo "continuous tokens differ from sequential" >&2
  exit 1
fi

paths="$("$1" --model=models/testdata/llama --compare_paths --rounds=1 \
  --configs=cast/BF16/F32,cast/F8_E4M3FN:per_row/F32 --new_tokens=4 \
  --prompt_tokens=5 --threads=1)"
echo "$paths"
same="$(grep -cE ' storage .* yes$' <<<"$paths")"
if [[ "$same" != 2 ]]; then
  echo "expected 2 storage rows with the copy path's tokens, got $same" >&2
  exit 1
fi
