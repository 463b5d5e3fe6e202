#!/bin/bash
# Builds castserve's libFuzzer targets with clang outside Bazel (Debian:
# clang, libclang-rt-14-dev; tools/install_deps.sh installs them) and runs
# each for MAX_TOTAL_TIME seconds (default 180), all at once. Exits non-zero
# when a target finds something (crash, leak, undefined behaviour, an input
# slower than 25 s or one that allocates past 4 GiB): the reproducer lands in
# $WORK/artifacts_<target>/ (until the next run), the log in
# $WORK/<target>.log.
#
#   casting/formats/fuzz/  safetensors, torch_zip: the checkpoint readers (the
#                          safetensors header through platform/json_parser.h, i.e.
#                          nlohmann/json's parser and castserve's bounded builder)
#   server/fuzz/           infer_request: a ModelInferRequest against the BERT
#                          fixture (conversion, checks, forward, response);
#                          config_pbtxt, config_json: config.pbtxt text and
#                          RepositoryModelLoad's JSON config through validation
#                          and the load's checks; rest_infer: a KServe v2 REST
#                          inference body (JSON tensors, the binary extension)
#                          decoded and its inputs encoded back as a response;
#                          openai_request: an OpenAI API body through the
#                          decoder of each endpoint (bounds kept, refusals
#                          INVALID_ARGUMENT)
#   text/fuzz/             tokenizer_encode: Tokenizer::Encode of arbitrary bytes
#                          over the MiniLM, byte-level BPE and Unigram tokenizers (ids in
#                          the vocabulary, BPE decodes back to the text)
#   text/jinja/fuzz/       chat_template: ChatTemplate::Create and Render of
#                          arbitrary templates and JSON contexts (only the
#                          contract's error codes, output within its limit,
#                          renders deterministic)
#
# The committed seed corpora (<folder>/corpus_<target>) are copied to a
# scratch corpus in $WORK first, so runs never grow them (the scratch corpus
# keeps what earlier runs added). Objects are kept in $WORK/obj and rebuilt
# when a file they were compiled from changes (delete it after changing the
# flags below). The
# server targets link LibTorch and run from the repository root (they load
# models/testdata/bert); to replay a finding:
#   $WORK/infer_request_fuzzer $WORK/artifacts_infer_request/crash-...
#
#   tools/run_fuzzers.sh                  # build and run all nine
#   MAX_TOTAL_TIME=600 tools/run_fuzzers.sh infer_request config_json
set -euo pipefail
cd "$(dirname "$0")/.."

MAX_TOTAL_TIME="${MAX_TOTAL_TIME:-180}"
WORK="${WORK:-/tmp/castserve_fuzz}"
ALL_TARGETS="safetensors torch_zip infer_request config_pbtxt config_json rest_infer openai_request tokenizer_encode chat_template"
read -r -a TARGETS <<<"${*:-$ALL_TARGETS}"
LIBTORCH="${LIBTORCH:-${CASTSERVE_CACHE:-$HOME/.cache/castserve}/libtorch-2.11.0/torch}"
mkdir -p "$WORK/obj"

CXXFLAGS="-std=c++17 -O1 -gline-tables-only -fno-sanitize-recover=undefined"
SANITIZE="-fsanitize=address,undefined"
ABSL_LIBS="-labsl_statusor -labsl_status -labsl_str_format_internal \
  -labsl_strings -labsl_strings_internal -labsl_int128 -labsl_cord \
  -labsl_cord_internal -labsl_cordz_info -labsl_cordz_functions \
  -labsl_cordz_handle -labsl_exponential_biased -labsl_synchronization \
  -labsl_time -labsl_time_zone -labsl_stacktrace -labsl_symbolize \
  -labsl_debugging_internal -labsl_demangle_internal -labsl_malloc_internal \
  -labsl_graphcycles_internal -labsl_raw_logging_internal \
  -labsl_throw_delegate -labsl_base -labsl_spinlock_wait -labsl_raw_hash_set \
  -labsl_hash -labsl_city -labsl_low_level_hash"
SERVER_LIBS="-L$LIBTORCH/lib -Wl,-rpath,$LIBTORCH/lib -ltorch_cpu -lc10 \
  -lprotobuf -lprometheus-cpp-core -lgrpc++ -lgrpc -lgpr"

