#!/usr/bin/python3
"""End-to-end: configs that ask for too much never crash or exhaust the daemon.

Each case is a model whose config (on disk, or sent as RepositoryModelLoad's
`config` parameter) asks for something past a limit: a warmup input of 10^12
elements, 1500 instances, a warmup count of 4 billion, a warmup data file
that is a symlink to /dev/zero. Each must leave that model UNAVAILABLE with a
reason naming the limit, while the daemon keeps serving a good model and
stays alive, its RSS far from what the config asked for.

Run by Bazel as:
  hardening_integration_test.py CASTSERVE BERT_FILE
(Debian's python3 with python3-grpcio, python3-protobuf and python3-numpy).
"""

import os
import sys
import time
import unittest

sys.path.insert(0, os.getcwd())  # the runfiles root holds proto/*_pb2.py
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402
from proto import inference_pb2  # noqa: E402

from daemon_testlib import (RepositoryTestCase, add_model,  # noqa: E402
                             raw_request)

CASTSERVE = os.path.abspath(sys.argv[1])
BERT_DIR = os.path.dirname(os.path.abspath(sys.argv[2]))
CALL_TIMEOUT_SECONDS = 60
MAX_RSS_BYTES = 1 << 30  # the daemon serves two tiny models

BERT_CONFIG = "max_batch_size: 4\n"


def warmup(dims, count=1, data_file=None):
    data = (f'input_data_file: "{data_file}"' if data_file
            else "zero_data: true")
    return (f'model_warmup {{ name: "w" batch_size: 1 count: {count} '
            f'inputs {{ key: "input_ids" value {{ data_type: TYPE_INT64 '
            f'dims: {dims} {data} }} }} }}\n')


# name -> (config.pbtxt, what the reason must say)
BAD_CONFIGS = {
    "huge_warmup": (BERT_CONFIG + warmup("[ 1000000, 1000000 ]"),
                    "past the limit of"),
    "many_instances": (BERT_CONFIG + "instance_group { count: 1500 }\n",
                       "1500 instances, above the limit of 16"),
    "endless_warmup": (BERT_CONFIG + warmup("[ 8 ]", count=4000000000),
                       "count 4000000000, above the limit of 1000"),
    "dev_zero_warmup": (BERT_CONFIG + warmup("[ 8 ]", data_file="zeros.bin"),
                        "leads to /dev/zero, outside the model repository"),
}


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


class DaemonTestCase(RepositoryTestCase):
    """A daemon serving the bert fixture as "good"."""
    castserve = CASTSERVE
    good_dir = BERT_DIR
    good_config = BERT_CONFIG
    call_timeout_seconds = CALL_TIMEOUT_SECONDS


class HardeningTest(DaemonTestCase):

    @classmethod
    def add_models(cls, repository):
        for name, (config, _) in BAD_CONFIGS.items():
            model_dir = add_model(repository, name, BERT_DIR, config)
            os.symlink("/dev/zero", os.path.join(model_dir, "zeros.bin"))

    def assert_serving(self):
        self.assertIsNone(self.daemon.process.poll(), self.daemon.output())
        self.infer_good()
        self.assertLess(rss_bytes(self.daemon.process.pid), MAX_RSS_BYTES)

    def test_bad_configs_on_disk_leave_their_model_unavailable(self):
        index = self.index()
        for name, (_, reason) in BAD_CONFIGS.items():
            with self.subTest(name):
                self.assertEqual(index[name].state, "UNAVAILABLE")
                self.assertIn(reason, index[name].reason)
        self.assert_serving()

    def test_bad_configs_sent_with_a_load_fail_that_load_only(self):
        for name, (config_text, reason) in BAD_CONFIGS.items():
            with self.subTest(name):
                # The same config as JSON: dims and counts of the text form.
                config = self.stub.ModelConfig(inference_pb2.ModelConfigRequest(
                    name="good")).config
                from google.protobuf import json_format, text_format
                text_format.Merge(config_text, config)
                config.name = name
                request = inference_pb2.RepositoryModelLoadRequest(
                    model_name=name)
                request.parameters["config"].string_param = (
                    json_format.MessageToJson(config))
                with self.assertRaises(grpc.RpcError) as raised:
                    self.stub.RepositoryModelLoad(
                        request, timeout=CALL_TIMEOUT_SECONDS)
                self.assertIn(reason, raised.exception.details())
                self.assert_serving()


class RequestChecksTest(DaemonTestCase):
    """Malformed request fields get INVALID_ARGUMENT with a short, precise
    message; library log lines they cause are rate-limited."""

    def assert_invalid(self, request, message):
        with self.assertRaises(grpc.RpcError) as raised:
            self.stub.ModelInfer(request, timeout=CALL_TIMEOUT_SECONDS)
        self.assertEqual(raised.exception.code(),
                         grpc.StatusCode.INVALID_ARGUMENT,
                         raised.exception.details())
        self.assertIn(message, raised.exception.details())
        return raised.exception.details()

    def test_timeout_parameter_must_be_a_non_negative_integer(self):
        negative = raw_request("good", self.inputs)
        negative.parameters["timeout"].int64_param = -5
        self.assert_invalid(negative, "parameter 'timeout' must be a "
                            "non-negative integer")
        text = raw_request("good", self.inputs)
        text.parameters["timeout"].string_param = "10"
        self.assert_invalid(text, "parameter 'timeout'")
        zero = raw_request("good", self.inputs)
        zero.parameters["timeout"].int64_param = 0  # none, as in Triton
        self.stub.ModelInfer(zero, timeout=CALL_TIMEOUT_SECONDS)

    def test_a_huge_model_name_is_not_echoed(self):
        request = raw_request("x" * 100000, self.inputs)
        with self.assertRaises(grpc.RpcError) as raised:
            self.stub.ModelInfer(request, timeout=CALL_TIMEOUT_SECONDS)
        details = raised.exception.details()
        self.assertEqual(raised.exception.code(), grpc.StatusCode.NOT_FOUND)
        self.assertIn("...(100000 bytes)", details)
        self.assertLess(len(details), 400)
        with self.assertRaises(grpc.RpcError) as raised:
            self.stub.ModelMetadata(inference_pb2.ModelMetadataRequest(
                name="y" * 100000, version="v" * 100000))
        self.assertLess(len(raised.exception.details()), 600)

    def test_invalid_utf8_requests_log_a_bounded_number_of_lines(self):
        # model_name (field 1) holding bytes that are not UTF-8: protobuf
        # logs an error for each such request, which castserve rate-limits.
        bad_name = b"\x0a\x04\xff\xfe\xfd\xfc"
        call = self.channel.unary_unary(
            "/inference.GRPCInferenceService/ModelInfer",
            request_serializer=lambda raw: raw,
            response_deserializer=lambda raw: raw)
        before = self.daemon.output().count("component=protobuf")
        start = time.monotonic()
        for _ in range(200):
            with self.assertRaises(grpc.RpcError):
                call(bad_name, timeout=CALL_TIMEOUT_SECONDS)
        elapsed = time.monotonic() - start
        logged = self.daemon.output().count("component=protobuf") - before
        self.assertGreater(logged, 0, "protobuf's lines go through the log")
        # 10 a second, plus one for a window the loop only started.
        self.assertLessEqual(logged, 10 * (int(elapsed) + 2))
        self.stub.ModelInfer(raw_request("good", self.inputs),
                             timeout=CALL_TIMEOUT_SECONDS)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
