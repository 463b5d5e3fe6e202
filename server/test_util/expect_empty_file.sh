#!/bin/bash
# Fails, printing the file, unless the file named by $1 is empty: the
# lifecycle_is_libtorch_free_test's genquery lists what links LibTorch.
if [[ -s "$1" ]]; then
  echo "the gRPC service or the model manager depends on LibTorch through:"
  cat "$1"
  exit 1
fi