# LibTorch's headers without its include/google, whose old protobuf would
# shadow Debian's (as third_party/libtorch.bzl does for Bazel).
torch_includes() {
  local farm="$WORK/torch_include"
  if [[ ! -d "$farm" ]]; then
    mkdir -p "$farm.tmp"
    for entry in "$LIBTORCH"/include/*; do
      [[ "$(basename "$entry")" == google ]] || ln -s "$entry" "$farm.tmp/"
    done
    mv "$farm.tmp" "$farm"
  fi
  echo "-I$farm -I$farm/torch/csrc/api/include"
}

# The generated protobuf code, from Debian's protoc (as //proto does); a
# file that did not change keeps its time, so what includes it is not rebuilt.
generate_protos() {
  rm -rf "$WORK/gen.new" && mkdir -p "$WORK/gen.new" "$WORK/gen/proto"
  protoc -I. --cpp_out="$WORK/gen.new" proto/model_config.proto \
    proto/inference.proto
  local file
  for file in "$WORK"/gen.new/proto/*; do
    cmp -s "$file" "$WORK/gen/proto/${file##*/}" ||
      mv "$file" "$WORK/gen/proto/${file##*/}"
  done
}

# The C++ sources in the repository that Bazel targets $1 are built from,
# with select() resolved for the default configuration (cquery; a plain query
# would list both halves of a device seam, CUDA and none).
sources_of() {
  bazel cquery --noshow_progress \
    "kind('source file', deps($1)) intersect //...:*" 2>/dev/null |
    sed -n 's|^//\(.*\):\([^ ]*\.cc\)\( (null)\)\{0,1\}$|\1/\2|p' |
    sed 's|^/||'
}

# True when object $1 exists and is newer than every file it was built from.
up_to_date() {
  [[ -f "$1" && -f "$1.d" ]] || return 1
  local dep
  for dep in $(sed -e 's/^[^:]*://' -e 's/\\$//' "$1.d"); do
    [[ "$dep" -nt "$1" ]] && return 1
  done
  return 0
}

