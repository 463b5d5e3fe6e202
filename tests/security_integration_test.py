#!/usr/bin/python3
"""End-to-end: TLS, client certificates, scoped bearer tokens and the bind
policy, with grpcio and the unmodified tritonclient.

The matrix: no token, a wrong token, an expired token, an infer token on
the admin RPCs and on /metrics, a token rotated out of the token file, a
client trusting another CA, a plaintext client on the TLS port, a client
without a certificate where one is required. Each gets its status
(UNAUTHENTICATED, PERMISSION_DENIED, a failed handshake) and the daemon
keeps serving the clients that are right. Health never needs a token.
Without authentication the daemon listens on 127.0.0.1 only, and refuses
another address unless told --allow-unauthenticated-remote-access.

Run by Bazel as:
  security_integration_test.py CASTSERVE BERT_FILE
(Debian's python3 with python3-grpcio, python3-protobuf, python3-numpy and
the openssl command; tritonclient from $TRITON_PYTHON, as in
model_serving_integration_test).
"""

import http.client
import ipaddress
import json
import os
import shutil
import ssl
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.getcwd())  # the runfiles root holds proto/*_pb2.py
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402
from proto import inference_pb2, inference_pb2_grpc  # noqa: E402

from daemon_testlib import (Daemon, add_model, make_key_and_certificate,  # noqa: E402,E501
                             raw_request, references, run, write_file)

CASTSERVE = os.path.abspath(sys.argv[1])
BERT_DIR = os.path.dirname(os.path.abspath(sys.argv[2]))
TIMEOUT = 30

INFER_TOKEN = "infer-token-aaaaaaaaaaaaaaaa"
ADMIN_TOKEN = "admin-token-bbbbbbbbbbbbbbbb"
METRICS_TOKEN = "metrics-token-cccccccccccccc"
EXPIRED_TOKEN = "expired-token-dddddddddddddd"
ROTATED_TOKEN = "rotated-token-eeeeeeeeeeeeee"


def token_file(infer_token):
    return (f"{infer_token} infer\n"
            f"{ADMIN_TOKEN} admin,infer\n"
            f"{METRICS_TOKEN} metrics\n"
            f"{EXPIRED_TOKEN} infer expires=2020-01-01T00:00:00Z\n")


def bearer(token):
    return (("authorization", f"Bearer {token}"),)


def listening_addresses(port):
    """The addresses sockets listen on at `port`, from /proc/net/tcp and
    tcp6: "127.0.0.1" (also as an IPv4-mapped IPv6 address) or "any"."""
    addresses = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                address, local_port = fields[1].split(":")
                if int(local_port, 16) != port or fields[3] != "0A":  # LISTEN
                    continue
                # Kernel words are little-endian 32-bit groups.
                raw = b"".join(bytes.fromhex(address[i:i + 8])[::-1]
                               for i in range(0, len(address), 8))
                ip = (ipaddress.IPv4Address(raw) if len(raw) == 4 else
                      ipaddress.IPv6Address(raw))
                if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
                    ip = ip.ipv4_mapped
                addresses.add("any" if ip.is_unspecified else str(ip))
    return addresses


class SecureDaemonCase(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.folder = tempfile.mkdtemp(prefix="castserve-security-")
        cls.repository = os.path.join(cls.folder, "models")
        os.mkdir(cls.repository)
        add_model(cls.repository, "good", BERT_DIR, "max_batch_size: 4\n")
        cls.inputs, _ = references(BERT_DIR)
        cls.server_cert, cls.server_key = make_key_and_certificate(
            cls.folder, "server", "/CN=castserve",
            san="IP:127.0.0.1,DNS:localhost")
        cls.other_cert, _ = make_key_and_certificate(cls.folder, "other",
                                                     "/CN=castserve")
        make_key_and_certificate(cls.folder, "client_ca", "/CN=clients CA")
        cls.client_ca = os.path.join(cls.folder, "client_ca_cert.pem")
        cls.client_cert, cls.client_key = make_key_and_certificate(
            cls.folder, "client", "/CN=client", issuer="client_ca")
        cls.tokens = os.path.join(cls.folder, "tokens")
        write_file(cls.tokens, token_file(INFER_TOKEN))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.folder)

    def start(self, *flags):
        daemon = Daemon(CASTSERVE, f"--model-repository={self.repository}",
                        "--grpc-port=0", "--metrics-port=0",
                        "--http-port=0", *flags)
        self.addCleanup(daemon.kill)
        return daemon.wait_ready()

    def read(self, path):
        with open(path, "rb") as f:
            return f.read()

    def tls_stub(self, daemon, root=None, client=None):
        credentials = grpc.ssl_channel_credentials(
            root_certificates=self.read(root or self.server_cert),
            private_key=self.read(client[1]) if client else None,
            certificate_chain=self.read(client[0]) if client else None)
        channel = grpc.secure_channel(f"localhost:{daemon.grpc_port}",
                                      credentials)
        self.addCleanup(channel.close)
        return inference_pb2_grpc.GRPCInferenceServiceStub(channel)

    def infer(self, stub, token=None):
        return stub.ModelInfer(raw_request("good", self.inputs),
                               metadata=bearer(token) if token else None,
                               timeout=TIMEOUT)

    def assert_code(self, code, call):
        with self.assertRaises(grpc.RpcError) as raised:
            call()
        self.assertEqual(raised.exception.code(), code,
                         raised.exception.details())
        return raised.exception.details()


