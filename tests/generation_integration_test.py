#!/usr/bin/python3
"""The default repository's tiny_llama generating through every API.

tiny_llama (deploy/model_repository/tiny_llama: random weights, the
vocabulary of a committed BPE tokenizer, f32) is served from a temporary
repository holding a copy of it. Greedy generation of 32 tokens must equal
transformers' (tests/testdata/tiny_llama_greedy.json, written by
tools/gen_tiny_llama.py) through tritonclient's decoupled stream API and its
unary infer (tritonclient_generate_check.py, under $TRITON_PYTHON), REST
generate and generate_stream (server-sent events), and castserve-client
generate --stream; cancelling a stream (tritonclient's stop_stream, a REST
client closing its connection) brings castserve_kv_cache_bytes back to 0;
bad parameters are INVALID_ARGUMENT (gRPC) and 400 (REST).

Run by Bazel as:
  generation_integration_test.py CASTSERVE CASTSERVE_CLIENT TINY_CONFIG
      GREEDY_REFERENCE README
"""

import http.client
import json
import os
import re
import shutil
import sys
import tempfile
import time
import unittest
import urllib.request

sys.path.insert(0, os.getcwd())  # the runfiles root holds proto/*_pb2.py
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402
from proto import inference_pb2, inference_pb2_grpc  # noqa: E402

from daemon_testlib import Daemon, run  # noqa: E402

CASTSERVE = os.path.abspath(sys.argv[1])
CLIENT = os.path.abspath(sys.argv[2])
TINY_CONFIG = os.path.abspath(sys.argv[3])
REFERENCE = os.path.abspath(sys.argv[4])
README = os.path.abspath(sys.argv[5])
MODEL = "tiny_llama"
CALL_TIMEOUT_SECONDS = 60


def ids_request(ids, **parameters):
    request = inference_pb2.ModelInferRequest(model_name=MODEL)
    request.inputs.add(name="input_ids", datatype="INT64", shape=[len(ids)])
    request.raw_input_contents.append(
        b"".join(i.to_bytes(8, "little", signed=True) for i in ids))
    for key, value in parameters.items():
        if isinstance(value, int):
            request.parameters[key].int64_param = value
        else:
            request.parameters[key].string_param = value
    return request


class GenerationTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        with open(REFERENCE, encoding="utf-8") as f:
            cls.reference = json.load(f)
        cls.repository = tempfile.mkdtemp(prefix="castserve-generation-")
        shutil.copytree(os.path.dirname(TINY_CONFIG),
                        os.path.join(cls.repository, MODEL))
        cls.daemon = Daemon(CASTSERVE, f"--model-repository={cls.repository}",
                            "--grpc-port=0", "--metrics-port=0",
                            "--http-port=0",
                            "--bind-address=127.0.0.1").wait_ready()
        cls.url = f"127.0.0.1:{cls.daemon.grpc_port}"
        cls.metrics_url = f"http://127.0.0.1:{cls.daemon.metrics_port}/metrics"
        cls.channel = grpc.insecure_channel(cls.url)
        cls.stub = inference_pb2_grpc.GRPCInferenceServiceStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.daemon.kill()
        shutil.rmtree(cls.repository)

    def post(self, path, body):
        """(status, headers, body) of a REST POST."""
        connection = http.client.HTTPConnection(
            "127.0.0.1", self.daemon.http_port, timeout=CALL_TIMEOUT_SECONDS)
        connection.request("POST", path, json.dumps(body),
                           {"Content-Type": "application/json"})
        response = connection.getresponse()
        answer = (response.status, response.getheader("Content-Type"),
                  response.read().decode())
        connection.close()
        return answer

    def kv_cache_bytes(self):
        with urllib.request.urlopen(self.metrics_url, timeout=10) as response:
            text = response.read().decode()
        match = re.search(r'^castserve_kv_cache_bytes\{[^}]*model="tiny_llama"'
                          r'[^}]*\} (\S+)$', text, re.MULTILINE)
        self.assertIsNotNone(match, "no castserve_kv_cache_bytes for tiny_llama")
        return float(match.group(1))

    def assert_kv_cache_freed(self):
        deadline = time.monotonic() + 30
        while self.kv_cache_bytes() != 0:
            self.assertLess(time.monotonic(), deadline, "KV cache not freed")
            time.sleep(0.05)

    def body(self, **extra):
        return {"text_input": self.reference["prompt"],
                "max_tokens": self.reference["max_tokens"], **extra}

    def test_tritonclient_stream_unary_cancel_and_bad_parameters(self):
        candidates = [sys.executable, os.environ.get("TRITON_PYTHON", "")]
        python = next((c for c in candidates if c and run(
            c, "-c", "import tritonclient.grpc").returncode == 0), None)
        self.assertIsNotNone(
            python, "tritonclient[grpc] is not installed: run tools/test_all.sh "
            "(it installs it into .venv) or set TRITON_PYTHON to a Python "
            "that has it")
        check = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                             "tritonclient_generate_check.py")
        result = run(python, check, self.url, self.metrics_url, MODEL,
                     REFERENCE, timeout=300)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        print(result.stdout, end="")

    def test_readme_shows_the_stream_code_this_test_runs(self):
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                               "tritonclient_generate_check.py")) as f:
            check = f.read()
        example = check[check.index("def stream_generate("):
                        check.index("# --- End of the README")].rstrip()
        with open(README, encoding="utf-8") as f:
            self.assertIn(example, f.read())

    def test_rest_generate_and_generate_stream_agree(self):
        status, content_type, text = self.post(
            f"/v2/models/{MODEL}/generate", self.body(id="g1"))
        self.assertEqual(status, 200, text)
        self.assertIn("application/json", content_type)
        unary = json.loads(text)
        self.assertEqual(unary["output_ids"], self.reference["output_ids"])
        self.assertEqual(unary["text_output"], self.reference["text_output"])
        self.assertEqual(unary["finish_reason"], "length")
        self.assertEqual(unary["id"], "g1")
        self.assertEqual(unary["model_name"], MODEL)

        status, content_type, text = self.post(
            f"/v2/models/{MODEL}/generate_stream", self.body())
        self.assertEqual(status, 200, text)
        self.assertEqual(content_type, "text/event-stream")
        self.assertTrue(text.endswith("\n\n"), text[-20:])
        events = [json.loads(e[len("data: "):]) for e in text.split("\n\n")
                  if e]
        self.assertEqual(len(events), self.reference["max_tokens"])
        self.assertEqual([e["output_ids"][0] for e in events],
                         self.reference["output_ids"])
        self.assertEqual("".join(e["text_output"] for e in events),
                         unary["text_output"])
        self.assertEqual([e.get("finish_reason") for e in events],
                         [None] * (len(events) - 1) + ["length"])

    def test_rest_client_closing_the_stream_frees_the_kv_cache(self):
        connection = http.client.HTTPConnection(
            "127.0.0.1", self.daemon.http_port, timeout=CALL_TIMEOUT_SECONDS)
        connection.request("POST", f"/v2/models/{MODEL}/generate_stream",
                           json.dumps({"text_input": "Once", "max_tokens": 200,
                                       "ignore_eos": True}))
        response = connection.getresponse()
        self.assertEqual(response.status, 200)
        self.assertTrue(response.readline().startswith(b"data: {"))
        self.assertGreater(self.kv_cache_bytes(), 0)
        connection.sock.shutdown(2)
        connection.close()
        self.assert_kv_cache_freed()

    def test_rest_bad_requests_are_400_naming_the_problem(self):
        for path in ("generate", "generate_stream"):
            for body, named in (({"text_input": "x", "top_k": "many"},
                                 "parameter 'top_k'"),
                                ({"text_input": "x", "max_tokens": 0},
                                 "max_tokens"),
                                ({"text_input": "x", "max_new_tokens": 3},
                                 "'max_new_tokens'"),
                                ({"max_tokens": 3}, "input")):
                status, content_type, text = self.post(
                    f"/v2/models/{MODEL}/{path}", body)
                self.assertEqual(status, 400, (path, body, text))
                self.assertIn("application/json", content_type)
                self.assertIn(named, json.loads(text)["error"], (path, body))

    def test_castserve_client_generate(self):
        prompt_ids = ",".join(str(i) for i in self.reference["prompt_ids"])
        unary = run(CLIENT, f"--url={self.url}", "generate", MODEL,
                    f"--ids={prompt_ids}", "--param=max_tokens=32",
                    timeout=CALL_TIMEOUT_SECONDS)
        self.assertEqual(unary.returncode, 0, unary.stderr)
        streamed = run(CLIENT, f"--url={self.url}", "generate", MODEL,
                       f"--text={self.reference['prompt']}", "--stream",
                       "--param=max_tokens=32", timeout=CALL_TIMEOUT_SECONDS)
        self.assertEqual(streamed.returncode, 0, streamed.stderr)
        self.assertEqual(streamed.stdout, unary.stdout)
        self.assertIn("finish_reason: length", streamed.stderr)
        _, _, rest = self.post(f"/v2/models/{MODEL}/generate", self.body())
        self.assertEqual(streamed.stdout, json.loads(rest)["text_output"] + "\n")
        bad = run(CLIENT, f"--url={self.url}", "generate", MODEL, "--text=x",
                  "--stream", "--param=top_k=-1", timeout=CALL_TIMEOUT_SECONDS)
        self.assertEqual(bad.returncode, 1)
        self.assertIn("top_k", bad.stderr)

    def test_grpc_bad_input_is_invalid_argument(self):
        too_long = [3] * 1000  # Past the 256-token context.
        for request, named in ((ids_request([1, 2], max_tokens=0), "max_tokens"),
                               (ids_request([1, 2], max_tokens=1 << 40),
                                "max_tokens"),
                               (ids_request(too_long), "context")):
            with self.assertRaises(grpc.RpcError) as raised:
                self.stub.ModelInfer(request, timeout=CALL_TIMEOUT_SECONDS)
            self.assertEqual(raised.exception.code(),
                             grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn(named, raised.exception.details())
        # The daemon serves on.
        response = self.stub.ModelInfer(ids_request([1, 5], max_tokens=2),
                                        timeout=CALL_TIMEOUT_SECONDS)
        shapes = {o.name: list(o.shape) for o in response.outputs}
        self.assertEqual(shapes["output_ids"], [2])


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]], verbosity=2)
