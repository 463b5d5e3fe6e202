#!/usr/bin/python3
"""The OpenAI /v1/embeddings path against KServe REST, same daemon, same texts.

Starts castserve on a repository holding the default minilm (weights from
tools/fetch_minilm.sh; its deploy config with max_batch_size raised to 32 so
that KServe takes 32 texts in one request) and sends, interleaved round by
round so that the machine's drift hits both alike, the same sentences through
  - KServe REST: POST /v2/models/minilm/infer, JSON, input `text` [b, 1],
    output sentence_embedding;
  - OpenAI: POST /v1/embeddings, {"model", "input": [b strings]} (the texts
    go as batched requests of at most max_batch_size through the dynamic
    batcher);
at b = 1, 8 and 32, one client, keep-alive. Prints per path the median wall
time per request, the daemon's CPU time per request (user + system from
/proc/PID/stat around each request, in clock ticks: a mean over the rounds,
which on a machine loaded by others is steadier than wall time) and the
forwards per request (castserve_execution_count_total on /metrics), and the
OpenAI / KServe ratios. Timed work should run under
`flock /tmp/castserve_bench.lock`.

  python3 benchmarks/drivers/openai_embeddings_overhead.py \\
      bazel-bin/server/castserve [--rounds 200]
"""

import argparse
import http.client
import json
import os
import re
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


BATCHES = (1, 8, 32)
TICK_SECONDS = 1.0 / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    """User + system CPU time of process `pid` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * TICK_SECONDS


def post(connection, path, body, pid):
    """(wall seconds, daemon CPU seconds) of one request."""
    cpu = cpu_seconds(pid)
    started = time.perf_counter()
    connection.request("POST", path, body,
                       {"Content-Type": "application/json"})
    response = connection.getresponse()
    data = response.read()
    elapsed = time.perf_counter() - started
    if response.status != 200:
        raise SystemExit(f"{path}: {response.status} {data[:200]!r}")
    return elapsed, cpu_seconds(pid) - cpu


def executions(port):
    """castserve_execution_count_total of minilm: forwards run so far."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.request("GET", "/metrics")
    text = connection.getresponse().read().decode()
    connection.close()
    match = re.search(r'^castserve_execution_count_total\{[^}]*model="minilm"'
                      r'[^}]*\} (\S+)$', text, re.MULTILINE)
    return float(match.group(1)) if match else float("nan")


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
        config = re.sub(r"^max_batch_size: \d+", "max_batch_size: 32",
                        f.read(), flags=re.MULTILINE)
    write_file(os.path.join(repository, "minilm", "config.pbtxt"), config)
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
        pid = daemon.process.pid
        for batch in BATCHES:
            wall = {"kserve": [], "openai": []}
            cpu = {"kserve": 0.0, "openai": 0.0}
            forwards = {"kserve": 0.0, "openai": 0.0}
            for i in range(args.rounds + 10):
                texts = [sentences[(i * batch + j) % len(sentences)]
                         for j in range(batch)]
                kserve_body = json.dumps({
                    "inputs": [{"name": "text", "datatype": "BYTES",
                                "shape": [batch, 1], "data": texts}],
                    "outputs": [{"name": "sentence_embedding"}]})
                openai_body = json.dumps({"model": "minilm", "input": texts})
                first = (i % 2 == 0)
                for which in (("kserve", "openai") if first
                              else ("openai", "kserve")):
                    counted = i >= 10  # Warm-up rounds are dropped.
                    before = executions(daemon.metrics_port) if counted else 0
                    seconds, cpu_used = post(
                        connection,
                        "/v2/models/minilm/infer" if which == "kserve"
                        else "/v1/embeddings",
                        kserve_body if which == "kserve" else openai_body,
                        pid)
                    if counted:
                        forwards[which] += (executions(daemon.metrics_port) -
                                            before)
                        wall[which].append(seconds)
                        cpu[which] += cpu_used
            k = statistics.median(wall["kserve"])
            o = statistics.median(wall["openai"])
            k_cpu = cpu["kserve"] / args.rounds
            o_cpu = cpu["openai"] / args.rounds
            print(json.dumps({
                "batch": batch, "rounds": args.rounds,
                "kserve_rest_ms": round(k * 1e3, 3),
                "openai_ms": round(o * 1e3, 3),
                "openai_over_kserve": round(o / k, 3),
                "kserve_cpu_ms": round(k_cpu * 1e3, 3),
                "openai_cpu_ms": round(o_cpu * 1e3, 3),
                "cpu_openai_over_kserve": round(o_cpu / k_cpu, 3),
                "kserve_forwards": forwards["kserve"] / args.rounds,
                "openai_forwards": forwards["openai"] / args.rounds}),
                  flush=True)
        connection.close()
    finally:
        daemon.kill()
        shutil.rmtree(repository)


if __name__ == "__main__":
    main()