class TokensAndTlsTest(SecureDaemonCase):

    def test_the_matrix(self):
        daemon = self.start(f"--auth-token-file={self.tokens}",
                            f"--grpc-tls-cert-file={self.server_cert}",
                            f"--grpc-tls-key-file={self.server_key}")
        stub = self.tls_stub(daemon)
        unauthenticated = grpc.StatusCode.UNAUTHENTICATED
        denied = grpc.StatusCode.PERMISSION_DENIED
        # Health needs no token.
        self.assertTrue(stub.ServerLive(inference_pb2.ServerLiveRequest(),
                                        timeout=TIMEOUT).live)
        self.assertIn("missing authorization", self.assert_code(
            unauthenticated, lambda: self.infer(stub)))
        self.assertEqual(self.assert_code(
            unauthenticated, lambda: self.infer(stub, "wrong-token-ffffffff")),
            "unknown token")
        self.assertEqual(self.assert_code(
            unauthenticated, lambda: self.infer(stub, EXPIRED_TOKEN)),
            "the token has expired")
        self.infer(stub, INFER_TOKEN)
        self.infer(stub, ADMIN_TOKEN)
        index = inference_pb2.RepositoryIndexRequest()
        unload = inference_pb2.RepositoryModelUnloadRequest(model_name="good")
        load = inference_pb2.RepositoryModelLoadRequest(model_name="good")
        for call in (stub.RepositoryIndex, stub.RepositoryModelUnload,
                     stub.RepositoryModelLoad):
            request = {stub.RepositoryIndex: index,
                       stub.RepositoryModelUnload: unload,
                       stub.RepositoryModelLoad: load}[call]
            self.assertIn("'admin' scope", self.assert_code(
                denied, lambda: call(request, metadata=bearer(INFER_TOKEN),
                                     timeout=TIMEOUT)))
        self.assertEqual(len(stub.RepositoryIndex(
            index, metadata=bearer(ADMIN_TOKEN), timeout=TIMEOUT).models), 1)
        self.assert_code(denied, lambda: self.infer(stub, METRICS_TOKEN))

        # A client that trusts another CA, and a plaintext one: no
        # handshake; the right client is served meanwhile.
        self.assert_code(grpc.StatusCode.UNAVAILABLE, lambda: self.infer(
            self.tls_stub(daemon, root=self.other_cert), INFER_TOKEN))
        plain = grpc.insecure_channel(f"127.0.0.1:{daemon.grpc_port}")
        self.addCleanup(plain.close)
        self.assert_code(grpc.StatusCode.UNAVAILABLE, lambda: self.infer(
            inference_pb2_grpc.GRPCInferenceServiceStub(plain), INFER_TOKEN))
        self.infer(stub, INFER_TOKEN)

        # The metrics port: /metrics needs the metrics scope, health nothing.
        def get(path, token=None):
            connection = http.client.HTTPConnection(
                "127.0.0.1", daemon.metrics_port, timeout=TIMEOUT)
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            connection.request("GET", path, headers=headers)
            response = connection.getresponse()
            body = response.read().decode()
            connection.close()
            return response.status, body
        self.assertEqual(get("/metrics")[0], 401)
        self.assertEqual(get("/metrics", INFER_TOKEN)[0], 403)
        status, body = get("/metrics", METRICS_TOKEN)
        self.assertEqual(status, 200)
        self.assertIn('castserve_request_failure_total{reason="UNAUTHENTICATED"}',
                      body)
        self.assertEqual(get("/v2/health/live")[0], 200)

        # Rotation: rewriting the file retires the old token within a second
        # or so; the daemon never restarts.
        write_file(self.tokens, token_file(ROTATED_TOKEN))
        self.addCleanup(write_file, self.tokens, token_file(INFER_TOKEN))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                self.infer(stub, ROTATED_TOKEN)
                break
            except grpc.RpcError:
                time.sleep(0.2)
        self.infer(stub, ROTATED_TOKEN)
        self.assert_code(unauthenticated,
                         lambda: self.infer(stub, INFER_TOKEN))
        # Tokens are never logged.
        log = daemon.output()
        for token in (INFER_TOKEN, ADMIN_TOKEN, ROTATED_TOKEN, EXPIRED_TOKEN):
            self.assertNotIn(token, log)

    def test_rest_port_with_https_and_the_same_scopes(self):
        daemon = self.start(f"--auth-token-file={self.tokens}",
                            f"--http-tls-cert-file={self.server_cert}",
                            f"--http-tls-key-file={self.server_key}")

        def call(method, path, token=None, body=None, root=None):
            context = ssl.create_default_context(
                cafile=root or self.server_cert)
            connection = http.client.HTTPSConnection(
                "127.0.0.1", daemon.http_port, timeout=TIMEOUT,
                context=context)
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            connection.request(method, path, headers=headers,
                               body=None if body is None else json.dumps(body))
            response = connection.getresponse()
            text = response.read().decode()
            connection.close()
            return response.status, response.getheader("WWW-Authenticate"), \
                text

        infer = {"inputs": [{"name": name, "datatype": "INT64",
                             "shape": list(array.shape),
                             "data": array.ravel().tolist()}
                            for name, array in self.inputs.items()]}
        self.assertEqual(call("GET", "/v2/health/ready")[0], 200)
        status, challenge, text = call("POST", "/v2/models/good/infer",
                                       body=infer)
        self.assertEqual((status, challenge), (401, "Bearer"))
        self.assertIn("missing authorization", json.loads(text)["error"])
        self.assertEqual(call("POST", "/v2/models/good/infer",
                              "wrong-token-ffffffff", infer)[0], 401)
        self.assertEqual(call("POST", "/v2/models/good/infer", INFER_TOKEN,
                              infer)[0], 200)
        status, _, text = call("POST", "/v2/repository/index", INFER_TOKEN)
        self.assertEqual(status, 403)
        self.assertIn("'admin' scope", json.loads(text)["error"])
        self.assertEqual(call("POST", "/v2/repository/index",
                              ADMIN_TOKEN)[0], 200)
        self.assertEqual(call("GET", "/v2/models/good", METRICS_TOKEN)[0],
                         403)
        # A client that trusts another CA gets no handshake.
        with self.assertRaises(ssl.SSLError):
            call("GET", "/v2/health/ready", root=self.other_cert)

    def test_tritonclient_with_ssl_and_a_token(self):
        python = next((c for c in (sys.executable,
                                   os.environ.get("TRITON_PYTHON", ""))
                       if c and run(c, "-c", "import tritonclient.grpc")
                       .returncode == 0), None)
        self.assertIsNotNone(python, "tritonclient is not installed: run "
                             "tools/test_all.sh or set TRITON_PYTHON")
        daemon = self.start(f"--auth-token-file={self.tokens}",
                            f"--grpc-tls-cert-file={self.server_cert}",
                            f"--grpc-tls-key-file={self.server_key}")
        script = (
            "import sys, numpy as np, tritonclient.grpc as t\n"
            "c = t.InferenceServerClient(sys.argv[1], ssl=True, "
            "root_certificates=sys.argv[2])\n"
            "h = {'authorization': 'Bearer ' + sys.argv[3]}\n"
            "assert c.is_server_live()\n"
            "assert c.is_model_ready('good', headers=h)\n"
            "ids = np.ones((1, 8), np.int64)\n"
            "i = t.InferInput('input_ids', [1, 8], 'INT64')\n"
            "i.set_data_from_numpy(ids)\n"
            "r = c.infer('good', [i], headers=h)\n"
            "assert r.as_numpy('pooler_output').shape == (1, 32)\n"
            "try:\n"
            "    c.infer('good', [i])\n"
            "    sys.exit('a call without a token was served')\n"
            "except t.InferenceServerException as e:\n"
            "    assert 'UNAUTHENTICATED' in str(e.status()), e\n"
            "print('ok')\n")
        result = run(python, "-c", script, f"localhost:{daemon.grpc_port}",
                     self.server_cert, INFER_TOKEN, timeout=120)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)


