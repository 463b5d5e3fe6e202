#!/usr/bin/python3
"""The OpenAI /v1/embeddings path against KServe REST, same daemon, same texts.

Starts castserve on a repository holding the default minilm (weights from
tools/fetch_minilm.sh) and sends, interleaved round by round so that the
machine's drift hits both alike, the same sentences through
  - KServe REST: POST /v2/models/minilm/infer, JSON, input `text` [b, 1],
    output sentence_embedding;
  - OpenAI: POST /v1/embeddings, {"model", "input": [b strings]} (each input
    becomes its own inference request through the dynamic batcher);
at b = 1 and b = 8 (minilm's max_batch_size), one client, keep-alive. Prints
the median time per request of each path and their ratio. Timed work should
run under `flock /tmp/castserve_bench.lock`.

  python3 benchmarks/drivers/openai_embeddings_overhead.py \\
      bazel-bin/server/castserve [--rounds 200]
"""

import argparse
import http.client
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from daemon_testlib import Daemon, write_file  # noqa: E402

WEIGHTS = os.path.join(ROOT, "models", "testdata", "minilm", "weights")


def post(connection, path, body):
    started = time.perf_counter()
    connection.request("POST", path, body,
                       {"Content-Type": "application/json"})
    response = connection.getresponse()
    data = response.read()
    elapsed = time.perf_counter() - started
    if response.status != 200:
        raise SystemExit(f"{path}: {response.status} {data[:200]!r}")
    return elapsed


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("castserve")
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    with open(os.path.join(ROOT, "models", "testdata", "minilm",
                           "sentences.json"), encoding="utf-8") as f:
        sentences = [row["text"] for row in json.load(f)]
    repository = tempfile.mkdtemp(prefix="castserve-openai-bench-")
    with open(os.path.join(ROOT, "deploy", "model_repository", "minilm",
                           "config.pbtxt")) as f:
        write_file(os.path.join(repository, "minilm", "config.pbtxt"),
                   f.read())
    os.symlink(os.path.realpath(WEIGHTS),
               os.path.join(repository, "minilm", "hf"))
    daemon = Daemon(os.path.abspath(args.castserve),
                    f"--model-repository={repository}", "--grpc-port=0",
                    "--metrics-port=0", "--http-port=0",
                    "--bind-address=127.0.0.1",
                    "--allow-symlinks-outside-repository").wait_ready()
    try:
        connection = http.client.HTTPConnection("127.0.0.1", daemon.http_port,
                                                timeout=60)
        for batch in (1, 8):
            kserve, openai = [], []
            for i in range(args.rounds + 10):
                texts = [sentences[(i * batch + j) % len(sentences)]
                         for j in range(batch)]
                kserve_body = json.dumps({
                    "inputs": [{"name": "text", "datatype": "BYTES",
                                "shape": [batch, 1], "data": texts}],
                    "outputs": [{"name": "sentence_embedding"}]})
                openai_body = json.dumps({"model": "minilm", "input": texts})
                first = (i % 2 == 0)
                times = {}
                for which in (("kserve", "openai") if first
                              else ("openai", "kserve")):
                    times[which] = post(
                        connection,
                        "/v2/models/minilm/infer" if which == "kserve"
                        else "/v1/embeddings",
                        kserve_body if which == "kserve" else openai_body)
                if i >= 10:  # Warm-up rounds are dropped.
                    kserve.append(times["kserve"])
                    openai.append(times["openai"])
            k, o = statistics.median(kserve), statistics.median(openai)
            print(json.dumps({"batch": batch, "rounds": args.rounds,
                              "kserve_rest_ms": round(k * 1e3, 3),
                              "openai_ms": round(o * 1e3, 3),
                              "openai_over_kserve": round(o / k, 3)}))
        connection.close()
    finally:
        daemon.kill()
        shutil.rmtree(repository)


if __name__ == "__main__":
    main()
