#!/usr/bin/python3
"""The KServe v2 REST port end to end: the unmodified tritonclient[http]
package against the BERT fixture (tritonclient_http_check.py), the README's
curl example against the real all-MiniLM-L6-v2, and one statistics for
both protocols.

Run by Bazel as:
  rest_integration_test.py CASTSERVE BERT_FILE MINILM_REFERENCE README
(BERT_FILE: a file of models/testdata/bert; MINILM_REFERENCE:
models/testdata/minilm/reference.safetensors, beside the weights that
tools/fetch_minilm.sh links in; Debian's python3 with python3-grpcio,
python3-protobuf and python3-numpy; curl; tritonclient[http] in this
interpreter or $TRITON_PYTHON).
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.getcwd())  # the runfiles root holds proto/*_pb2.py
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402
import numpy as np  # noqa: E402
from proto import inference_pb2, inference_pb2_grpc  # noqa: E402

from daemon_testlib import (Daemon, add_model, raw_request,  # noqa: E402
                             read_safetensors, references, run, write_file)

CASTSERVE = os.path.abspath(sys.argv[1])
BERT_DIR = os.path.dirname(os.path.abspath(sys.argv[2]))
MINILM_REFERENCE = os.path.abspath(sys.argv[3])
MINILM_WEIGHTS = os.path.join(os.path.dirname(MINILM_REFERENCE), "weights")
README = os.path.abspath(sys.argv[4])
TOLERANCE = 1e-4


def readme_curl_example(marker):
    """The README's ```sh block that sends a request to minilm and contains
    `marker`."""
    with open(README) as f:
        blocks = re.findall(r"```sh\n(.*?)```", f.read(), re.S)
    return next(b for b in blocks
                if "/v2/models/minilm/infer" in b and marker in b)


def http(port, method, path, body=None):
    """(status, parsed JSON or None) of one REST call."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", method=method,
        data=None if body is None else json.dumps(body).encode())
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            status, text = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, text = error.code, error.read()
    return status, (json.loads(text) if text else None)


class RestTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        if not os.path.isfile(os.path.join(MINILM_WEIGHTS,
                                           "model.safetensors")):
            raise AssertionError(
                "the MiniLM weights are missing: run tools/fetch_minilm.sh")
        cls.repository = tempfile.mkdtemp(prefix="castserve-rest-")
        add_model(cls.repository, "bert", BERT_DIR, "max_batch_size: 4\n")
        minilm = os.path.join(cls.repository, "minilm")
        os.makedirs(minilm)
        os.symlink(MINILM_WEIGHTS, os.path.join(minilm, "hf"))
        write_file(os.path.join(minilm, "config.pbtxt"),
                   'max_batch_size: 8\ncheckpoint { path: "hf" }\n')
        cls.daemon = Daemon(CASTSERVE, f"--model-repository={cls.repository}",
                            "--grpc-port=0", "--metrics-port=0",
                            "--http-port=0", "--bind-address=127.0.0.1",
                            "--allow-symlinks-outside-repository").wait_ready()
        cls.port = cls.daemon.http_port
        cls.channel = grpc.insecure_channel(
            f"127.0.0.1:{cls.daemon.grpc_port}")
        cls.stub = inference_pb2_grpc.GRPCInferenceServiceStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.daemon.kill()
        shutil.rmtree(cls.repository)

    def test_readme_curl_example_answers_the_reference_embedding(self):
        command = readme_curl_example('"input_ids"').replace(
            "localhost:8000", f"127.0.0.1:{self.port}")
        result = subprocess.run(["bash", "-ec", command], capture_output=True,
                                text=True, timeout=120)
        self.assertEqual(result.returncode, 0, result.stderr)
        # The ready probe's code, then the inference's JSON.
        lines = result.stdout.splitlines()
        self.assertEqual(lines[0], "200", result.stdout)
        answer = json.loads("\n".join(lines[1:]))
        self.assertEqual(answer["model_name"], "minilm")
        (output,) = answer["outputs"]
        self.assertEqual(output["shape"], [1, 384])
        expected = read_safetensors(MINILM_REFERENCE)[
            "output.pooler_output"][0]
        difference = np.max(np.abs(np.array(output["data"]) - expected))
        self.assertLessEqual(difference, TOLERANCE)

    def test_readme_text_example_answers_the_sentence_embedding(self):
        block = readme_curl_example('"name": "text"')
        (sentence,) = re.findall(r'"data": \["(.*?)"\]', block)
        command = block.replace("localhost:8000", f"127.0.0.1:{self.port}")
        result = subprocess.run(["bash", "-ec", command], capture_output=True,
                                text=True, timeout=120)
        self.assertEqual(result.returncode, 0, result.stderr)
        answer = json.loads(result.stdout)
        self.assertIn("outputs", answer, result.stdout)
        (output,) = answer["outputs"]
        self.assertEqual(output["name"], "sentence_embedding")
        self.assertEqual(output["shape"], [1, 384])
        folder = os.path.dirname(MINILM_REFERENCE)
        with open(os.path.join(folder, "sentences.json")) as f:
            texts = [entry["text"] for entry in json.load(f)]
        expected = read_safetensors(
            os.path.join(folder, "sentence_embeddings.safetensors"))[
                "sentence_embedding"][texts.index(sentence)].astype(np.float64)
        embedding = np.array(output["data"], dtype=np.float64)
        cosine = embedding @ expected / (np.linalg.norm(embedding) *
                                         np.linalg.norm(expected))
        self.assertGreaterEqual(cosine, 0.9999)

    def test_tritonclient_http_unchanged(self):
        """tritonclient[http] from PyPI, in this interpreter or
        $TRITON_PYTHON (tools/test_all.sh installs it into .venv)."""
        candidates = [sys.executable, os.environ.get("TRITON_PYTHON", "")]
        python = next((c for c in candidates if c and run(
            c, "-c", "import tritonclient.http").returncode == 0), None)
        self.assertIsNotNone(
            python, "tritonclient[http] is not installed: run "
            "tools/test_all.sh (it installs it into .venv) or set "
            "TRITON_PYTHON to a Python that has it")
        check = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                             "tritonclient_http_check.py")
        result = run(python, check, f"127.0.0.1:{self.port}", "bert",
                     BERT_DIR, timeout=180)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)

    def test_both_protocols_count_in_one_statistics(self):
        def inference_count():
            response = self.stub.ModelStatistics(
                inference_pb2.ModelStatisticsRequest(name="bert"))
            return response.model_stats[0].inference_count

        inputs, _ = references(BERT_DIR)
        before = inference_count()
        self.stub.ModelInfer(raw_request("bert", inputs), timeout=60)
        body = {"inputs": [{"name": name, "datatype": "INT64",
                            "shape": list(array.shape),
                            "data": array.ravel().tolist()}
                           for name, array in inputs.items()]}
        status, answer = http(self.port, "POST", "/v2/models/bert/infer",
                              body)
        self.assertEqual(status, 200, answer)
        batch = next(iter(inputs.values())).shape[0]
        self.assertEqual(inference_count(), before + 2 * batch)
        status, stats = http(self.port, "GET", "/v2/models/bert/stats")
        self.assertEqual(status, 200)
        self.assertEqual(stats["model_stats"][0]["inference_count"],
                         before + 2 * batch)

    def test_errors_are_json_with_kserve_codes(self):
        status, answer = http(self.port, "POST", "/v2/models/nope/infer",
                              {"inputs": []})
        self.assertEqual(status, 404)
        self.assertIn("nope", answer["error"])
        status, answer = http(self.port, "POST", "/v2/models/bert/infer",
                              {"inputs": [{"name": "input_ids"}]})
        self.assertEqual(status, 400)
        self.assertIn("datatype", answer["error"])


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
