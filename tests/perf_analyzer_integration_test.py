#!/usr/bin/python3
"""End-to-end: Triton's perf_analyzer drives the daemon serving the BERT
fixture for a few seconds, over gRPC and over the KServe v2 REST port, and
reports a throughput and no failed request.

perf_analyzer comes from PyPI's tritonclient 2.35.0 wheel through
tools/fetch_perf_analyzer.sh, which prints the path of a wrapper that finds
its libraries; tools/test_all.sh passes it as
--test_env=PERF_ANALYZER=.../perf_analyzer.sh. The inputs are real token
ids (--input-data): perf_analyzer's random data would fall outside the
fixture's 211-token vocabulary and be refused.

Each protocol's run must exit 0, report more than 0 inferences/second in its
CSV (-f), print no error, and leave the daemon's metrics with successes and
no failure for the model.

Run by Bazel as:
  perf_analyzer_integration_test.py CASTSERVE BERT_CONFIG
(Debian's python3 with python3-numpy).
"""

import csv
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

from daemon_testlib import Daemon, add_model, references  # noqa: E402

CASTSERVE = os.path.abspath(sys.argv[1])
BERT_DIR = os.path.dirname(os.path.abspath(sys.argv[2]))
MODEL = "bert"
RUN_TIMEOUT_SECONDS = 120


def metric_sum(metrics_text, family, model):
    """The sum of `family`'s samples labelled model=`model`."""
    total = 0.0
    for line in metrics_text.splitlines():
        if line.startswith(family + "{") and f'model="{model}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


class PerfAnalyzerTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.perf_analyzer = os.environ.get("PERF_ANALYZER", "")
        if not os.access(cls.perf_analyzer, os.X_OK):
            raise AssertionError(
                "perf_analyzer not found: run tools/test_all.sh, or pass "
                "--test_env=PERF_ANALYZER=\"$(tools/fetch_perf_analyzer.sh)\"")
        cls.scratch = tempfile.mkdtemp(prefix="castserve-perf-")
        repository = os.path.join(cls.scratch, "models")
        add_model(repository, MODEL, BERT_DIR, "max_batch_size: 4\n")
        cls.input_data = os.path.join(cls.scratch, "input_data.json")
        cls.write_input_data(cls.input_data)
        cls.daemon = Daemon(CASTSERVE, f"--model-repository={repository}",
                            "--grpc-port=0", "--metrics-port=0",
                            "--http-port=0",
                            "--bind-address=127.0.0.1").wait_ready()

    @classmethod
    def tearDownClass(cls):
        cls.daemon.kill()
        shutil.rmtree(cls.scratch)

    @staticmethod
    def write_input_data(path):
        """perf_analyzer's --input-data file: each reference sequence of the
        fixture (real token ids) as one request's inputs, shapes without the
        batch dimension."""
        inputs, _ = references(BERT_DIR)
        ids = inputs["input_ids"]
        steps = []
        for row in range(ids.shape[0]):
            step = {}
            for name in ("input_ids", "attention_mask", "token_type_ids"):
                if name in inputs:
                    values = inputs[name][row]
                    step[name] = {"content": [int(v) for v in values],
                                  "shape": list(values.shape)}
            steps.append(step)
        with open(path, "w") as f:
            json.dump({"data": steps}, f)

    def metrics(self):
        url = f"http://127.0.0.1:{self.daemon.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.read().decode()

    def run_perf_analyzer(self, protocol, url):
        """Runs perf_analyzer briefly; returns (stdout+stderr, CSV rows)."""
        csv_path = os.path.join(self.scratch, f"perf_{protocol}.csv")
        result = subprocess.run(
            [self.perf_analyzer, "-m", MODEL, "-u", url, "-i", protocol,
             "-b", "1", "--input-data", self.input_data,
             "--concurrency-range", "2",
             "--measurement-mode", "count_windows",
             "--measurement-request-count", "50",
             "--stability-percentage", "1000", "--max-trials", "10",
             "-f", csv_path],
            capture_output=True, text=True, timeout=RUN_TIMEOUT_SECONDS)
        output = result.stdout + result.stderr
        self.assertEqual(result.returncode, 0, output)
        self.assertIsNone(re.search(r"(?i)error", output), output)
        with open(csv_path) as f:
            rows = list(csv.DictReader(f))
        self.assertTrue(rows, output)
        return output, rows

    def check_run(self, protocol, url):
        before = self.metrics()
        output, rows = self.run_perf_analyzer(protocol, url)
        for row in rows:
            self.assertGreater(float(row["Inferences/Second"]), 0, output)
        print(f"\n{protocol}: " + "; ".join(
            line.strip() for line in output.splitlines()
            if line.strip().startswith(("Concurrency:", "Throughput:"))))
        after = self.metrics()
        succeeded = (
            metric_sum(after, "castserve_request_success_total", MODEL) -
            metric_sum(before, "castserve_request_success_total", MODEL))
        failed = (
            metric_sum(after, "castserve_request_failure_total", MODEL) -
            metric_sum(before, "castserve_request_failure_total", MODEL))
        self.assertGreater(succeeded, 0, output)
        self.assertEqual(failed, 0, output)

    def test_grpc(self):
        self.check_run("grpc", f"127.0.0.1:{self.daemon.grpc_port}")

    def test_http(self):
        """The KServe v2 REST port (-i http)."""
        self.check_run("http", f"127.0.0.1:{self.daemon.http_port}")


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]], verbosity=2)
