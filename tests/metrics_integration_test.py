#!/usr/bin/python3
"""castserve's /metrics after real inference, casting on and off.

Two models serve the same checkpoint: the bert fixture widened to
INTERMEDIATE = 4096 (random weights: the intermediate and output dense layers
then hold most of the bytes, as in real transformers). "bert_cast" keeps
weights as fp8 e4m3fn with per-row scales and makes transient f32 compute
copies; "bert_plain" keeps f32; "bert_lazy" maps the checkpoint and makes its
fp8 copies at first use, with prefetch. The test sends requests, scrapes /metrics,
runs `promtool check metrics` on the text and checks the per-model values:
resident bytes by format, peak bytes, request and batch counters,
materializations and prefetch outcomes.

Run by Bazel as:
  metrics_integration_test.py CASTSERVE BERT_FILE README
(BERT_FILE: a file of models/testdata/bert; README: the project's README.md,
whose metrics reference must list every family exported; Debian's python3 with
python3-grpcio, python3-protobuf and python3-numpy; promtool from
`prometheus`).
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
import urllib.request

sys.path.insert(0, os.getcwd())  # the runfiles root holds proto/*_pb2.py
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402
import numpy as np  # noqa: E402
from proto import inference_pb2, inference_pb2_grpc  # noqa: E402

from daemon_testlib import (FP8_CASTING_WEIGHTS, Daemon,  # noqa: E402
                             read_safetensors, write_file,
                             write_safetensors)

CASTSERVE = os.path.abspath(sys.argv[1])
BERT_DIR = os.path.dirname(os.path.abspath(sys.argv[2]))
README = os.path.abspath(sys.argv[3])
INTERMEDIATE = 4096
CALL_TIMEOUT_SECONDS = 60
SEQUENCE = 8
PLAIN_REQUESTS = 5
CAST_REQUESTS = 3
# Token ids beyond the vocabulary: refused where the request enters (the
# model's limits are part of its one validation), never run.
BAD_REQUESTS = 2

SIGNATURE = """
max_batch_size: 8
instance_group { kind: KIND_CPU count: 1 }
"""
PLAIN = SIGNATURE + """
weights { materialization: MATERIALIZATION_EAGER }
"""
CAST = SIGNATURE + FP8_CASTING_WEIGHTS
# Layerwise casting over the mapped checkpoint, as deploy/'s minilm: fp8
# copies made at first use, norms read from the mapping, prefetch.
LAZY = SIGNATURE + """
weights {
  residency: RESIDENCY_MAPPED
  materialization: MATERIALIZATION_LAZY
  compute_copy: COMPUTE_COPY_TRANSIENT
  prefetch: true
  casting {
    storage_dtype: STORAGE_DTYPE_F8_E4M3FN
    compute_dtype: COMPUTE_DTYPE_F32
    scaling: SCALING_PER_ROW
  }
}
"""
LAZY_REQUESTS = 4
FP8_FORMAT = "f8_e4m3fn:per_row"


def add_wide_bert(repository, name, config):
    """The bert fixture with intermediate_size INTERMEDIATE; returns its
    tensors by name (all f32)."""
    model_dir = os.path.join(repository, name)
    os.makedirs(model_dir)
    weights = {k: np.array(v) for k, v in read_safetensors(
        os.path.join(BERT_DIR, "model.safetensors")).items()}
    rng = np.random.default_rng(7)
    for key in list(weights):
        if ".intermediate.dense." in key or ".output.dense.weight" in key:
            if "attention" in key:
                continue
            shape = {"weight": (INTERMEDIATE, 32) if "intermediate" in key
                     else (32, INTERMEDIATE),
                     "bias": (INTERMEDIATE,)}[key.rsplit(".", 1)[1]]
            weights[key] = rng.normal(0, 0.02, shape).astype(np.float32)
    write_safetensors(os.path.join(model_dir, "model.safetensors"), weights)
    with open(os.path.join(BERT_DIR, "config.json")) as f:
        hf_config = json.load(f)
    hf_config["intermediate_size"] = INTERMEDIATE
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        json.dump(hf_config, f)
    write_file(os.path.join(model_dir, "config.pbtxt"), config)
    return weights


def request(model, token):
    ids = np.full((1, SEQUENCE), token, dtype=np.int64)
    inputs = {"input_ids": ids, "attention_mask": np.ones_like(ids),
              "token_type_ids": np.zeros_like(ids)}
    message = inference_pb2.ModelInferRequest(model_name=model)
    for name, array in inputs.items():
        message.inputs.add(name=name, datatype="INT64", shape=array.shape)
        message.raw_input_contents.append(array.astype("<i8").tobytes())
    return message


SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse(text):
    """{(name, frozenset of (label, value)): float} of a text exposition."""
    samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = SAMPLE.match(line)
        assert match, line
        name, labels, value = match.groups()
        samples[(name, frozenset(LABEL.findall(labels or "")))] = float(value)
    return samples


class MetricsIntegrationTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.repository = tempfile.mkdtemp(prefix="castserve-metrics-")
        cls.weights = add_wide_bert(cls.repository, "bert_plain", PLAIN)
        cls.checkpoint_bytes = sum(a.nbytes for a in cls.weights.values())
        add_wide_bert(cls.repository, "bert_cast", CAST)
        add_wide_bert(cls.repository, "bert_lazy", LAZY)
        cls.daemon = Daemon(CASTSERVE, f"--model-repository={cls.repository}",
                            "--grpc-port=0", "--metrics-port=0",
                            "--http-port=0",
                            "--bind-address=127.0.0.1").wait_ready()
        channel = grpc.insecure_channel(f"127.0.0.1:{cls.daemon.grpc_port}")
        stub = inference_pb2_grpc.GRPCInferenceServiceStub(channel)
        for model, count in (("bert_plain", PLAIN_REQUESTS),
                             ("bert_cast", CAST_REQUESTS),
                             ("bert_lazy", LAZY_REQUESTS)):
            for i in range(count):
                stub.ModelInfer(request(model, 1 + i),
                                timeout=CALL_TIMEOUT_SECONDS)
        for _ in range(BAD_REQUESTS):
            try:
                stub.ModelInfer(request("bert_cast", 10**6),
                                timeout=CALL_TIMEOUT_SECONDS)
                raise AssertionError("an out-of-vocabulary id succeeded")
            except grpc.RpcError as error:
                assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error
        channel.close()
        url = f"http://127.0.0.1:{cls.daemon.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            cls.text = response.read().decode()
        cls.samples = parse(cls.text)
        print(cls.scrape_excerpt(), file=sys.stderr)

    @classmethod
    def tearDownClass(cls):
        cls.daemon.kill()
        shutil.rmtree(cls.repository)

    @classmethod
    def scrape_excerpt(cls):
        keep = ("castserve_model_peak_allocated_bytes",
                "castserve_model_weight_bytes{", "castserve_request_",
                "castserve_model_batch_peak_bytes_sum",
                "castserve_model_batch_peak_bytes_count",
                "castserve_model_materializ", "castserve_model_transient",
                "castserve_model_prefetch")
        return "\n".join(line for line in cls.text.splitlines()
                         if line.startswith(keep))

    def value(self, name, **labels):
        matches = [v for (n, ls), v in self.samples.items()
                   if n == name and set(labels.items()) <= ls]
        self.assertEqual(len(matches), 1, (name, labels, matches))
        return matches[0]

    def test_promtool_accepts_the_exposition(self):
        result = subprocess.run(["promtool", "check", "metrics"],
                                input=self.text, capture_output=True,
                                text=True, timeout=30)
        self.assertEqual(result.returncode, 0,
                         result.stdout + result.stderr)

    def test_every_family_is_in_the_readme_metrics_reference(self):
        exported = set(re.findall(r"^# TYPE (castserve_\w+) ", self.text,
                                  re.MULTILINE))
        with open(README) as f:
            documented = set(re.findall(r"^\| `(castserve_\w+)` \|", f.read(),
                                        re.MULTILINE))
        self.assertGreater(len(exported), 30)
        self.assertEqual(exported - documented, set())

    def test_resident_bytes_by_format(self):
        plain = self.value("castserve_model_weight_bytes", model="bert_plain",
                           state="resident", format="f32")
        self.assertEqual(plain, self.checkpoint_bytes)
        fp8 = self.value("castserve_model_weight_bytes", model="bert_cast",
                         state="resident", format=FP8_FORMAT)
        kept_f32 = self.value("castserve_model_weight_bytes",
                              model="bert_cast", state="resident",
                              format="f32")
        # Norm layers stay f32; every other tensor is fp8, one byte per
        # element plus one f32 scale per row (per element for a 1-D bias).
        expected_fp8 = sum(
            array.size + array.shape[0] * 4
            for name, array in self.weights.items() if "LayerNorm" not in name)
        self.assertEqual(fp8, expected_fp8)
        self.assertEqual(kept_f32, sum(
            array.nbytes for name, array in self.weights.items()
            if "LayerNorm" in name))
        self.assertLess(fp8, 0.3 * plain)
        for model in ("bert_plain", "bert_cast"):
            self.assertEqual(self.value("castserve_model_state", model=model,
                                        state="READY"), 1)
            self.assertEqual(self.value("castserve_model_weight_bytes",
                                        model=model,
                                        state="transient_compute"), 0)

    def test_peak_bytes_are_smaller_with_casting(self):
        plain = self.value("castserve_model_peak_allocated_bytes",
                           model="bert_plain")
        cast = self.value("castserve_model_peak_allocated_bytes",
                          model="bert_cast")
        # The plain model holds all its f32 weights at once.
        self.assertGreaterEqual(plain, self.checkpoint_bytes)
        self.assertGreater(cast, 0)
        self.assertLess(cast, 0.6 * plain)
        # Both models' weights were live at once.
        self.assertGreater(
            self.value("castserve_device_peak_allocated_bytes", device="cpu"),
            sum(self.value("castserve_model_weight_bytes", model=model,
                           state="resident", format=fmt)
                for model, fmt in (("bert_plain", "f32"),
                                   ("bert_cast", FP8_FORMAT),
                                   ("bert_cast", "f32"))))
        # A cast batch of SEQUENCE rows multiplies its linear layers
        # straight from their fp8 storage (models/kernels/storage_product.h): no
        # batch holds even the f32 copy of the largest layer, which is what
        # each batch held when products needed compute copies (the refused
        # requests never ran).
        plain_batches = self.value("castserve_model_batch_peak_bytes_count",
                                   model="bert_plain")
        cast_batches = self.value("castserve_model_batch_peak_bytes_count",
                                  model="bert_cast")
        self.assertEqual(plain_batches, PLAIN_REQUESTS)
        self.assertEqual(cast_batches, CAST_REQUESTS)
        cast_batch_bytes = self.value("castserve_model_batch_peak_bytes_sum",
                                      model="bert_cast")
        self.assertGreater(cast_batch_bytes, 0)
        self.assertLess(cast_batch_bytes,
                        CAST_REQUESTS * INTERMEDIATE * 32 * 4)

    def test_request_counters_match_what_was_sent(self):
        for model, ok, bad in (("bert_plain", PLAIN_REQUESTS, 0),
                               ("bert_cast", CAST_REQUESTS, BAD_REQUESTS)):
            self.assertEqual(self.value("castserve_request_success_total",
                                        model=model, version="1"), ok)
            self.assertEqual(self.value("castserve_inference_count_total",
                                        model=model), ok)
            # Refused requests count as requests, not as executions.
            self.assertEqual(self.value("castserve_execution_count_total",
                                        model=model), ok)
            self.assertEqual(self.value("castserve_batch_size_count",
                                        model=model), ok)
            self.assertEqual(self.value("castserve_batch_size_sum",
                                        model=model), ok)
            self.assertEqual(self.value("castserve_request_duration_seconds_"
                                        "count", model=model), ok + bad)
            self.assertEqual(self.value("castserve_pending_requests",
                                        model=model), 0)
            self.assertEqual(self.value("castserve_request_duration_seconds_"
                                        "bucket", model=model, le="+Inf"),
                             ok + bad)
            self.assertGreater(self.value("castserve_model_load_duration_"
                                          "seconds", model=model), 0)
        self.assertEqual(self.value("castserve_request_failure_total",
                                    model="bert_cast",
                                    reason="INVALID_ARGUMENT"), BAD_REQUESTS)
        self.assertFalse([k for k in self.samples
                          if k[0] == "castserve_request_failure_total"
                          and ("model", "bert_plain") in k[1]])

    def materialized(self, model, copy):
        """(count, bytes) of the model's copies of one kind."""
        return (self.value("castserve_model_materializations_total",
                           model=model, copy=copy),
                self.value("castserve_model_materialized_bytes_total",
                           model=model, copy=copy))

    def test_materializations_count_copies_made_at_load_and_at_first_use(self):
        tensors = len(self.weights)
        # Eager f32: every tensor copied once at load; it is its own compute
        # copy, so nothing is decoded.
        self.assertEqual(self.materialized("bert_plain", "storage"),
                         (tensors, self.checkpoint_bytes))
        self.assertEqual(self.materialized("bert_plain", "compute"), (0, 0))
        # Lazy fp8: only the cast weights get a storage copy (the norms
        # stay mapped), made by the first request.
        cast_tensors = sum(1 for name in self.weights
                           if "LayerNorm" not in name)
        self.assertEqual(
            self.materialized("bert_lazy", "storage"),
            (cast_tensors, self.value("castserve_model_weight_bytes",
                                      model="bert_lazy", state="resident",
                                      format=FP8_FORMAT)))
        self.assertGreater(self.value(
            "castserve_model_materialization_seconds_total",
            model="bert_lazy", copy="storage"), 0)

    def test_transient_copies_are_one_f32_model_per_forward_but_tables(self):
        # Every weight is decoded to f32 once per forward and dropped after
        # its module ran, except that the three embedding tables decode
        # only the SEQUENCE rows each request looks up, and that the linear
        # layers' matrices are not decoded at all: a request's SEQUENCE rows
        # are few enough (at most 16, models/kernels/storage_product.h) for the
        # product to read their fp8 storage directly.
        tables = [array for name, array in self.weights.items()
                  if name.endswith("_embeddings.weight")]
        self.assertEqual(len(tables), 3)
        matrices = [array for name, array in self.weights.items()
                    if array.ndim == 2
                    and not name.endswith("_embeddings.weight")]
        self.assertGreater(len(matrices), 0)
        self.assertLessEqual(SEQUENCE, 16)
        per_forward = (self.checkpoint_bytes - sum(t.nbytes for t in tables)
                       + sum(SEQUENCE * t.shape[1] * 4 for t in tables)
                       - sum(m.nbytes for m in matrices))
        count, decoded = self.materialized("bert_lazy", "compute")
        self.assertEqual(count,
                         LAZY_REQUESTS * (len(self.weights) - len(matrices)))
        self.assertEqual(decoded, LAZY_REQUESTS * per_forward)
        self.assertEqual(self.value("castserve_model_transient_copy_bytes_"
                                    "total", model="bert_lazy"), decoded)
        self.assertGreater(self.value(
            "castserve_model_materialization_seconds_total",
            model="bert_lazy", copy="compute"), 0)
        self.assertEqual(self.value("castserve_model_transient_copy_bytes_"
                                    "total", model="bert_plain"), 0)

    def test_prefetch_outcomes_are_counted_for_every_forward(self):
        # Every forward (the first in the tree's order) prefetches every
        # module with weights but the first.
        outcomes = (self.value("castserve_model_prefetch_hits_total",
                               model="bert_lazy") +
                    self.value("castserve_model_prefetch_misses_total",
                               model="bert_lazy"))
        self.assertGreater(outcomes, 0)
        self.assertEqual(outcomes % LAZY_REQUESTS, 0, outcomes)
        for model in ("bert_plain", "bert_cast"):
            self.assertEqual(self.value("castserve_model_prefetch_hits_total",
                                        model=model), 0)
            self.assertEqual(self.value(
                "castserve_model_prefetch_misses_total", model=model), 0)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