class CertificateRotationTest(SecureDaemonCase):

    def test_replacing_the_certificate_files_rotates_them(self):
        cert = os.path.join(self.folder, "rotating_cert.pem")
        key = os.path.join(self.folder, "rotating_key.pem")
        shutil.copy(self.server_cert, cert)
        shutil.copy(self.server_key, key)
        daemon = self.start(f"--grpc-tls-cert-file={cert}",
                            f"--grpc-tls-key-file={key}")
        self.infer(self.tls_stub(daemon))
        new_cert, new_key = make_key_and_certificate(
            self.folder, "renewed", "/CN=castserve",
            san="IP:127.0.0.1,DNS:localhost")
        # Key first, then the certificate: gRPC reads a matching pair.
        shutil.copy(new_key, key)
        shutil.copy(new_cert, cert)
        deadline = time.monotonic() + 30  # gRPC looks every 10 s.
        while True:
            try:
                self.infer(self.tls_stub(daemon, root=new_cert))
                break
            except grpc.RpcError:
                self.assertLess(time.monotonic(), deadline,
                                "the new certificate was not served")
                time.sleep(0.5)
        # New connections no longer get the old certificate.
        self.assert_code(grpc.StatusCode.UNAVAILABLE, lambda: self.infer(
            self.tls_stub(daemon, root=self.server_cert)))
        self.assertIsNone(daemon.process.poll())


