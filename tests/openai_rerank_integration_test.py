#!/usr/bin/python3
"""POST /v1/rerank and /rerank against the daemon with real cross-encoders.

The committed cross-encoder fixtures (tools/gen_encoder_fixtures.py, random
weights written by transformers): xlm_roberta_reranker (one label: a
reranker) and bert_reranker (three labels: a classifier of pairs), and
tiny_llama (a generation model), served from a temporary repository. Over
plain HTTP (urllib, as `requests` would send it):
  - relevance_score of each (query, document) equals sentence-transformers'
    CrossEncoder.predict with its default activation for one label, the
    sigmoid: the fixture's reference.safetensors holds
    output.cross_encoder = CrossEncoder.predict(pairs,
    activation_fn=Identity), the logits, and the test applies the sigmoid;
  - results sorted by score, top_n, return_documents, usage;
  - /rerank answers as /v1/rerank;
  - a generation model is refused (400, param "model") naming its kind, and
    a pair classifier with three labels is refused naming its labels.

Run by Bazel as:
  openai_rerank_integration_test.py CASTSERVE RERANKER_DIR CLASSIFIER_DIR
      TINY_CONFIG
"""

import json
import math
import os
import shutil
import struct
import sys
import tempfile
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from daemon_testlib import Daemon, write_file  # noqa: E402

CASTSERVE = os.path.abspath(sys.argv[1])
RERANKER_DIR = os.path.dirname(os.path.abspath(sys.argv[2]))
CLASSIFIER_DIR = os.path.dirname(os.path.abspath(sys.argv[3]))
TINY_CONFIG = os.path.abspath(sys.argv[4])
TIMEOUT_SECONDS = 60
TOLERANCE = 1e-5

CONFIG = """max_batch_size: 8
checkpoint { path: "hf" }
load_policy: LOAD_POLICY_STARTUP
dynamic_batching { max_queue_delay_microseconds: 1000 }
"""


def read_safetensors(path):
    """The f32 tensors and the metadata of a safetensors file."""
    with open(path, "rb") as f:
        size = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(size))
        data = f.read()
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__" or info["dtype"] != "F32":
            continue
        begin, end = info["data_offsets"]
        values = struct.unpack(f"<{(end - begin) // 4}f", data[begin:end])
        tensors[name] = list(values)
    return tensors, header.get("__metadata__", {})


def sigmoid(x):
    return 1 / (1 + math.exp(-x))


class RerankTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.repository = tempfile.mkdtemp(prefix="castserve-rerank-")
        for name, folder in (("reranker", RERANKER_DIR),
                             ("classifier", CLASSIFIER_DIR)):
            write_file(os.path.join(cls.repository, name, "config.pbtxt"),
                       CONFIG)
            os.symlink(os.path.realpath(folder),
                       os.path.join(cls.repository, name, "hf"))
        shutil.copytree(os.path.dirname(TINY_CONFIG),
                        os.path.join(cls.repository, "tiny_llama"))
        cls.daemon = Daemon(CASTSERVE, f"--model-repository={cls.repository}",
                            "--grpc-port=0", "--metrics-port=0",
                            "--http-port=0", "--bind-address=127.0.0.1",
                            "--allow-symlinks-outside-repository").wait_ready()
        tensors, metadata = read_safetensors(
            os.path.join(RERANKER_DIR, "reference.safetensors"))
        queries = json.loads(metadata["queries"])
        documents = json.loads(metadata["documents"])
        logits = tensors["output.cross_encoder"]
        # One rerank per query, over the documents the fixture pairs it with.
        cls.cases = {}
        for query, document, logit in zip(queries, documents, logits):
            cls.cases.setdefault(query, []).append((document, sigmoid(logit)))

    @classmethod
    def tearDownClass(cls):
        cls.daemon.kill()
        shutil.rmtree(cls.repository)

    def post(self, path, body):
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.daemon.http_port}{path}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request,
                                        timeout=TIMEOUT_SECONDS) as response:
                return response.status, json.load(response)
        except urllib.error.HTTPError as error:
            return error.code, json.load(error)

    def test_scores_equal_cross_encoder_predict(self):
        self.assertGreater(len(self.cases), 1)
        for path in ("/v1/rerank", "/rerank"):
            for query, pairs in self.cases.items():
                documents = [d for d, _ in pairs]
                status, answer = self.post(path, {
                    "model": "reranker", "query": query,
                    "documents": documents})
                self.assertEqual(status, 200, answer)
                self.assertEqual(answer["model"], "reranker")
                results = answer["results"]
                self.assertEqual(len(results), len(pairs))
                scores = [r["relevance_score"] for r in results]
                self.assertEqual(scores, sorted(scores, reverse=True))
                self.assertEqual(sorted(r["index"] for r in results),
                                 list(range(len(pairs))))
                for result in results:
                    expected = pairs[result["index"]][1]
                    self.assertAlmostEqual(result["relevance_score"], expected,
                                           delta=TOLERANCE, msg=query)
                    self.assertNotIn("document", result)
                self.assertGreater(answer["usage"]["prompt_tokens"], 0)
                self.assertEqual(answer["usage"]["total_tokens"],
                                 answer["usage"]["prompt_tokens"])

    def test_top_n_and_return_documents(self):
        query, pairs = max(self.cases.items(), key=lambda kv: len(kv[1]))
        documents = [d for d, _ in pairs] + ["an unrelated line of text"]
        status, full = self.post("/v1/rerank", {
            "model": "reranker", "query": query, "documents": documents})
        self.assertEqual(status, 200, full)
        status, top = self.post("/v1/rerank", {
            "model": "reranker", "query": query, "documents": documents,
            "top_n": 2, "return_documents": True})
        self.assertEqual(status, 200, top)
        self.assertEqual(len(top["results"]), 2)
        for got, best in zip(top["results"], full["results"][:2]):
            self.assertEqual(got["index"], best["index"])
            self.assertAlmostEqual(got["relevance_score"],
                                   best["relevance_score"], delta=1e-9)
            self.assertEqual(got["document"], {"text": documents[got["index"]]})
        # The usage counts every document scored, not only those returned.
        self.assertEqual(top["usage"], full["usage"])

    def test_models_that_are_not_rerankers_are_refused(self):
        status, answer = self.post("/v1/rerank", {
            "model": "tiny_llama", "query": "q", "documents": ["d"]})
        self.assertEqual(status, 400, answer)
        self.assertEqual(answer["error"]["param"], "model")
        self.assertIn("generation", answer["error"]["message"])
        status, answer = self.post("/v1/rerank", {
            "model": "classifier", "query": "q", "documents": ["d"]})
        self.assertEqual(status, 400, answer)
        self.assertEqual(answer["error"]["param"], "model")
        self.assertIn("3 labels", answer["error"]["message"])
        status, answer = self.post("/v1/rerank", {
            "model": "reranker", "query": "q", "documents": "d"})
        self.assertEqual(status, 400, answer)
        self.assertEqual(answer["error"]["param"], "documents")


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