# Compiles source $1 (relative to the repository root or absolute) into
# $WORK/obj; prints the object's path.
compile() {
  local src="$1" obj="$WORK/obj/$(echo "${1#"$WORK"/}" | tr / _).o"
  local flags="$CXXFLAGS -I. -I$WORK/gen $TORCH_INCLUDES -w"
  case "$src" in
    */gen/*) flags="-std=c++17 -O0 -I$WORK/gen -w" ;;  # Generated: plain.
    casting/codec/codec.cc)
      # clang 14 lacks __builtin_cpu_supports("f16c"): g++, uninstrumented.
      up_to_date "$obj" || g++ -std=c++17 -O1 -I. -MMD -MF "$obj.d" \
        -c "$src" -o "$obj" || { rm -f "$obj"; return 1; }
      echo "$obj"
      return ;;
    *_avx2.cc)
      flags+=" -mavx2 -mf16c -mfma $SANITIZE" ;;
    *_avx512.cc)
      flags+=" -mavx512f -mavx512bw -mavx512vl -mavx2 -mf16c -mfma $SANITIZE" ;;
    *_avx512bf16.cc)  # As models/kernels/BUILD compiles it.
      flags+=" -mavx512f -mavx512bw -mavx512vl -mavx512bf16 -mavx512vbmi -mavx2"
      flags+=" -mf16c -mfma $SANITIZE" ;;
    *_amx.cc)  # As models/kernels/BUILD compiles it.
      flags+=" -mamx-tile -mamx-bf16 -mavx512f -mavx512bw -mavx512vl"
      flags+=" -mavx512bf16 -mavx2 -mf16c -mfma $SANITIZE" ;;
    */fuzz/*_fuzzer.cc) flags+=" -fsanitize=fuzzer $SANITIZE" ;;
    *) flags+=" -fsanitize=fuzzer-no-link $SANITIZE" ;;
  esac
  up_to_date "$obj" || clang++ $flags -MMD -MF "$obj.d" -c "$src" -o "$obj" ||
    { rm -f "$obj"; return 1; }
  echo "$obj"
}
export -f compile up_to_date
export WORK CXXFLAGS SANITIZE

declare -A FOLDER=([safetensors]=casting/formats [torch_zip]=casting/formats
  [infer_request]=server [config_pbtxt]=server [config_json]=server
  [rest_infer]=server [openai_request]=server [tokenizer_encode]=text
  [chat_template]=text/jinja)
# What each target links, as Bazel targets (their sources are compiled here).
declare -A LINKS=(
  [safetensors]="//casting/formats:safetensors_reader"
  [torch_zip]="//casting/formats:torch_zip_reader"
  [infer_request]="//server/servables:tensor_conversion + //models/architectures"
  [config_pbtxt]="//server/servables/factory:hf_served_model_factory + //server/lifecycle:model_repository"
  [config_json]="//server/servables/factory:hf_served_model_factory + //server/lifecycle:model_repository"
  [rest_infer]="//server/rest:rest_infer_codec"
  [openai_request]="//server/openai:openai_requests"
  [tokenizer_encode]="//text:load_tokenizer"
  [chat_template]="//text/jinja:chat_template + //text/jinja:chat_context + //platform:fake_clock_test_util"
)
# libFuzzer dictionaries (tokens the mutator splices in), where a target has
# one: the safetensors header's JSON grammar, keys and dtype names; Jinja's
# tags, filters and tests.
declare -A DICT=([safetensors]=casting/formats/fuzz/safetensors.dict
  [chat_template]=text/jinja/fuzz/chat_template.dict)
# The server targets' inputs are small: a request or a config file.
declare -A MAX_LEN=([safetensors]=65536 [torch_zip]=65536
  [infer_request]=8192 [config_pbtxt]=16384 [config_json]=16384
  [rest_infer]=16384 [openai_request]=16384 [tokenizer_encode]=16384
  [chat_template]=16384)

for target in "${TARGETS[@]}"; do
  if [[ -z "${FOLDER[$target]:-}" ]]; then
    echo "run_fuzzers: unknown target '$target' (targets: $ALL_TARGETS)" >&2
    exit 2
  fi
done
TORCH_INCLUDES="$(torch_includes)"
export TORCH_INCLUDES
generate_protos

for target in "${TARGETS[@]}"; do
  folder="${FOLDER[$target]}"
  srcs="$(sources_of "${LINKS[$target]}")"
  libs="$ABSL_LIBS -pthread"
  if [[ "$folder" == server ]]; then
    srcs+=" $WORK/gen/proto/model_config.pb.cc $WORK/gen/proto/inference.pb.cc"
    libs+=" $SERVER_LIBS"
  fi
  # //text's libraries; the server targets link them through the factory
  # (the tokenizer).
  if [[ "$folder" == text* || "$folder" == server ]]; then
    libs+=" -lre2 -licuuc -licudata -ldl"
  fi
  echo "building ${target}_fuzzer"
  objs="$(printf '%s\n' "$folder/fuzz/${target}_fuzzer.cc" $srcs |
    xargs -P "$(nproc)" -I{} bash -c 'compile {}')"
  clang++ -fsanitize=fuzzer $SANITIZE $objs $libs -o "$WORK/${target}_fuzzer"
done

pids=()
for target in "${TARGETS[@]}"; do
  corpus="$WORK/corpus_${target}"
  rm -rf "$WORK/artifacts_${target}"  # Only this run's findings.
  mkdir -p "$corpus" "$WORK/artifacts_${target}"
  cp "${FOLDER[$target]}/fuzz/corpus_${target}"/* "$corpus/"
  echo "running ${target}_fuzzer for ${MAX_TOTAL_TIME}s (log: $WORK/${target}.log)"
  dict=()
  [[ -n "${DICT[$target]:-}" ]] && dict=(-dict="${DICT[$target]}")
  "$WORK/${target}_fuzzer" -max_total_time="$MAX_TOTAL_TIME" "${dict[@]}" \
    -max_len="${MAX_LEN[$target]}" -timeout=25 -rss_limit_mb=4096 \
    -print_final_stats=1 -artifact_prefix="$WORK/artifacts_${target}/" \
    "$corpus" >"$WORK/${target}.log" 2>&1 &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
for target in "${TARGETS[@]}"; do
  log="$WORK/${target}.log"
  echo "== ${target}: $(grep -E '^stat::number_of_executed_units' "$log" | awk '{print $2}') runs," \
    "$(grep -E '^stat::average_exec_per_sec' "$log" | awk '{print $2}') exec/s," \
    "$(grep -E '^#[0-9]+.*(DONE|pulse)' "$log" | tail -1 | grep -oE 'cov: [0-9]+')"
  if grep -qE '^==[0-9]+==ERROR|^SUMMARY|deadly signal|invariant broken' "$log"; then
    grep -E '^==[0-9]+==ERROR|^SUMMARY|invariant broken' "$log" | head -3
  fi
  ls "$WORK/artifacts_${target}"
done
exit $status
