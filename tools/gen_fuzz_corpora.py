#!/usr/bin/python3
"""Writes the seed corpora of the server fuzz targets (server/fuzz/):

  corpus_infer_request/  ModelInferRequests for the BERT fixture, valid and
                         near-valid: a mode byte (bit 0 clear: wire bytes
                         follow; set: RequestBuilder's bytes follow; bit 1:
                         max_batch_size 8, else 0), then the bytes
  corpus_config_pbtxt/   config.pbtxt texts for a model folder "fuzz_model"
  corpus_config_json/    the same configs as RepositoryModelLoad's JSON, and
                         a few that only JSON can express

Run with Debian's python3 and python3-protobuf from the repository root:
    /usr/bin/python3 tools/gen_fuzz_corpora.py
and commit the results. Deterministic: rerunning writes the same files.
"""

import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "server", "fuzz")


def load_protos():
    """The generated Python modules of proto/*.proto (Debian's protoc)."""
    scratch = tempfile.mkdtemp()
    subprocess.run(["protoc", "-I", ROOT, "--python_out", scratch,
                    "proto/model_config.proto", "proto/inference.proto"],
                   check=True)
    sys.path.insert(0, scratch)
    from proto import inference_pb2, model_config_pb2  # noqa: E402
    return inference_pb2, model_config_pb2


inference_pb2, model_config_pb2 = load_protos()
from google.protobuf import json_format, text_format  # noqa: E402

WIRE = 0x00
BUILT = 0x01
BATCHED = 0x02


def infer_request(inputs, outputs=(), raw=True):
    """inputs: (name, datatype, shape, values); values packed as int64
    unless datatype says otherwise."""
    request = inference_pb2.ModelInferRequest(model_name="bert", id="seed")
    for name, datatype, shape, values in inputs:
        tensor = request.inputs.add(name=name, datatype=datatype, shape=shape)
        if raw:
            code = {"INT64": "q", "FP32": "f", "INT32": "i"}[datatype]
            request.raw_input_contents.append(
                struct.pack("<%d%s" % (len(values), code), *values))
        elif datatype == "FP32":
            tensor.contents.fp32_contents.extend(values)
        else:
            tensor.contents.int64_contents.extend(values)
    for name in outputs:
        request.outputs.add(name=name)
    return request.SerializeToString()


def infer_request_seeds():
    ids = [101, 7, 42, 9, 3, 150, 2, 102]
    ones = [1] * 8
    seeds = {
        "raw_ids_mask": (BATCHED, infer_request(
            [("input_ids", "INT64", [1, 8], ids),
             ("attention_mask", "INT64", [1, 8], ones)],
            ["last_hidden_state"])),
        "typed_two_rows": (BATCHED, infer_request(
            [("input_ids", "INT64", [2, 4], ids),
             ("token_type_ids", "INT64", [2, 4], [0, 0, 1, 1] * 2)],
            ["pooler_output", "last_hidden_state"], raw=False)),
        "raw_all_inputs_unbatched": (WIRE, infer_request(
            [("input_ids", "INT64", [1, 8], ids),
             ("attention_mask", "INT64", [1, 8], ones),
             ("token_type_ids", "INT64", [1, 8], [0] * 8)])),
        "token_past_vocabulary": (BATCHED, infer_request(
            [("input_ids", "INT64", [1, 2], [5, 211])])),
        "raw_short_by_one_element": (BATCHED, infer_request(
            [("input_ids", "INT64", [1, 3], [5, 6])])),
        "fp32_ids": (BATCHED, infer_request(
            [("input_ids", "FP32", [1, 2], [5.0, 6.0])], raw=False)),
        "output_twice": (BATCHED, infer_request(
            [("input_ids", "INT64", [1, 1], [5])],
            ["last_hidden_state", "last_hidden_state"])),
        "past_position_table": (BATCHED, infer_request(
            [("input_ids", "INT64", [1, 65], [1] * 65)])),
        "batch_past_max": (BATCHED, infer_request(
            [("input_ids", "INT64", [9, 1], [1] * 9)])),
    }
    rng = random.Random(13)
    for i in range(6):
        mode = BUILT | (BATCHED if i % 2 == 0 else 0)
        seeds["built_%d" % i] = (
            mode, bytes(rng.randrange(256) for _ in range(64 << (i % 3))))
    return {name: bytes([mode]) + body for name, (mode, body) in seeds.items()}


SIGNATURE = """
input { name: "input_ids" data_type: TYPE_INT64 dims: [ -1 ] }
input { name: "attention_mask" data_type: TYPE_INT64 dims: [ -1 ] optional: true }
output { name: "last_hidden_state" data_type: TYPE_FP32 dims: [ -1, 32 ] }
"""

