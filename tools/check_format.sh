#!/usr/bin/env bash
# Fails, listing the files, if clang-format (Google style, .clang-format)
# would change any C++ or CUDA source under version control.
set -euo pipefail
cd "$(dirname "$0")/.."

unformatted=()
while IFS= read -r file; do
  if ! clang-format --dry-run -Werror "$file" >/dev/null 2>&1; then
    unformatted+=("$file")
  fi
done < <(git ls-files '*.cc' '*.h' '*.cu' '*.cuh')

if ((${#unformatted[@]} > 0)); then
  echo "check_format: clang-format would change:" >&2
  printf '  %s\n' "${unformatted[@]}" >&2
  echo "check_format: run: clang-format -i <files>" >&2
  exit 1
fi
echo "check_format: all $(git ls-files '*.cc' '*.h' '*.cu' '*.cuh' | wc -l) files formatted"
