#!/usr/bin/python3
"""End-to-end: the metrics port stays available, and speaks TLS when asked.

- Starvation: with the daemon's default limits, 200 idle TCP connections and
  two slowloris clients (one header byte every 4 s) are open while /metrics
  and /v2/health/live are fetched several times, each within 5 s; then the
  server's idle timeout closes the idle connections. The idle connections
  come from 127.0.0.2 and the slow ones from 127.0.0.3 and 127.0.0.4, the
  probes from 127.0.0.1 (as a scraper and the kubelet come from their own
  addresses): the per-address limit closes most of the 200 at once.
- TLS: a self-signed certificate made here serves /metrics over HTTPS; a
  plaintext request gets no answer and the daemon serves on; with a client
  CA, a client without a certificate or with one the CA did not sign is
  refused, one the CA signed is answered.
- Unusable TLS flags or files stop the daemon at start with a message naming
  the flag, not a crash.

Run by Bazel as:
  metrics_port_integration_test.py CASTSERVE
(Debian's python3 and the openssl command).
"""

import http.client
import os
import select
import shutil
import socket
import ssl
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from daemon_testlib import (Daemon, make_key_and_certificate,  # noqa: E402
                             run)

CASTSERVE = os.path.abspath(sys.argv[1])
PROBE_TIMEOUT_SECONDS = 5
PROBES = 5
# Probes spread over 8 s: the slow clients send their third byte meanwhile.
PROBE_INTERVAL_SECONDS = 2
IDLE_CONNECTIONS = 200
SLOWLORIS_CLIENTS = 2
SLOWLORIS_BYTE_INTERVAL_SECONDS = 4
# The daemon's defaults (--metrics-connection-timeout-seconds,
# --metrics-max-connections-per-ip).
CONNECTION_TIMEOUT_SECONDS = 10
MAX_CONNECTIONS_PER_IP = 32


