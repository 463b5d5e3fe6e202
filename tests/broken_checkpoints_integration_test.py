#!/usr/bin/python3
"""End-to-end: broken checkpoints never break the repository index.

Beside a good model, the repository holds a copy of the bert fixture whose
model.safetensors header is garbage bytes (invalid UTF-8, control
characters), one whose folder name is not UTF-8, and a pre-quantized fp8
Llama (models/testdata/prequantized/fp8_block) that must serve transformers'
logits and say, in its config parameters and its load log line, that its
dynamic activation quantization is not applied. Each must be listed
UNAVAILABLE with a reason that is valid UTF-8 without control characters,
read by our own protobuf stubs, by tritonclient over gRPC and over HTTP
(the unmodified PyPI package, in this interpreter or $TRITON_PYTHON) and by
curl; the daemon's log stays valid UTF-8; the good model keeps serving.

Run by Bazel as:
  broken_checkpoints_integration_test.py CASTSERVE BERT_FILE FP8_FILE
(Debian's python3 with python3-grpcio, python3-protobuf and python3-numpy;
curl; tritonclient[grpc,http] for the tritonclient case.)
"""

import json
import os
import struct
import subprocess
import sys
import unittest

sys.path.insert(0, os.getcwd())  # the runfiles root holds proto/*_pb2.py
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from daemon_testlib import RepositoryTestCase, add_model, run  # noqa: E402

CASTSERVE = os.path.abspath(sys.argv[1])
BERT_DIR = os.path.dirname(os.path.abspath(sys.argv[2]))
FP8_DIR = os.path.dirname(os.path.abspath(sys.argv[3]))
CONFIG = "max_batch_size: 4\n"

# Garbage where the JSON header should be: control characters, an escape
# sequence, bytes that are no UTF-8 (a stray continuation, 0xff, a cut
# sequence).
GARBAGE = b"\xff\xfe\x80\x01\x1b[2Jgarbage\n\x00\xc3"
BAD_NAME = os.fsdecode(b"bad-\xff-name")


def is_clean(text):
    """Valid UTF-8 (already decoded) without control characters."""
    return all(ord(c) >= 0x20 and c != "\x7f" and not 0x80 <= ord(c) < 0xa0
               for c in text)


class BrokenCheckpointsTest(RepositoryTestCase):
    castserve = CASTSERVE
    good_dir = BERT_DIR
    good_config = CONFIG

    @classmethod
    def add_models(cls, repository):
        garbage_dir = add_model(repository, "garbage_header", BERT_DIR, CONFIG)
        with open(os.path.join(garbage_dir, "model.safetensors"), "wb") as f:
            f.write(struct.pack("<Q", len(GARBAGE)) + GARBAGE)
        add_model(repository, BAD_NAME, BERT_DIR, CONFIG)
        add_model(repository, "fp8_llama", FP8_DIR, CONFIG)

    def test_broken_models_are_listed_with_clean_reasons(self):
        index = self.index()  # Our stubs: protobuf refuses invalid UTF-8.
        self.assertEqual(index["garbage_header"].state, "UNAVAILABLE")
        reason = index["garbage_header"].reason
        self.assertIn("model.safetensors", reason)
        self.assertIn("invalid JSON", reason)
        self.assertIn("\\xff", reason)  # The quoted byte, escaped.
        bad = [name for name in index if name.startswith("bad-")]
        self.assertEqual(bad, ["bad-\\xff-name"])
        self.assertEqual(index[bad[0]].state, "UNAVAILABLE")
        self.assertIn("not valid UTF-8", index[bad[0]].reason)
        for name, model in index.items():
            self.assertTrue(is_clean(name), name)
            self.assertTrue(is_clean(model.reason), model.reason)
            self.assertLessEqual(len(model.reason.encode()), 1024)
        self.assertEqual(index["good"].state, "READY")

    def test_prequantized_model_serves_and_says_what_it_does_not_apply(self):
        import numpy as np
        from proto import inference_pb2
        from daemon_testlib import raw_request, references, response_arrays
        self.assertEqual(self.index()["fp8_llama"].state, "READY")
        config = self.stub.ModelConfig(inference_pb2.ModelConfigRequest(
            name="fp8_llama")).config
        note = config.parameters["castserve_weight_storage"].string_value
        self.assertIn("F8_E4M3FN:per_block_16x32", note)
        self.assertIn("dynamic activation quantization is not applied", note)
        self.assertIn("model weights kept in their checkpoint's format",
                      self.daemon.output())
        inputs, outputs = references(FP8_DIR)
        logits = response_arrays(self.stub.ModelInfer(
            raw_request("fp8_llama", inputs), timeout=60))["logits"]
        expected = outputs["logits"]
        error = np.max(np.abs(logits - expected)) / np.max(np.abs(expected))
        self.assertLessEqual(error, 1e-4)

    def test_tritonclient_reads_the_index_over_grpc_and_http(self):
        candidates = [sys.executable, os.environ.get("TRITON_PYTHON", "")]
        python = next((c for c in candidates if c and run(
            c, "-c", "import tritonclient.grpc, tritonclient.http")
            .returncode == 0), None)
        self.assertIsNotNone(
            python, "tritonclient[grpc,http] is not installed: run "
            "tools/test_all.sh (it installs it into .venv) or set "
            "TRITON_PYTHON to a Python that has it")
        check = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                             "tritonclient_index_check.py")
        result = run(python, check, f"127.0.0.1:{self.daemon.grpc_port}",
                     f"127.0.0.1:{self.daemon.http_port}", timeout=120)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        decoded = json.loads(result.stdout)
        for protocol in ("grpc", "http"):
            with self.subTest(protocol):
                models = {m["name"]: m for m in decoded[protocol]}
                self.assertEqual(models["good"]["state"], "READY")
                self.assertEqual(models["garbage_header"]["state"],
                                 "UNAVAILABLE")
                self.assertIn("invalid JSON",
                              models["garbage_header"]["reason"])
                self.assertIn("bad-\\xff-name", models)

    def test_curl_reads_valid_utf8_json(self):
        result = subprocess.run(
            ["curl", "-sS", "-X", "POST", "-d", "{}",
             f"http://127.0.0.1:{self.daemon.http_port}/v2/repository/index"],
            capture_output=True, timeout=60)
        self.assertEqual(result.returncode, 0, result.stderr)
        models = json.loads(result.stdout.decode("utf-8"))  # Strict UTF-8.
        reasons = {m["name"]: m.get("reason", "") for m in models}
        self.assertIn("invalid JSON", reasons["garbage_header"])
        self.assertTrue(all(is_clean(r) for r in reasons.values()), reasons)

    def test_log_stays_valid_utf8_and_the_good_model_serves(self):
        with open(self.daemon.log_path, "rb") as f:
            log = f.read().decode("utf-8")  # Strict: raises on bad bytes.
        self.assertIn("garbage_header", log)
        for line in log.splitlines():
            self.assertTrue(is_clean(line), line)
        self.assertEqual(self.infer_good().model_name, "good")


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
