#!/usr/bin/python3
"""castserve scraped by a real Prometheus server (Debian's `prometheus`).

The daemon serves a copy of the bert fixture (models/testdata/bert) from a
temporary repository on free loopback ports. A Prometheus server on loopback,
with a temporary configuration that scrapes the daemon's metrics port every
second and loads deploy/prometheus/castserve_alerts.yml, stores what it
scrapes after the test sent REQUESTS inferences and one that fails (token
ids past the vocabulary). The test then asks Prometheus's HTTP API
(/api/v1/query) for the values it stored:

- castserve_process_resident_memory_bytes > 0 and castserve_build_info == 1;
- castserve_request_success_total{model="bert"} == REQUESTS and
  castserve_request_failure_total{model="bert"} == 1, with the failed
  request's gRPC code as its reason;
- castserve_model_peak_allocated_bytes{model="bert"} > 0, at least the
  model's allocated bytes now and at most the device's peak;

and checks the deploy assets against the live components: every metric
family the dashboard and rules use (deploy_assets_test.METRIC_FAMILIES) is in
the daemon's /metrics, every dashboard query is accepted by Prometheus, and
every alerting rule evaluates with health "ok".

Run by Bazel as:
  prometheus_integration_test.py CASTSERVE BERT_FILE ALERTS_YML DASHBOARD_JSON
(BERT_FILE: a file of models/testdata/bert; Debian's python3 with
python3-grpcio, python3-protobuf and python3-numpy; /usr/bin/prometheus).
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.parse
import urllib.request

sys.path.insert(0, os.getcwd())  # the runfiles root holds proto/*_pb2.py
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402
import numpy as np  # noqa: E402
from proto import inference_pb2, inference_pb2_grpc  # noqa: E402

import deploy_assets_test  # noqa: E402
from daemon_testlib import (Daemon, raw_request,  # noqa: E402
                             read_safetensors, write_file)

CASTSERVE = os.path.abspath(sys.argv[1])
BERT_DIR = os.path.dirname(os.path.abspath(sys.argv[2]))
ALERTS_YML = os.path.abspath(sys.argv[3])
DASHBOARD_JSON = os.path.abspath(sys.argv[4])
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
MODEL = "bert"
REQUESTS = 5
CALL_TIMEOUT_SECONDS = 60
WAIT_SECONDS = 60          # each bounded wait below
HTTP_TIMEOUT_SECONDS = 10


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url):
    with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_SECONDS) as reply:
        return reply.read().decode()


def wait_for(what, condition, timeout=WAIT_SECONDS, interval=0.25):
    """condition()'s first truthy value within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last_error = None
    while time.monotonic() < deadline:
        try:
            value = condition()
            if value:
                return value
        except Exception as e:  # noqa: BLE001 - retried until the deadline
            last_error = e
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what} (last error: "
                         f"{last_error!r})")