class ClientCertificateTest(SecureDaemonCase):

    def test_only_certificates_the_ca_signed_are_admitted(self):
        daemon = self.start(f"--grpc-tls-cert-file={self.server_cert}",
                            f"--grpc-tls-key-file={self.server_key}",
                            f"--grpc-tls-client-ca-file={self.client_ca}")
        self.assert_code(grpc.StatusCode.UNAVAILABLE,
                         lambda: self.infer(self.tls_stub(daemon)))
        stranger = make_key_and_certificate(self.folder, "stranger",
                                            "/CN=client")
        self.assert_code(grpc.StatusCode.UNAVAILABLE, lambda: self.infer(
            self.tls_stub(daemon, client=stranger)))
        self.infer(self.tls_stub(daemon, client=(self.client_cert,
                                                 self.client_key)))


class BindPolicyTest(SecureDaemonCase):

    def test_without_authentication_only_loopback_by_default(self):
        daemon = self.start()
        self.assertIn("no authentication configured: listening on 127.0.0.1",
                      daemon.output())
        for port in (daemon.grpc_port, daemon.metrics_port, daemon.http_port):
            self.assertEqual(listening_addresses(port), {"127.0.0.1"})
        with_tokens = self.start(f"--auth-token-file={self.tokens}")
        self.assertEqual(listening_addresses(with_tokens.grpc_port), {"any"})

    def test_a_public_address_without_authentication_needs_the_flag(self):
        result = run(CASTSERVE, f"--model-repository={self.repository}",
                     "--bind-address=0.0.0.0", "--grpc-port=0",
                     "--metrics-port=0")
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertIn("--allow-unauthenticated-remote-access", result.stderr)
        self.start("--bind-address=0.0.0.0",
                   "--allow-unauthenticated-remote-access")

    def test_unusable_security_files_stop_the_daemon(self):
        for flags, problem in [
                ([f"--auth-token-file={self.folder}/absent"],
                 "--auth-token-file: token file"),
                ([f"--grpc-tls-cert-file={self.server_key}",
                  f"--grpc-tls-key-file={self.server_key}"],
                 "--grpc-tls-cert-file"),
                ([f"--grpc-tls-cert-file={self.server_cert}"],
                 "--grpc-tls-cert-file needs --grpc-tls-key-file")]:
            with self.subTest(problem):
                result = run(CASTSERVE, f"--model-repository={self.repository}",
                             "--grpc-port=0", "--metrics-port=0",
                             "--http-port=0", *flags)
                self.assertIn(result.returncode, (1, 2), result.stderr)
                self.assertIn(problem, result.stderr)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
