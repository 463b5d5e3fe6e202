#!/usr/bin/python3
"""End-to-end test of the castserve daemon as a separate process.

Starts the real binary on free ports with a temporary model repository and
checks it with castserve-client, with an independent Python gRPC client built
from our protos, with HTTP scrapes validated by `promtool check metrics`, and
with signals. Bad flags, bad repositories and busy ports must give one precise
line and a non-zero exit.

Run by Bazel as: daemon_integration_test.py CASTSERVE CASTSERVE_CLIENT
(Debian's python3 with python3-grpcio and python3-protobuf; promtool from the
prometheus package).
"""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.getcwd())  # the runfiles root holds proto/*_pb2.py
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402
from proto import health_pb2, health_pb2_grpc  # noqa: E402
from proto import inference_pb2, inference_pb2_grpc  # noqa: E402

from daemon_testlib import Daemon as _Daemon, run, write_file  # noqa: E402

CASTSERVE = os.path.abspath(sys.argv[1])
CLIENT = os.path.abspath(sys.argv[2])


def Daemon(*args):
    return _Daemon(CASTSERVE, *args)


def http_get(port, path):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}",
                                    timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


class DaemonTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.repository = tempfile.mkdtemp(prefix="castserve-repo-")
        write_file(os.path.join(cls.repository, "good", "config.pbtxt"),
                   'max_batch_size: 4\narchitecture: "bert"\n')
        write_file(os.path.join(cls.repository, "broken", "config.pbtxt"),
                   "max_batch_size: lots\n")
        cls.daemon = Daemon(f"--model-repository={cls.repository}",
                            "--grpc-port=0", "--metrics-port=0",
                            "--http-port=0",
                            "--bind-address=127.0.0.1").wait_ready()
        cls.url = f"127.0.0.1:{cls.daemon.grpc_port}"
        cls.channel = grpc.insecure_channel(cls.url)
        cls.stub = inference_pb2_grpc.GRPCInferenceServiceStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.daemon.kill()
        shutil.rmtree(cls.repository)

    def test_startup_logs_what_the_repository_holds(self):
        log = self.daemon.output()
        self.assertIn('msg="model found" name=good', log)
        self.assertRegex(log, r'msg="model unavailable" name=broken '
                              r'reason=".*config.pbtxt:1:17')
        for line in log.splitlines():
            self.assertRegex(line, r"^ts=\S+Z level=(debug|info|warning|error) "
                                   r"msg=")

    def test_client_subcommands(self):
        for command, expected in [("live", "live: true"),
                                  ("ready", "ready: true"),
                                  ("metadata", "name: castserve"),
                                  ("health", "health: SERVING")]:
            result = run(CLIENT, f"--url={self.url}", command)
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertIn(expected, result.stdout)

    def test_client_fails_without_a_server(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        result = run(CLIENT, f"--url=127.0.0.1:{port}",
                     "--timeout-seconds=1", "live")
        self.assertEqual(result.returncode, 1)
        self.assertIn("UNAVAILABLE", result.stderr)

    def test_client_usage_errors(self):
        result = run(CLIENT, "frobnicate")
        self.assertEqual(result.returncode, 2)
        self.assertIn("unknown command 'frobnicate'", result.stderr)

    def test_python_grpc_client(self):
        self.assertTrue(self.stub.ServerLive(
            inference_pb2.ServerLiveRequest()).live)
        self.assertTrue(self.stub.ServerReady(
            inference_pb2.ServerReadyRequest()).ready)
        metadata = self.stub.ServerMetadata(
            inference_pb2.ServerMetadataRequest())
        self.assertEqual(metadata.name, "castserve")
        self.assertRegex(metadata.version, r"^\d+\.\d+\.\d+$")
        health = health_pb2_grpc.HealthStub(self.channel).Check(
            health_pb2.HealthCheckRequest())
        self.assertEqual(health.status,
                         health_pb2.HealthCheckResponse.SERVING)

    def test_inference_rpcs_answer_with_precise_statuses(self):
        for model, code in [("nonexistent", grpc.StatusCode.NOT_FOUND),
                            ("broken", grpc.StatusCode.UNAVAILABLE),
                            ("good", grpc.StatusCode.UNAVAILABLE)]:
            with self.assertRaises(grpc.RpcError) as raised:
                self.stub.ModelInfer(inference_pb2.ModelInferRequest(
                    model_name=model))
            self.assertEqual(raised.exception.code(), code, model)
        # Triton's shared-memory RPCs are not part of castserve's service.
        method = self.channel.unary_unary(
            "/inference.GRPCInferenceService/SystemSharedMemoryStatus")
        with self.assertRaises(grpc.RpcError) as raised:
            method(b"")
        self.assertEqual(raised.exception.code(),
                         grpc.StatusCode.UNIMPLEMENTED)

    def test_metrics_pass_promtool(self):
        status, text = http_get(self.daemon.metrics_port, "/metrics")
        self.assertEqual(status, 200)
        for name in ["castserve_process_resident_memory_bytes",
                     "castserve_process_resident_memory_peak_bytes",
                     "castserve_process_cpu_seconds_total",
                     "castserve_uptime_seconds", "castserve_build_info"]:
            self.assertRegex(text, rf"(?m)^{name}(\{{.*\}})? [0-9.e+]+$")
        check = subprocess.run(["promtool", "check", "metrics"], input=text,
                               capture_output=True, text=True, timeout=30)
        self.assertEqual(check.returncode, 0, check.stdout + check.stderr)

    def test_http_health_paths(self):
        self.assertEqual(http_get(self.daemon.metrics_port,
                                  "/v2/health/live")[0], 200)
        self.assertEqual(http_get(self.daemon.metrics_port,
                                  "/v2/health/ready")[0], 200)

    def test_busy_ports_are_one_line_errors(self):
        ports = {"--grpc-port": self.daemon.grpc_port,
                 "--metrics-port": self.daemon.metrics_port,
                 "--http-port": self.daemon.http_port}
        for flag, port in ports.items():
            others = [f"{other}=0" for other in ports if other != flag]
            result = run(CASTSERVE, f"--model-repository={self.repository}",
                         "--bind-address=127.0.0.1", f"{flag}={port}",
                         *others)
            self.assertEqual(result.returncode, 1, result.stderr)
            errors = [l for l in result.stderr.splitlines()
                      if "level=error" in l]
            self.assertEqual(len(errors), 1, result.stderr)
            self.assertIn(f"127.0.0.1:{port}", errors[0])
            self.assertIn("Address already in use", errors[0])


class StartupErrorTest(unittest.TestCase):

    def assert_one_line_error(self, args, code, message):
        result = run(CASTSERVE, *args)
        self.assertEqual(result.returncode, code, result.stderr)
        self.assertIn(message, result.stderr)
        self.assertNotIn("Traceback", result.stderr)
        self.assertNotIn("terminate called", result.stderr)
        errors = [l for l in result.stderr.splitlines()
                  if "castserve:" in l or "level=error" in l]
        self.assertEqual(len(errors), 1, result.stderr)

    def test_bad_flags_exit_2(self):
        self.assert_one_line_error(["--bogus"], 2, "unknown flag '--bogus'")
        self.assert_one_line_error(["--model-repository=/x", "--grpc-port=x"],
                                   2, "--grpc-port: 'x'")
        self.assert_one_line_error([], 2, "--model-repository is required")

    def test_missing_repository_exits_1(self):
        self.assert_one_line_error(
            ["--model-repository=/nonexistent/repo", "--grpc-port=0",
             "--metrics-port=0"], 1, "/nonexistent/repo does not exist")

    def test_repository_that_is_a_file_exits_1(self):
        with tempfile.NamedTemporaryFile() as f:
            self.assert_one_line_error(
                [f"--model-repository={f.name}", "--grpc-port=0",
                 "--metrics-port=0"], 1, "is not a directory")

    def test_help_and_version(self):
        result = run(CASTSERVE, "--help")
        self.assertEqual(result.returncode, 0)
        self.assertIn("--model-repository", result.stdout)
        result = run(CASTSERVE, "--version")
        self.assertEqual(result.returncode, 0)
        self.assertRegex(result.stdout, r"^castserve \d+\.\d+\.\d+ \(LibTorch ")


class ShutdownTest(unittest.TestCase):

    def setUp(self):
        self.repository = tempfile.mkdtemp(prefix="castserve-repo-")

    def tearDown(self):
        shutil.rmtree(self.repository)

    def check_stops_cleanly(self, sig):
        daemon = Daemon(f"--model-repository={self.repository}",
                        "--grpc-port=0", "--metrics-port=0",
                        "--http-port=0",
                        "--bind-address=127.0.0.1").wait_ready()
        try:
            started = time.monotonic()
            self.assertEqual(daemon.stop(sig, timeout=5), 0)
            self.assertLess(time.monotonic() - started, 5)
            self.assertIn('msg="castserve stopped"', daemon.output())
            # The ports are released.
            with socket.socket() as s:
                s.bind(("127.0.0.1", daemon.grpc_port))
        finally:
            daemon.kill()

    def test_sigterm_exits_0(self):
        self.check_stops_cleanly(signal.SIGTERM)

    def test_sigint_exits_0(self):
        self.check_stops_cleanly(signal.SIGINT)

    def test_in_flight_stream_is_bounded_by_grace(self):
        daemon = Daemon(f"--model-repository={self.repository}",
                        "--grpc-port=0", "--metrics-port=0",
                        "--http-port=0",
                        "--bind-address=127.0.0.1",
                        "--shutdown-grace-seconds=1").wait_ready()
        try:
            channel = grpc.insecure_channel(f"127.0.0.1:{daemon.grpc_port}")
            stub = health_pb2_grpc.HealthStub(channel)
            # Watch is a server stream that stays open: an in-flight call.
            watch = stub.Watch(health_pb2.HealthCheckRequest())
            self.assertEqual(next(watch).status,
                             health_pb2.HealthCheckResponse.SERVING)
            started = time.monotonic()
            self.assertEqual(daemon.stop(signal.SIGTERM, timeout=5), 0)
            self.assertLess(time.monotonic() - started, 4)
            channel.close()
        finally:
            daemon.kill()


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]], verbosity=2)
