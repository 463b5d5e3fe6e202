#!/usr/bin/python3
"""End-to-end: every inference request counts exactly once in the metrics
and in ModelStatistics, whichever layer refused it.

Requests refused while their inputs are converted (wrong shape, dtype or
byte size, a batch above max_batch_size, a duplicated or unknown input, an
unknown output), one whose response exceeds --max-message-bytes, and ones
refused before any model took them (a malformed timeout parameter, an
unknown model) are each counted once as a failure with their status code;
the one good request as a success.

Run by Bazel as:
  request_accounting_integration_test.py CASTSERVE BERT_FILE
(Debian's python3 with python3-grpcio, python3-protobuf and python3-numpy).
"""

import os
import re
import shutil
import sys
import tempfile
import unittest
import urllib.request

sys.path.insert(0, os.getcwd())  # the runfiles root holds proto/*_pb2.py
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402
import numpy as np  # noqa: E402
from proto import inference_pb2, inference_pb2_grpc  # noqa: E402

from daemon_testlib import (Daemon, add_model, raw_request,  # noqa: E402
                             references)

CASTSERVE = os.path.abspath(sys.argv[1])
BERT_DIR = os.path.dirname(os.path.abspath(sys.argv[2]))
MAX_MESSAGE_BYTES = 16384
TIMEOUT = 60


def failures_by_model_and_reason(metrics_text):
    """{(model, reason): count} of castserve_request_failure_total."""
    counts = {}
    for line in metrics_text.splitlines():
        if not line.startswith("castserve_request_failure_total"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
        key = (labels.get("model", ""), labels["reason"])
        counts[key] = counts.get(key, 0) + float(line.rsplit(" ", 1)[1])
    return counts


class RequestAccountingTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.repository = tempfile.mkdtemp(prefix="castserve-accounting-")
        add_model(cls.repository, "good", BERT_DIR, "max_batch_size: 4\n")
        cls.daemon = Daemon(CASTSERVE, f"--model-repository={cls.repository}",
                            "--grpc-port=0", "--metrics-port=0",
                            "--http-port=0",
                            "--bind-address=127.0.0.1",
                            f"--max-message-bytes={MAX_MESSAGE_BYTES}"
                            ).wait_ready()
        cls.channel = grpc.insecure_channel(
            f"127.0.0.1:{cls.daemon.grpc_port}")
        cls.stub = inference_pb2_grpc.GRPCInferenceServiceStub(cls.channel)
        cls.inputs, _ = references(BERT_DIR)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.daemon.kill()
        shutil.rmtree(cls.repository)

    def bad_requests(self):
        """(what, request, expected code) for each way to be refused."""
        ids = self.inputs["input_ids"]
        good = raw_request("good", {"input_ids": ids})
        cases = []

        def case(what, code, edit, model="good"):
            request = inference_pb2.ModelInferRequest()
            request.CopyFrom(good)
            request.model_name = model
            edit(request)
            cases.append((what, request, code))

        invalid = grpc.StatusCode.INVALID_ARGUMENT
        case("rank", invalid, lambda r: r.inputs[0].shape.__delitem__(0))
        case("dtype", invalid,
             lambda r: setattr(r.inputs[0], "datatype", "FP32"))
        case("byte size", invalid,
             lambda r: r.raw_input_contents.__setitem__(0, b"\0" * 5))

        def batch_of_five(r):
            r.inputs[0].shape[0] = 5
            r.raw_input_contents[0] = np.ones(
                (5, ids.shape[1]), np.int64).tobytes()
        case("batch above max", invalid, batch_of_five)

        def duplicated(r):
            r.inputs.add().CopyFrom(r.inputs[0])
            r.raw_input_contents.append(r.raw_input_contents[0])
        case("duplicated input", invalid, duplicated)

        def unknown_input(r):
            duplicated(r)
            r.inputs[1].name = "nope"
        case("unknown input", invalid, unknown_input)
        case("unknown output", invalid,
             lambda r: r.outputs.add(name="nope"))

        def huge_response(r):
            long_ids = np.ones((4, 64), np.int64)
            r.inputs[0].ClearField("shape")
            r.inputs[0].shape.extend(long_ids.shape)
            r.raw_input_contents[0] = long_ids.tobytes()
        case("response over --max-message-bytes",
             grpc.StatusCode.RESOURCE_EXHAUSTED, huge_response)
        # Refused before a model took them.
        case("timeout parameter", invalid,
             lambda r: r.parameters["timeout"].__setattr__(
                 "string_param", "soon"))
        case("unknown model", grpc.StatusCode.NOT_FOUND, lambda r: None,
             model="ghost")
        return good, cases

    def test_every_request_counts_once(self):
        good, cases = self.bad_requests()
        self.stub.ModelInfer(good, timeout=TIMEOUT)
        for what, request, code in cases:
            with self.subTest(what):
                with self.assertRaises(grpc.RpcError) as raised:
                    self.stub.ModelInfer(request, timeout=TIMEOUT)
                self.assertEqual(raised.exception.code(), code,
                                 raised.exception.details())
        url = f"http://127.0.0.1:{self.daemon.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=TIMEOUT) as response:
            text = response.read().decode()
        failures = failures_by_model_and_reason(text)
        self.assertEqual(failures, {("good", "INVALID_ARGUMENT"): 7,
                                    ("good", "RESOURCE_EXHAUSTED"): 1,
                                    ("", "INVALID_ARGUMENT"): 1,
                                    ("", "NOT_FOUND"): 1}, text)
        self.assertRegex(text, r'castserve_request_success_total\{'
                               r'model="good",version="1"\} 1\n')
        stats = self.stub.ModelStatistics(
            inference_pb2.ModelStatisticsRequest(name="good"),
            timeout=TIMEOUT).model_stats[0]
        self.assertEqual(stats.inference_stats.success.count, 1)
        self.assertEqual(stats.inference_stats.fail.count, 8)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