class Prometheus:
    """A Prometheus server on loopback scraping one castserve every second."""

    def __init__(self, metrics_port, scratch):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = os.path.join(scratch, "prometheus.yml")
        write_file(config, f"""
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - {json.dumps(ALERTS_YML)}
scrape_configs:
  - job_name: castserve
    static_configs:
      - targets: ["127.0.0.1:{metrics_port}"]
""")
        self.log_path = os.path.join(scratch, "prometheus.log")
        self.log = open(self.log_path, "w")
        self.process = subprocess.Popen(
            [PROMETHEUS, f"--config.file={config}",
             f"--storage.tsdb.path={os.path.join(scratch, 'tsdb')}",
             f"--web.listen-address=127.0.0.1:{self.port}",
             "--log.level=warn"],
            stdout=self.log, stderr=subprocess.STDOUT, cwd=scratch)

    def output(self):
        with open(self.log_path) as f:
            return f.read()

    def wait_ready(self):
        def ready():
            if self.process.poll() is not None:
                raise AssertionError("prometheus exited:\n" + self.output())
            return "Ready" in http_get(self.url + "/-/ready")
        try:
            wait_for("prometheus /-/ready", ready)
        except AssertionError as e:
            raise AssertionError(f"{e}\n{self.output()}") from None
        return self

    def api(self, path, **params):
        reply = json.loads(http_get(
            f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"))
        if reply.get("status") != "success":
            raise AssertionError(f"{path} {params}: {reply}")
        return reply["data"]

    def query(self, expr):
        """The instant vector of `expr` as [(labels, float value)]."""
        data = self.api("query", query=expr)
        if data["resultType"] == "scalar":
            return [({}, float(data["result"][1]))]
        return [(r["metric"], float(r["value"][1])) for r in data["result"]]

    def value(self, expr):
        """The single value of `expr`, or None when it has no sample."""
        result = self.query(expr)
        if not result:
            return None
        assert len(result) == 1, f"{expr}: {result}"
        return result[0][1]

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


def exposition_families(text):
    """{family: type} from the # TYPE lines of a Prometheus text scrape."""
    families = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(None, 3)
            families[name] = kind.strip()
    return families


class PrometheusIntegrationTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.scratch = tempfile.mkdtemp(prefix="castserve-prometheus-")
        cls.daemon = cls.prometheus = cls.channel = None
        try:
            cls.start()
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def start(cls):
        repository = os.path.join(cls.scratch, "models")
        model_dir = os.path.join(repository, MODEL)
        os.makedirs(model_dir)
        for file in os.listdir(BERT_DIR):
            if file != "reference.safetensors":
                shutil.copy(os.path.join(BERT_DIR, file), model_dir)
        write_file(os.path.join(model_dir, "config.pbtxt"),
                   "max_batch_size: 8\n")
        cls.daemon = Daemon(CASTSERVE, f"--model-repository={repository}",
                            "--grpc-port=0", "--metrics-port=0",
                            "--http-port=0",
                            "--bind-address=127.0.0.1").wait_ready()
        cls.metrics_url = (f"http://127.0.0.1:{cls.daemon.metrics_port}"
                           "/metrics")
        cls.channel = grpc.insecure_channel(
            f"127.0.0.1:{cls.daemon.grpc_port}")
        cls.stub = inference_pb2_grpc.GRPCInferenceServiceStub(cls.channel)
        wait_for(f"model {MODEL} ready", lambda: cls.stub.ModelReady(
            inference_pb2.ModelReadyRequest(name=MODEL),
            timeout=CALL_TIMEOUT_SECONDS).ready)

        tensors = read_safetensors(os.path.join(BERT_DIR,
                                                "reference.safetensors"))
        inputs = {k[len("input."):]: v for k, v in tensors.items()
                  if k.startswith("input.")}
        for _ in range(REQUESTS):
            response = cls.stub.ModelInfer(raw_request(MODEL, inputs),
                                           timeout=CALL_TIMEOUT_SECONDS)
            assert response.outputs, response
        # One request that fails in the model's forward: token ids past the
        # vocabulary.
        bad = dict(inputs,
                   input_ids=np.full_like(inputs["input_ids"], 1 << 30))
        try:
            cls.stub.ModelInfer(raw_request(MODEL, bad),
                                timeout=CALL_TIMEOUT_SECONDS)
            raise AssertionError("a request with token ids past the "
                                 "vocabulary succeeded")
        except grpc.RpcError as e:
            cls.failure_code = e.code().name

        cls.prometheus = Prometheus(cls.daemon.metrics_port,
                                    cls.scratch).wait_ready()
        # Three successful scrapes after the requests.
        wait_for("3 scrapes of castserve", lambda: (cls.prometheus.value(
            'sum_over_time(up{job="castserve"}[1m])') or 0) >= 3)

    @classmethod
    def tearDownClass(cls):
        if cls.prometheus is not None:
            cls.prometheus.stop()
        if cls.channel is not None:
            cls.channel.close()
        if cls.daemon is not None:
            cls.daemon.kill()
        shutil.rmtree(cls.scratch, ignore_errors=True)

    def query_value(self, expr):
        value = self.prometheus.value(expr)
        self.assertIsNotNone(value, f"no sample for {expr}")
        return value

    # --- values Prometheus stored ------------------------------------------

    def test_target_is_up(self):
        self.assertEqual(self.query_value('up{job="castserve"}'), 1)

    def test_process_metrics(self):
        rss = self.query_value(
            'castserve_process_resident_memory_bytes{job="castserve"}')
        self.assertGreater(rss, 0)
        self.assertGreaterEqual(self.query_value(
            'castserve_process_resident_memory_peak_bytes{job="castserve"}'),
            rss)
        build = self.prometheus.query('castserve_build_info{job="castserve"}')
        self.assertEqual(len(build), 1, build)
        labels, value = build[0]
        self.assertEqual(value, 1)
        self.assertTrue(labels.get("version"), labels)

    def test_request_counts(self):
        self.assertEqual(self.query_value(
            f'sum(castserve_request_success_total{{model="{MODEL}"}})'),
            REQUESTS)
        failures = self.prometheus.query(
            f'castserve_request_failure_total{{model="{MODEL}"}}')
        self.assertEqual(len(failures), 1, failures)
        labels, value = failures[0]
        self.assertEqual(value, 1)
        self.assertEqual(labels["reason"], self.failure_code)

    def test_model_peak_bytes(self):
        peak = self.query_value(
            f'max(castserve_model_peak_allocated_bytes{{model="{MODEL}"}})')
        self.assertGreater(peak, 0)
        self.assertGreaterEqual(peak, self.query_value(
            f'max(castserve_model_allocated_bytes{{model="{MODEL}"}})'))
        self.assertLessEqual(peak, self.query_value(
            'sum(castserve_device_peak_allocated_bytes)'))

    # --- the deploy assets against the live components ----------------------

    def test_daemon_exports_every_listed_family(self):
        families = exposition_families(http_get(self.metrics_url))
        missing = {name for name in deploy_assets_test.METRIC_FAMILIES
                   if name not in families}
        self.assertEqual(missing, set(),
                         "families the dashboard or rules use that "
                         "castserve's /metrics lacks")
        for name, kind in deploy_assets_test.METRIC_FAMILIES.items():
            if name in families:
                self.assertEqual(families[name], kind, name)

    def test_prometheus_accepts_every_dashboard_query(self):
        with open(DASHBOARD_JSON) as f:
            dashboard = json.load(f)
        substitutions = {"$__rate_interval": "1m", "$job": ".*",
                         "$instance": ".*", "$model": ".*"}
        for where, expr in deploy_assets_test.dashboard_exprs(dashboard):
            if expr.startswith("label_values("):
                continue  # Grafana's own function, not PromQL.
            for variable, value in substitutions.items():
                expr = expr.replace(variable, value)
            self.assertNotIn("$", expr, where)
            self.prometheus.query(expr)  # Raises unless status is success.

    def test_alerting_rules_load_and_evaluate(self):
        def evaluated_rules():
            rules = [rule for group in self.prometheus.api("rules")["groups"]
                     for rule in group["rules"]]
            if rules and all(not rule.get("lastEvaluation", "0001")
                             .startswith("0001") for rule in rules):
                return rules
            return None
        rules = wait_for("alerting rules evaluated", evaluated_rules)
        names = {rule["name"] for rule in rules}
        self.assertIn("CastserveMemoryNearBudget", names)
        self.assertIn("CastserveRequestFailuresRising", names)
        self.assertIn("CastserveModelUnavailable", names)
        for rule in rules:
            self.assertEqual(rule["health"], "ok", rule)
        firing = self.prometheus.query('ALERTS{alertstate="firing"}')
        self.assertEqual(firing, [])


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