def connect_from(source_address, port):
    """A TCP connection to 127.0.0.1:port from `source_address` (any address
    of 127.0.0.0/8 is this machine's loopback)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((source_address, 0))
    sock.connect(("127.0.0.1", port))
    return sock


class Slowloris(threading.Thread):
    """Sends a never-ending request head one byte at a time."""

    HEAD = b"GET /metrics HTTP/1.1\r\nHost: castserve\r\nX-Slow: " + b"a" * 64

    def __init__(self, source_address, port):
        super().__init__(daemon=True)
        self.sock = connect_from(source_address, port)
        self.stop = threading.Event()
        self.bytes_sent = 0
        self.error = None

    def run(self):
        while not self.stop.is_set():
            try:
                self.sock.send(self.HEAD[self.bytes_sent:][:1] or b"a")
                self.bytes_sent += 1
            except OSError as e:
                self.error = e
                return
            self.stop.wait(SLOWLORIS_BYTE_INTERVAL_SECONDS)

    def finish(self):
        self.stop.set()
        self.join()
        self.sock.close()


def timed_get(port, path):
    """(status, body, seconds) of GET path over a new connection."""
    start = time.monotonic()
    connection = http.client.HTTPConnection("127.0.0.1", port,
                                            timeout=PROBE_TIMEOUT_SECONDS)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read(), time.monotonic() - start
    finally:
        connection.close()


def closed_by_peer(sockets, deadline_seconds):
    """{socket: seconds until it read EOF or a reset}, for those that did
    within the deadline."""
    start = time.monotonic()
    closed = {}
    waiting = set(sockets)
    while waiting and time.monotonic() - start < deadline_seconds:
        readable, _, _ = select.select(list(waiting), [], [], 0.2)
        for sock in readable:
            try:
                data = sock.recv(4096)
            except ConnectionError:
                data = b""
            if not data:
                closed[sock] = time.monotonic() - start
                waiting.discard(sock)
    return closed


class StarvationTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.repository = tempfile.mkdtemp(prefix="castserve-metrics-port-")
        cls.daemon = Daemon(CASTSERVE, f"--model-repository={cls.repository}",
                            "--grpc-port=0", "--metrics-port=0",
                            "--http-port=0",
                            "--bind-address=127.0.0.1").wait_ready()

    @classmethod
    def tearDownClass(cls):
        cls.daemon.kill()
        shutil.rmtree(cls.repository)

    def test_idle_and_slow_clients_cannot_delay_metrics_or_health(self):
        port = self.daemon.metrics_port
        opened = time.monotonic()
        idle = [connect_from("127.0.0.2", port)
                for _ in range(IDLE_CONNECTIONS)]
        slow = [Slowloris(f"127.0.0.{3 + i}", port)
                for i in range(SLOWLORIS_CLIENTS)]
        try:
            for client in slow:
                client.start()
            latencies = []
            for _ in range(PROBES):
                for path in ("/metrics", "/v2/health/live"):
                    status, body, seconds = timed_get(port, path)
                    self.assertEqual(status, 200, path)
                    latencies.append(seconds)
                time.sleep(PROBE_INTERVAL_SECONDS)
            self.assertIn(b"castserve_uptime_seconds",
                          timed_get(port, "/metrics")[1])
            print(f"{len(latencies)} probes with {IDLE_CONNECTIONS} idle and "
                  f"{SLOWLORIS_CLIENTS} slowloris connections: max "
                  f"{max(latencies) * 1000:.1f} ms", file=sys.stderr)
            # The slow clients were still sending: they were open throughout.
            for client in slow:
                self.assertIsNone(client.error)
                self.assertGreaterEqual(client.bytes_sent, 3)

            closed = closed_by_peer(
                idle, CONNECTION_TIMEOUT_SECONDS + 10
                - (time.monotonic() - opened))
            self.assertEqual(len(closed), IDLE_CONNECTIONS,
                             "idle connections left open past the timeout")
            refused_at_once = [s for s in closed.values() if s < 1]
            self.assertGreaterEqual(
                len(refused_at_once), IDLE_CONNECTIONS - MAX_CONNECTIONS_PER_IP)
            self.assertIsNone(self.daemon.process.poll())
        finally:
            for client in slow:
                client.finish()
            for sock in idle:
                sock.close()


class TlsTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.folder = tempfile.mkdtemp(prefix="castserve-metrics-tls-")
        cls.repository = os.path.join(cls.folder, "models")
        os.mkdir(cls.repository)
        cls.server_cert, cls.server_key = make_key_and_certificate(
            cls.folder, "server", "/CN=castserve", san="IP:127.0.0.1")
        make_key_and_certificate(cls.folder, "client_ca", "/CN=scrapers CA")
        cls.client_ca = os.path.join(cls.folder, "client_ca_cert.pem")
        cls.client = make_key_and_certificate(
            cls.folder, "client", "/CN=prometheus", issuer="client_ca")
        cls.stranger = make_key_and_certificate(cls.folder, "stranger",
                                                "/CN=prometheus")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.folder)

    def start(self, *tls_flags):
        daemon = Daemon(CASTSERVE, f"--model-repository={self.repository}",
                        "--grpc-port=0", "--metrics-port=0",
                        "--http-port=0",
                        "--bind-address=127.0.0.1", *tls_flags).wait_ready()
        self.addCleanup(daemon.kill)
        return daemon

    def https_get(self, port, path, client=None):
        context = ssl.create_default_context(cafile=self.server_cert)
        if client:
            context.load_cert_chain(*client)
        connection = http.client.HTTPSConnection(
            "127.0.0.1", port, context=context,
            timeout=PROBE_TIMEOUT_SECONDS)
        try:
            connection.request("GET", path)
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    def test_serves_https_and_survives_plaintext_clients(self):
        daemon = self.start(f"--metrics-tls-cert-file={self.server_cert}",
                            f"--metrics-tls-key-file={self.server_key}")
        port = daemon.metrics_port
        status, body = self.https_get(port, "/metrics")
        self.assertEqual(status, 200)
        self.assertIn(b"castserve_uptime_seconds", body)
        for _ in range(3):
            with self.assertRaises((http.client.HTTPException, OSError)):
                timed_get(port, "/metrics")
        self.assertEqual(self.https_get(port, "/v2/health/live")[0], 200)
        self.assertIsNone(daemon.process.poll())

    def test_client_ca_admits_only_certificates_it_signed(self):
        daemon = self.start(f"--metrics-tls-cert-file={self.server_cert}",
                            f"--metrics-tls-key-file={self.server_key}",
                            f"--metrics-tls-client-ca-file={self.client_ca}")
        port = daemon.metrics_port
        for name, client in (("no certificate", None),
                             ("a certificate of another CA", self.stranger)):
            with self.subTest(name):
                try:
                    status, _ = self.https_get(port, "/metrics", client)
                except (ssl.SSLError, ConnectionError):
                    status = None  # Refused during the handshake.
                self.assertIn(status, (403, None))
        status, body = self.https_get(port, "/metrics", self.client)
        self.assertEqual(status, 200)
        self.assertIn(b"castserve_uptime_seconds", body)

    def test_unusable_tls_settings_stop_the_daemon_at_start(self):
        missing = os.path.join(self.folder, "missing.pem")
        other_key = os.path.join(self.folder, "stranger_key.pem")
        cases = [
            # (flags, exit code, what the output must say)
            ([f"--metrics-tls-cert-file={self.server_cert}"], 2,
             "--metrics-tls-cert-file needs --metrics-tls-key-file"),
            ([f"--metrics-tls-client-ca-file={self.client_ca}"], 2,
             "--metrics-tls-client-ca-file needs"),
            ([f"--metrics-tls-cert-file={self.server_cert}",
              f"--metrics-tls-key-file={missing}"], 1,
             f"--metrics-tls-key-file={missing}: cannot open: No such file"),
            ([f"--metrics-tls-cert-file={self.server_key}",
              f"--metrics-tls-key-file={self.server_key}"], 1,
             "no PEM certificate"),
            ([f"--metrics-tls-cert-file={self.server_cert}",
              f"--metrics-tls-key-file={other_key}"], 1,
             "do not match"),
        ]
        for flags, exit_code, message in cases:
            with self.subTest(message):
                result = run(CASTSERVE, f"--model-repository={self.repository}",
                             "--grpc-port=0", "--metrics-port=0",
                             "--http-port=0",
                             "--bind-address=127.0.0.1", *flags)
                self.assertEqual(result.returncode, exit_code, result.stderr)
                self.assertIn(message, result.stderr)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
