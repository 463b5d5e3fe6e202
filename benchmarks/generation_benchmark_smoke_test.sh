#!/usr/bin/env bash
# Runs generation_benchmark ($1) briefly on the llama fixture: it must exit 0,
# print a row per configuration, sequence count and mode, and find the
# continuous tokens equal to the sequential ones.
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