# name -> config.pbtxt text; valid first, then near-valid (one thing off).
CONFIGS = {
    "minimal": "max_batch_size: 8\n",
    "unbatched": "max_batch_size: 0\n",
    "signature_batching": "max_batch_size: 8\n" + SIGNATURE + """
instance_group { kind: KIND_CPU count: 2 }
dynamic_batching { preferred_batch_size: [ 4, 8 ] max_queue_delay_microseconds: 500 }
parameters { key: "INTRA_OP_THREAD_COUNT" value { string_value: "1" } }
""",
    "warmups": "max_batch_size: 4\n" + SIGNATURE + """
model_warmup {
  name: "zeros" batch_size: 2 count: 3
  inputs { key: "input_ids" value { data_type: TYPE_INT64 dims: [ 8 ] zero_data: true } }
}
model_warmup {
  name: "random"
  inputs { key: "input_ids" value { data_type: TYPE_INT64 dims: [ 4 ] random_data: true } }
  inputs { key: "attention_mask" value { data_type: TYPE_INT64 dims: [ 4 ] random_data: true } }
}
model_warmup {
  name: "file" batch_size: 3
  inputs { key: "input_ids" value { data_type: TYPE_INT64 dims: [ 8 ] input_data_file: "warmup.bin" } }
}
""",
    "casting_fp8": """max_batch_size: 2
checkpoint { path: "." }
architecture: "bert"
weights {
  residency: RESIDENCY_MAPPED
  compute_copy: COMPUTE_COPY_TRANSIENT
  prefetch: true
  reuse_transient_buffers: true
  casting {
    storage_dtype: STORAGE_DTYPE_F8_E4M3FN
    compute_dtype: COMPUTE_DTYPE_BF16
    scaling: SCALING_PER_ROW
    skip_modules_pattern: "pooler"
    skip_modules_pattern: "^encoder\\\\.layer\\\\.[0-9]+\\\\.attention$"
    skip_modules_classes: "Embedding"
  }
}
""",
    "preferred_above_max": """max_batch_size: 4
dynamic_batching { preferred_batch_size: [ 8 ] }
""",
    "scaling_without_fp8": """weights { casting {
  storage_dtype: STORAGE_DTYPE_BF16 scaling: SCALING_PER_TENSOR } }
""",
    "bad_skip_pattern": """weights { casting {
  storage_dtype: STORAGE_DTYPE_F16 skip_modules_pattern: "(unclosed" } }
""",
    "too_many_instances": "instance_group { count: 64 }\n",
    "gpu_instances": "instance_group { kind: KIND_GPU count: 1 gpus: [ 0 ] }\n",
    "threads_zero": 'parameters { key: "INTRA_OP_THREAD_COUNT" value { string_value: "0" } }\n',
    "checkpoint_outside": 'checkpoint { path: "../../etc" }\n',
    "wrong_dims": "max_batch_size: 8\n" +
                  'input { name: "input_ids" data_type: TYPE_INT64 dims: [ -1, 3 ] }\n',
    "wrong_type": 'input { name: "input_ids" data_type: TYPE_FP32 dims: [ -1, -1 ] }\n',
    "warmup_batch_past_max": "max_batch_size: 2\n" + SIGNATURE + """
model_warmup { name: "big" batch_size: 3
  inputs { key: "input_ids" value { data_type: TYPE_INT64 dims: [ 4 ] zero_data: true } } }
""",
    "warmup_past_byte_limit": "max_batch_size: 8\n" + SIGNATURE + """
model_warmup { name: "huge" batch_size: 8
  inputs { key: "input_ids" value { data_type: TYPE_INT64 dims: [ 4611686018427387904 ] zero_data: true } } }
""",
    "warmup_file_outside": "max_batch_size: 1\n" + SIGNATURE + """
model_warmup { name: "escape"
  inputs { key: "input_ids" value { data_type: TYPE_INT64 dims: [ 8 ] input_data_file: "../../x" } } }
""",
    "warmup_count_past_limit": """model_warmup { name: "many" count: 100000 }
""",
    "name_mismatch": 'name: "other"\nmax_batch_size: 1\n',
    # A 20-digit back-reference: std::regex overflowed reading it
    # (casting_policy_test's NumbersInPatternsHaveAtMostNineDigits).
    "skip_pattern_long_number": 'weights { casting { storage_dtype: '
                                'STORAGE_DTYPE_F16 skip_modules_pattern: '
                                '"a\\\\11111111111111111111" } }\n',
    # 7,000 nested groups: std::regex's recursive compile overflowed the
    # stack (casting_policy_test's PatternsAreBoundedBeforeCompiling).
    "skip_pattern_nested_deep": 'weights { casting { storage_dtype: '
                                'STORAGE_DTYPE_F16 skip_modules_pattern: "' +
                                "(" * 7000 + "a" + ")" * 7000 + '" } }\n',
}

# Only JSON can say these: enum values by number, int64 as strings, an
# unknown field (refused by JsonStringToMessage).
JSON_ONLY = {
    "enum_numbers": '{"maxBatchSize": 2, "input": [{"name": "input_ids", '
                    '"dataType": 99, "dims": ["-1"]}], '
                    '"weights": {"casting": {"storageDtype": 7}}}',
    "int64_strings": '{"maxBatchSize": 1, "modelWarmup": [{"name": "w", '
                     '"batchSize": 1, "inputs": {"input_ids": {"dataType": '
                     '"TYPE_INT64", "dims": ["9223372036854775807"], '
                     '"zeroData": true}}}]}',
    "unknown_field": '{"max_batch_size": 8, "no_such_field": 1}',
}


def config_seeds():
    texts, jsons = {}, {}
    for name, text in CONFIGS.items():
        texts[name + ".pbtxt"] = text.encode()
        config = text_format.Parse(text, model_config_pb2.ModelConfig())
        jsons[name + ".json"] = json_format.MessageToJson(config, sort_keys=True).encode()
    for name, text in JSON_ONLY.items():
        jsons[name + ".json"] = text.encode()
    return texts, jsons


def write(folder, files):
    path = os.path.join(OUT, folder)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    for name, data in sorted(files.items()):
        with open(os.path.join(path, name), "wb") as f:
            f.write(data)
    print("%s: %d files, %d bytes" %
          (folder, len(files), sum(len(d) for d in files.values())))


def main():
    texts, jsons = config_seeds()
    write("corpus_infer_request", infer_request_seeds())
    write("corpus_config_pbtxt", texts)
    write("corpus_config_json", jsons)


if __name__ == "__main__":
    main()
