#!/usr/bin/python3
"""The default repository's minilm served by the daemon: text in,
sentence-transformers' embedding out.

A temporary repository holds minilm with deploy/model_repository's
config.pbtxt (fp8 layerwise casting), its hf/ folder a link to the model
folder tools/fetch_minilm.sh fills (weights, tokenizer, sentence-transformers
files), and the BERT fixture, which has no tokenizer. The test sends text
with tritonclient[grpc] (PyPI; $TRITON_PYTHON as for
model_serving_integration_test), with castserve-client and the README's
request file, and with a Python gRPC client built from our protos, and
compares sentence_embedding with the committed references.

Run by Bazel as:
  sentence_embedding_integration_test.py CASTSERVE CASTSERVE_CLIENT
      DEPLOY_CONFIG MINILM_SENTENCES BERT_FILE TEXT_REQUEST
"""

import json
import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.getcwd())  # the runfiles root holds proto/*_pb2.py
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402
import numpy as np  # noqa: E402
from proto import inference_pb2, inference_pb2_grpc  # noqa: E402

from daemon_testlib import (Daemon, add_model, read_safetensors,  # noqa: E402
                            run, write_file)

CASTSERVE = os.path.abspath(sys.argv[1])
CLIENT = os.path.abspath(sys.argv[2])
DEPLOY_CONFIG = os.path.abspath(sys.argv[3])
MINILM_DIR = os.path.dirname(os.path.abspath(sys.argv[4]))
BERT_DIR = os.path.dirname(os.path.abspath(sys.argv[5]))
TEXT_REQUEST = os.path.abspath(sys.argv[6])
WEIGHTS = os.path.join(MINILM_DIR, "weights")
# The deploy config's fp8 casting (f32 compute is checked in
# //server/servables/factory:minilm_text_embedding_test at >= 0.9999).
MIN_COSINE = 0.995
CALL_TIMEOUT_SECONDS = 60


