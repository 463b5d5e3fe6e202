#!/usr/bin/python3
"""End-to-end test of castserve serving the committed fixture models.

A temporary repository holds copies of models/testdata/bert and clip_vision
(checkpoint folders beside config.pbtxt) in several configurations. The test
drives the daemon with castserve-client and with an independent Python gRPC
client built from our protos, and compares outputs with the fixtures'
reference.safetensors within 1e-4.

Run by Bazel as:
  model_serving_integration_test.py CASTSERVE CASTSERVE_CLIENT BERT_FILE CLIP_FILE
(BERT_FILE, CLIP_FILE: a file of models/testdata/bert and clip_vision)
(Debian's python3 with python3-grpcio, python3-protobuf and python3-numpy).
"""

import json
import os
import shutil
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.getcwd())  # the runfiles root holds proto/*_pb2.py
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402
import numpy as np  # noqa: E402
from proto import inference_pb2, inference_pb2_grpc  # noqa: E402

from daemon_testlib import (Daemon, add_model, raw_request,  # noqa: E402
                             references, response_arrays, run,
                             write_file, write_safetensors)

CASTSERVE = os.path.abspath(sys.argv[1])
CLIENT = os.path.abspath(sys.argv[2])
# Any file of each fixture folder; the folder is what counts.
BERT_DIR = os.path.dirname(os.path.abspath(sys.argv[3]))
CLIP_DIR = os.path.dirname(os.path.abspath(sys.argv[4]))
TOLERANCE = 1e-4
MAX_MESSAGE_BYTES = 8 << 20
CALL_TIMEOUT_SECONDS = 60

BERT_SIGNATURE = """
input { name: "input_ids" data_type: TYPE_INT64 dims: [ -1 ] }
input { name: "attention_mask" data_type: TYPE_INT64 dims: [ -1 ] }
input { name: "token_type_ids" data_type: TYPE_INT64 dims: [ -1 ] }
output { name: "last_hidden_state" data_type: TYPE_FP32 dims: [ -1, 32 ] }
output { name: "pooler_output" data_type: TYPE_FP32 dims: [ 32 ] }
"""
BERT_CONFIG = """
max_batch_size: 8
instance_group { kind: KIND_CPU count: 2 }
dynamic_batching { max_queue_delay_microseconds: 5000 }
""" + BERT_SIGNATURE
CLIP_CONFIG = """
max_batch_size: 4
input { name: "pixel_values" data_type: TYPE_FP32 dims: [ 3, 32, 32 ] }
output { name: "last_hidden_state" data_type: TYPE_FP32 dims: [ 17, 32 ] }
output { name: "pooler_output" data_type: TYPE_FP32 dims: [ 32 ] }
"""


def make_repository():
    repository = tempfile.mkdtemp(prefix="castserve-models-")
    add_model(repository, "bert", BERT_DIR, BERT_CONFIG)
    # No signature in the config: the architecture's fills it in.
    add_model(repository, "bert_lazy", BERT_DIR,
              "max_batch_size: 8\nload_policy: LOAD_POLICY_FIRST_REQUEST\n")
    add_model(repository, "bert_triton", BERT_DIR, BERT_CONFIG)
    add_model(repository, "bert_reload", BERT_DIR, BERT_CONFIG)
    add_model(repository, "clip", CLIP_DIR, CLIP_CONFIG)
    write_file(os.path.join(repository, "broken", "config.pbtxt"),
               'checkpoint { path: "missing" }\n' + BERT_SIGNATURE)
    return repository


class ModelServingTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.repository = make_repository()
        cls.daemon = Daemon(CASTSERVE, f"--model-repository={cls.repository}",
                            "--grpc-port=0", "--metrics-port=0",
                            "--http-port=0",
                            "--bind-address=127.0.0.1",
                            f"--max-message-bytes={MAX_MESSAGE_BYTES}"
                            ).wait_ready()
        cls.url = f"127.0.0.1:{cls.daemon.grpc_port}"
        cls.channel = grpc.insecure_channel(cls.url, options=[
            ("grpc.max_send_message_length", 64 << 20),
            ("grpc.max_receive_message_length", 64 << 20)])
        cls.stub = inference_pb2_grpc.GRPCInferenceServiceStub(cls.channel)
        cls.bert_inputs, cls.bert_outputs = references(BERT_DIR)
        cls.clip_inputs, cls.clip_outputs = references(CLIP_DIR)
        cls.scratch = tempfile.mkdtemp(prefix="castserve-client-")

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.daemon.kill()
        shutil.rmtree(cls.repository)
        shutil.rmtree(cls.scratch)

    def client(self, *args):
        return run(CLIENT, f"--url={self.url}",
                   f"--timeout-seconds={CALL_TIMEOUT_SECONDS}", *args,
                   timeout=CALL_TIMEOUT_SECONDS + 10)

    def infer(self, request, timeout=CALL_TIMEOUT_SECONDS):
        return self.stub.ModelInfer(request, timeout=timeout)

    def assert_close(self, actual, expected, what=""):
        self.assertEqual(actual.shape, expected.shape, what)
        difference = float(np.max(np.abs(actual - expected)))
        self.assertLessEqual(difference, TOLERANCE, what)

    def assert_code(self, call, code, message=None):
        with self.assertRaises(grpc.RpcError) as raised:
            call()
        self.assertEqual(raised.exception.code(), code,
                         raised.exception.details())
        if message is not None:
            self.assertIn(message, raised.exception.details())
        return raised.exception.details()

    def index(self):
        response = self.stub.RepositoryIndex(
            inference_pb2.RepositoryIndexRequest())
        return {model.name: model for model in response.models}

    # --- castserve-client ------------------------------------------------

    def write_inputs_json(self):
        path = os.path.join(self.scratch, "bert_inputs.json")
        with open(path, "w") as f:
            json.dump({name: {"datatype": "INT64", "shape": list(a.shape),
                              "data": a.tolist()}
                       for name, a in self.bert_inputs.items()}, f)
        return path

    def test_client_metadata_config_and_infer_match_reference(self):
        result = self.client("metadata", "bert")
        self.assertEqual(result.returncode, 0, result.stderr)
        metadata = json.loads(result.stdout)
        self.assertEqual([i["name"] for i in metadata["inputs"]],
                         ["input_ids", "attention_mask", "token_type_ids"])
        self.assertEqual(metadata["inputs"][0]["datatype"], "INT64")

        result = self.client("config", "bert")
        self.assertEqual(result.returncode, 0, result.stderr)
        config = json.loads(result.stdout)["config"]
        self.assertEqual(config["max_batch_size"], 8)
        self.assertIn("dynamic_batching", config)
        self.assertEqual(config["output"][1]["name"], "pooler_output")

        inputs_json = self.write_inputs_json()
        result = self.client("infer", "bert", f"--inputs={inputs_json}")
        self.assertEqual(result.returncode, 0, result.stderr)
        outputs = json.loads(result.stdout)
        for name, expected in self.bert_outputs.items():
            actual = np.array(outputs[name]["data"], dtype=np.float32)
            self.assert_close(actual.reshape(outputs[name]["shape"]),
                              expected, name)

        out_dir = tempfile.mkdtemp(dir=self.scratch)
        result = self.client("infer", "bert", f"--inputs={inputs_json}",
                             "--outputs=pooler_output",
                             f"--output-dir={out_dir}")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(os.listdir(out_dir), ["pooler_output.npy"])
        self.assert_close(np.load(os.path.join(out_dir, "pooler_output.npy")),
                          self.bert_outputs["pooler_output"])

    def test_client_reads_npy_and_safetensors_inputs(self):
        npy_sources = []
        for name, array in self.bert_inputs.items():
            path = os.path.join(self.scratch, f"{name}.npy")
            np.save(path, array)
            npy_sources.append(f"{name}={path}")
        safetensors_path = os.path.join(self.scratch, "inputs.safetensors")
        write_safetensors(safetensors_path, self.bert_inputs)
        for sources in [",".join(npy_sources), safetensors_path]:
            result = self.client("infer", "bert", f"--inputs={sources}",
                                 "--outputs=pooler_output")
            self.assertEqual(result.returncode, 0, result.stderr)
            pooled = json.loads(result.stdout)["pooler_output"]
            self.assert_close(
                np.array(pooled["data"], np.float32).reshape(pooled["shape"]),
                self.bert_outputs["pooler_output"], sources)

    def test_client_reports_errors_with_their_code(self):
        result = self.client("config", "nonexistent")
        self.assertEqual(result.returncode, 1)
        self.assertIn("NOT_FOUND", result.stderr)
        result = self.client("load", "../outside")
        self.assertEqual(result.returncode, 1)
        self.assertIn("INVALID_ARGUMENT", result.stderr)

    # --- Python gRPC client ----------------------------------------------

    def test_python_client_raw_and_typed_match_reference(self):
        response = self.infer(raw_request("bert", self.bert_inputs,
                                          request_id="raw-1"))
        self.assertEqual(response.id, "raw-1")
        self.assertEqual(response.model_name, "bert")
        outputs = response_arrays(response)
        for name, expected in self.bert_outputs.items():
            self.assert_close(outputs[name], expected, name)

        typed = inference_pb2.ModelInferRequest(model_name="bert", id="typed")
        for name, array in self.bert_inputs.items():
            tensor = typed.inputs.add(name=name, datatype="INT64",
                                      shape=array.shape)
            tensor.contents.int64_contents.extend(array.flatten().tolist())
        typed.outputs.add(name="pooler_output")
        typed.parameters["custom_key"].string_param = "ignored"
        response = self.infer(typed)
        self.assertEqual([o.name for o in response.outputs],
                         ["pooler_output"])
        self.assert_close(response_arrays(response)["pooler_output"],
                          self.bert_outputs["pooler_output"])

    def test_clip_vision_matches_reference(self):
        response = self.infer(raw_request("clip", self.clip_inputs))
        outputs = response_arrays(response)
        for name, expected in self.clip_outputs.items():
            self.assert_close(outputs[name], expected, name)

    def test_stream_answers_in_order_and_survives_a_bad_request(self):
        requests = []
        for i in range(12):
            row = {k: v[i % 2:i % 2 + 1] for k, v in self.bert_inputs.items()}
            request = raw_request("bert", row, ["pooler_output"], str(i))
            if i == 4:
                request.inputs[0].datatype = "FP32"
            requests.append(request)
        responses = list(self.stub.ModelStreamInfer(
            iter(requests), timeout=CALL_TIMEOUT_SECONDS))
        self.assertEqual([r.infer_response.id for r in responses],
                         [str(i) for i in range(12)])
        for i, response in enumerate(responses):
            if i == 4:
                self.assertIn("datatype FP32, expected INT64",
                              response.error_message)
                continue
            self.assertEqual(response.error_message, "")
            self.assert_close(
                response_arrays(response.infer_response)["pooler_output"],
                self.bert_outputs["pooler_output"][i % 2:i % 2 + 1])

    def test_concurrent_clients_and_dynamic_batching(self):
        clients, requests_per_client = 16, 200
        rows = [{k: v[i:i + 1] for k, v in self.bert_inputs.items()}
                for i in range(2)]
        expected = [self.bert_outputs["pooler_output"][i:i + 1]
                    for i in range(2)]
        errors = []

        def client_loop(client_index):
            channel = grpc.insecure_channel(self.url)
            stub = inference_pb2_grpc.GRPCInferenceServiceStub(channel)
            try:
                for n in range(requests_per_client):
                    row = (client_index + n) % 2
                    response = stub.ModelInfer(
                        raw_request("bert", rows[row], ["pooler_output"],
                                    f"{client_index}-{n}"),
                        timeout=CALL_TIMEOUT_SECONDS)
                    actual = response_arrays(response)["pooler_output"]
                    if (response.id != f"{client_index}-{n}" or
                            np.max(np.abs(actual - expected[row])) >
                            TOLERANCE):
                        errors.append(f"wrong output {client_index}-{n}")
            except grpc.RpcError as error:
                errors.append(f"{error.code()}: {error.details()}")
            finally:
                channel.close()

        before = self.statistics("bert")
        threads = [threading.Thread(target=client_loop, args=(i,))
                   for i in range(clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self.assertEqual(errors, [])
        after = self.statistics("bert")
        self.assertGreaterEqual(
            after.inference_count - before.inference_count,
            clients * requests_per_client)
        self.assertGreaterEqual(
            after.inference_stats.success.count -
            before.inference_stats.success.count,
            clients * requests_per_client)
        # Batches of more than one request formed (dynamic batching).
        self.assertTrue(any(batch.batch_size > 1 and
                            batch.compute_infer.count > 0
                            for batch in after.batch_stats),
                        after.batch_stats)
        self.assertLess(after.execution_count, after.inference_count)

    def statistics(self, model):
        response = self.stub.ModelStatistics(
            inference_pb2.ModelStatisticsRequest(name=model))
        self.assertEqual(len(response.model_stats), 1)
        return response.model_stats[0]

    def test_statistics_report_measured_memory(self):
        self.infer(raw_request("bert", self.bert_inputs))
        stats = self.statistics("bert")
        self.assertGreater(stats.last_inference, 0)
        self.assertEqual([m.type for m in stats.memory_usage], ["CPU"])
        self.assertGreater(stats.memory_usage[0].byte_size, 0)
        result = self.client("stats", "bert")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(json.loads(result.stdout)["model_stats"][0]["name"],
                         "bert")

    def test_timeout_parameter_and_deadline_are_honoured(self):
        request = raw_request("bert", self.bert_inputs)
        request.parameters["timeout"].int64_param = 1  # microseconds
        self.assert_code(lambda: self.infer(request),
                         grpc.StatusCode.DEADLINE_EXCEEDED)
        self.assert_code(
            lambda: self.infer(raw_request("bert", self.bert_inputs),
                               timeout=0.0001),
            grpc.StatusCode.DEADLINE_EXCEEDED)
        self.infer(raw_request("bert", self.bert_inputs))

    # --- lifecycle ---------------------------------------------------------

    def test_first_request_loads_a_lazy_model(self):
        self.assertNotEqual(self.index()["bert_lazy"].state, "READY")
        self.assertFalse(self.stub.ModelReady(
            inference_pb2.ModelReadyRequest(name="bert_lazy")).ready)
        response = self.infer(raw_request("bert_lazy", self.bert_inputs))
        self.assert_close(response_arrays(response)["pooler_output"],
                          self.bert_outputs["pooler_output"])
        self.assertEqual(self.index()["bert_lazy"].state, "READY")
        self.assertTrue(self.stub.ModelReady(
            inference_pb2.ModelReadyRequest(name="bert_lazy")).ready)

    def test_load_unload_and_reload_with_a_new_config(self):
        result = self.client("unload", "bert_reload")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(self.index()["bert_reload"].state, "UNAVAILABLE")
        self.assertFalse(self.stub.ModelReady(
            inference_pb2.ModelReadyRequest(name="bert_reload")).ready)

        result = self.client("load", "bert_reload")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(self.index()["bert_reload"].state, "READY")
        self.infer(raw_request("bert_reload", self.bert_inputs))

        config = self.stub.ModelConfig(inference_pb2.ModelConfigRequest(
            name="bert_reload")).config
        config.max_batch_size = 1
        from google.protobuf import json_format
        request = inference_pb2.RepositoryModelLoadRequest(
            model_name="bert_reload")
        request.parameters["config"].string_param = json_format.MessageToJson(
            config)
        self.stub.RepositoryModelLoad(request, timeout=CALL_TIMEOUT_SECONDS)
        self.assertEqual(self.stub.ModelConfig(inference_pb2.ModelConfigRequest(
            name="bert_reload")).config.max_batch_size, 1)
        self.assert_code(
            lambda: self.infer(raw_request("bert_reload", self.bert_inputs)),
            grpc.StatusCode.INVALID_ARGUMENT, "exceeds max_batch_size 1")

    # --- bad input -----------------------------------------------------------

    def test_bad_input_table(self):
        good = self.bert_inputs
        ids = good["input_ids"]

        def with_input(name, value):
            inputs = dict(good)
            inputs[name] = value
            return raw_request("bert", inputs)

        def renamed():
            request = raw_request("bert", good)
            request.inputs[0].name = "ids"
            return request

        def missing():
            return raw_request("bert", {"attention_mask":
                                        good["attention_mask"]})

        def wrong_datatype():
            return with_input("input_ids", ids.astype(np.float32))

        def short_raw():
            request = raw_request("bert", good)
            request.raw_input_contents[0] = request.raw_input_contents[0][:-8]
            return request

        def mixed():
            request = raw_request("bert", good)
            request.inputs[1].contents.int64_contents.extend([1])
            return request

        def version():
            request = raw_request("bert", good)
            request.model_version = "7"
            return request

        def unknown_output():
            return raw_request("bert", good, ["logits"])

        big = {k: np.zeros((8, 65536), np.int64) for k in good}
        out_of_vocabulary = with_input("input_ids", ids + 10**6)
        table = [
            ("unknown model", raw_request("ghost", good),
             grpc.StatusCode.NOT_FOUND, "ghost"),
            ("unknown version", version(), grpc.StatusCode.NOT_FOUND, "7"),
            ("wrong input name", renamed(), grpc.StatusCode.INVALID_ARGUMENT,
             "unknown input 'ids'"),
            ("missing input", missing(), grpc.StatusCode.INVALID_ARGUMENT,
             "missing input 'input_ids'"),
            ("wrong datatype", wrong_datatype(),
             grpc.StatusCode.INVALID_ARGUMENT, "expected INT64"),
            ("wrong rank", with_input("input_ids", ids.reshape(-1)),
             grpc.StatusCode.INVALID_ARGUMENT, "expected rank 2"),
            ("raw size", short_raw(), grpc.StatusCode.INVALID_ARGUMENT,
             "raw data has"),
            ("batch above max",
             raw_request("bert", {k: np.repeat(v, 5, axis=0)
                                  for k, v in good.items()}),
             grpc.StatusCode.INVALID_ARGUMENT, "exceeds max_batch_size 8"),
            ("mixed raw/typed", mixed(), grpc.StatusCode.INVALID_ARGUMENT,
             "send all inputs raw or all typed"),
            ("unknown output", unknown_output(),
             grpc.StatusCode.INVALID_ARGUMENT, "unknown output 'logits'"),
            ("token id outside the vocabulary", out_of_vocabulary,
             grpc.StatusCode.INVALID_ARGUMENT, None),
            ("message above the limit", raw_request("bert", big),
             grpc.StatusCode.RESOURCE_EXHAUSTED, None),
            ("model that failed to load", raw_request("broken", good),
             grpc.StatusCode.UNAVAILABLE, "missing"),
        ]
        for what, request, code, message in table:
            with self.subTest(what):
                self.assert_code(lambda: self.infer(request), code, message)
        for name in ["a/b", "..", "x\0y", ""]:
            with self.subTest(load=name):
                self.assert_code(
                    lambda: self.stub.RepositoryModelLoad(
                        inference_pb2.RepositoryModelLoadRequest(
                            model_name=name)),
                    grpc.StatusCode.INVALID_ARGUMENT)
            with self.subTest(unload=name):
                self.assert_code(
                    lambda: self.stub.RepositoryModelUnload(
                        inference_pb2.RepositoryModelUnloadRequest(
                            model_name=name)),
                    grpc.StatusCode.INVALID_ARGUMENT)
        # Nothing else was affected.
        broken = self.index()["broken"]
        self.assertEqual(broken.state, "UNAVAILABLE")
        self.assertIn("missing", broken.reason)
        response = self.infer(raw_request("bert", good))
        self.assert_close(response_arrays(response)["pooler_output"],
                          self.bert_outputs["pooler_output"])

    def test_restart_with_the_same_repository(self):
        for _ in range(2):
            daemon = Daemon(CASTSERVE, f"--model-repository={self.repository}",
                            "--grpc-port=0", "--metrics-port=0",
                            "--http-port=0",
                            "--bind-address=127.0.0.1").wait_ready()
            try:
                with grpc.insecure_channel(
                        f"127.0.0.1:{daemon.grpc_port}") as channel:
                    stub = inference_pb2_grpc.GRPCInferenceServiceStub(channel)
                    response = stub.ModelInfer(
                        raw_request("bert", self.bert_inputs),
                        timeout=CALL_TIMEOUT_SECONDS)
                    self.assert_close(
                        response_arrays(response)["pooler_output"],
                        self.bert_outputs["pooler_output"])
                self.assertEqual(daemon.stop(timeout=10), 0)
            finally:
                daemon.kill()

    def test_tritonclient_unchanged(self):
        """tritonclient[grpc] from PyPI, in this interpreter or $TRITON_PYTHON.
        tools/test_all.sh installs it into .venv and passes
        --test_env=TRITON_PYTHON=.../.venv/bin/python."""
        candidates = [sys.executable, os.environ.get("TRITON_PYTHON", "")]
        python = next((c for c in candidates if c and run(
            c, "-c", "import tritonclient.grpc").returncode == 0), None)
        self.assertIsNotNone(
            python, "tritonclient[grpc] is not installed: run tools/test_all.sh "
            "(it installs it into .venv) or set TRITON_PYTHON to a Python "
            "that has it")
        check = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                             "tritonclient_check.py")
        result = run(python, check, self.url, "bert_triton", BERT_DIR,
                     timeout=120)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)

    def test_server_metadata_lists_supported_extensions(self):
        metadata = self.stub.ServerMetadata(
            inference_pb2.ServerMetadataRequest())
        for extension in ["model_repository", "model_configuration",
                          "statistics"]:
            self.assertIn(extension, metadata.extensions)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]], verbosity=2)