def cosine(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def text_request(model, texts, outputs=("sentence_embedding",)):
    """A ModelInferRequest with input text [n, 1]: BYTES raw contents, each
    string a 4-byte little-endian length and its UTF-8 bytes."""
    request = inference_pb2.ModelInferRequest(model_name=model)
    request.inputs.add(name="text", datatype="BYTES", shape=[len(texts), 1])
    raw = b"".join(len(t.encode()).to_bytes(4, "little") + t.encode()
                   for t in texts)
    request.raw_input_contents.append(raw)
    for name in outputs:
        request.outputs.add(name=name)
    return request


class SentenceEmbeddingTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        missing = [f for f in ("model.safetensors", "tokenizer.json",
                               "modules.json", "1_Pooling/config.json")
                   if not os.path.isfile(os.path.join(WEIGHTS, f))]
        if missing:
            raise AssertionError(
                f"{WEIGHTS} lacks {missing}: run tools/fetch_minilm.sh "
                "(tools/test_all.sh does)")
        cls.repository = tempfile.mkdtemp(prefix="castserve-minilm-")
        with open(DEPLOY_CONFIG) as f:
            write_file(os.path.join(cls.repository, "minilm", "config.pbtxt"),
                       f.read())
        os.symlink(os.path.realpath(WEIGHTS),
                   os.path.join(cls.repository, "minilm", "hf"))
        add_model(cls.repository, "bert", BERT_DIR, "max_batch_size: 8\n")
        cls.daemon = Daemon(CASTSERVE, f"--model-repository={cls.repository}",
                            "--grpc-port=0", "--metrics-port=0",
                            "--http-port=0", "--bind-address=127.0.0.1",
                            "--allow-symlinks-outside-repository").wait_ready()
        cls.url = f"127.0.0.1:{cls.daemon.grpc_port}"
        cls.channel = grpc.insecure_channel(cls.url)
        cls.stub = inference_pb2_grpc.GRPCInferenceServiceStub(cls.channel)
        with open(os.path.join(MINILM_DIR, "sentences.json"),
                  encoding="utf-8") as f:
            cls.sentences = [row["text"] for row in json.load(f)]
        cls.expected = read_safetensors(os.path.join(
            MINILM_DIR, "sentence_embeddings.safetensors"))["sentence_embedding"]

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.daemon.kill()
        shutil.rmtree(cls.repository)

    def assert_invalid(self, request, message):
        with self.assertRaises(grpc.RpcError) as raised:
            self.stub.ModelInfer(request, timeout=CALL_TIMEOUT_SECONDS)
        self.assertEqual(raised.exception.code(),
                         grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn(message, raised.exception.details())

    def test_metadata_lists_text_and_sentence_embedding(self):
        metadata = self.stub.ModelMetadata(
            inference_pb2.ModelMetadataRequest(name="minilm"))
        inputs = {t.name: t for t in metadata.inputs}
        self.assertEqual(inputs["text"].datatype, "BYTES")
        self.assertEqual(list(inputs["text"].shape), [-1, 1])
        self.assertIn("input_ids", inputs)
        outputs = {t.name: t for t in metadata.outputs}
        self.assertEqual(list(outputs["sentence_embedding"].shape), [-1, 384])
        bert = self.stub.ModelMetadata(
            inference_pb2.ModelMetadataRequest(name="bert"))
        self.assertNotIn("text", [t.name for t in bert.inputs])

    def test_grpc_text_gives_the_reference_embedding(self):
        picks = [0, 30, 76, 95, 100, 123, 200, len(self.sentences) - 5]
        response = self.stub.ModelInfer(
            text_request("minilm", [self.sentences[i] for i in picks]),
            timeout=CALL_TIMEOUT_SECONDS)
        self.assertEqual(response.outputs[0].name, "sentence_embedding")
        rows = np.frombuffer(response.raw_output_contents[0], "<f4").reshape(
            response.outputs[0].shape)
        for row, i in zip(rows, picks):
            self.assertGreaterEqual(cosine(row, self.expected[i]), MIN_COSINE,
                                    self.sentences[i])

    def test_tritonclient_sends_text(self):
        candidates = [sys.executable, os.environ.get("TRITON_PYTHON", "")]
        python = next((c for c in candidates if c and run(
            c, "-c", "import tritonclient.grpc").returncode == 0), None)
        self.assertIsNotNone(
            python, "tritonclient[grpc] is not installed: run tools/test_all.sh "
            "(it installs it into .venv) or set TRITON_PYTHON to a Python "
            "that has it")
        check = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                             "tritonclient_text_check.py")
        result = run(python, check, self.url, "minilm", MINILM_DIR,
                     str(MIN_COSINE), timeout=300)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        print(result.stdout, end="")

    def test_castserve_client_with_the_readme_request_file(self):
        result = run(CLIENT, f"--url={self.url}", "infer", "minilm",
                     f"--inputs={TEXT_REQUEST}", "--outputs=sentence_embedding",
                     timeout=CALL_TIMEOUT_SECONDS)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        embedding = json.loads(result.stdout)["sentence_embedding"]
        self.assertEqual(embedding["shape"], [2, 384])
        rows = np.asarray(embedding["data"], np.float32).reshape(2, 384)
        with open(TEXT_REQUEST, encoding="utf-8") as f:
            texts = [row[0] for row in json.load(f)["text"]["data"]]
        for row, text in zip(rows, texts):
            self.assertGreaterEqual(
                cosine(row, self.expected[self.sentences.index(text)]),
                MIN_COSINE, text)

    def test_wrong_text_requests_are_invalid_argument(self):
        self.assert_invalid(text_request("bert", ["hello"], outputs=()),
                            "input 'text': the model folder")
        self.assert_invalid(text_request("bert", ["hello"], outputs=()),
                            "has no tokenizer (tokenizer.json or "
                            "tokenizer.model)")
        bad = text_request("minilm", ["x"])
        bad.raw_input_contents[0] = b"\x01\x00\x00\x00\xff"
        self.assert_invalid(bad, "input 'text': element 0:")
        empty = text_request("minilm", [])
        self.assert_invalid(empty, "holds no string")
        huge = text_request("minilm", ["a" * ((1 << 20) + 1)])
        self.assert_invalid(huge, "above the limit of 1048576")
        # The daemon serves on.
        self.stub.ModelInfer(text_request("minilm", ["still here"]),
                             timeout=CALL_TIMEOUT_SECONDS)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]], verbosity=2)
