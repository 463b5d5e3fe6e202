#!/usr/bin/python3
"""End-to-end: the daemon's shutdown and its loads are bounded.

A zero-weight BERT large enough that one forward of 4 x 2048 tokens takes
many seconds on one thread stands in for a busy model:
- SIGTERM with --shutdown-grace-seconds=1 while such forwards run: the calls
  fail once the grace period is over, the forwards stop at their next module,
  and the process exits 0 well within the grace period plus the documented
  overrun bound (5 s), long before the forwards would have ended;
- RepositoryModelUnload of a model whose warmups would take hours returns at
  once: its load is cancelled, and a good model keeps serving;
- SIGTERM while such a model loads at startup ends the daemon just as fast.

Run by Bazel as:
  shutdown_integration_test.py CASTSERVE BERT_FILE
(Debian's python3 with python3-grpcio, python3-protobuf and python3-numpy).
"""

import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.getcwd())  # the runfiles root holds proto/*_pb2.py
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402
import numpy as np  # noqa: E402
from proto import inference_pb2, inference_pb2_grpc  # noqa: E402

from daemon_testlib import (Daemon, add_model, raw_request,  # noqa: E402
                             references, write_file, write_zero_bert)

CASTSERVE = os.path.abspath(sys.argv[1])
BERT_DIR = os.path.dirname(os.path.abspath(sys.argv[2]))

GRACE_SECONDS = 1
# main.cc's kShutdownOverrun: how long past the grace period a shutdown may
# take before the process exits anyway (with status 1).
OVERRUN_SECONDS = 5
LONG_INPUT = np.ones((4, 2048), dtype=np.int64)
# Warmups of LONG_INPUT: hours of forwards.
ENDLESS_WARMUP = ('model_warmup { name: "long" batch_size: 4 count: 1000 '
                  'inputs { key: "input_ids" value { data_type: TYPE_INT64 '
                  'dims: [ 2048 ] zero_data: true } } }\n')


def add_slow_model(repository, name, config):
    model_dir = os.path.join(repository, name)
    write_zero_bert(model_dir, hidden=768, layers=6, intermediate=3072,
                    heads=12, max_positions=2048)
    write_file(os.path.join(model_dir, "config.pbtxt"), config)


class ShutdownTestCase(unittest.TestCase):

    def setUp(self):
        self.repository = tempfile.mkdtemp(prefix="castserve-shutdown-")
        add_model(self.repository, "good", BERT_DIR, "max_batch_size: 4\n")
        self.daemon = None

    def tearDown(self):
        if self.daemon is not None:
            self.daemon.kill()
        shutil.rmtree(self.repository)

    def start(self, wait_ready=True):
        self.daemon = Daemon(CASTSERVE,
                             f"--model-repository={self.repository}",
                             "--grpc-port=0", "--metrics-port=0",
                             "--http-port=0",
                             "--bind-address=127.0.0.1",
                             "--intra-op-threads=1",
                             f"--shutdown-grace-seconds={GRACE_SECONDS}")
        if wait_ready:
            self.daemon.wait_ready()
            self.channel = grpc.insecure_channel(
                f"127.0.0.1:{self.daemon.grpc_port}",
                options=[("grpc.max_receive_message_length", 1 << 30)])
            self.addCleanup(self.channel.close)
            self.stub = inference_pb2_grpc.GRPCInferenceServiceStub(
                self.channel)

    def stop_and_time(self):
        start = time.monotonic()
        self.daemon.process.send_signal(signal.SIGTERM)
        code = self.daemon.process.wait(timeout=60)
        return code, time.monotonic() - start

    def wait_for_log(self, text, timeout=30):
        deadline = time.monotonic() + timeout
        while text not in self.daemon.output():
            self.assertLess(time.monotonic(), deadline,
                            f"no '{text}' in the log:\n{self.daemon.output()}")
            time.sleep(0.05)


class ShutdownTest(ShutdownTestCase):

    def test_sigterm_during_long_forwards_exits_within_the_grace_period(self):
        add_slow_model(self.repository, "slow", "max_batch_size: 4\n")
        self.start()
        errors = []

        def infer():
            try:
                self.stub.ModelInfer(
                    raw_request("slow", {"input_ids": LONG_INPUT}),
                    timeout=300)
                errors.append(None)
            except grpc.RpcError as error:
                errors.append(error.code())

        clients = [threading.Thread(target=infer) for _ in range(2)]
        for client in clients:
            client.start()
        time.sleep(1)  # Both calls are in the daemon, one forward running.
        code, seconds = self.stop_and_time()
        for client in clients:
            client.join()
        log = self.daemon.output()
        self.assertEqual(code, 0, log)
        self.assertIn("grace period over; cancelling the forwards", log)
        # Without the cancellation the process waits for the running forward
        # and then the queued one (30 s here with LibTorch on one thread).
        self.assertLess(seconds, GRACE_SECONDS + OVERRUN_SECONDS, log)
        self.assertEqual(len(errors), 2)
        self.assertNotIn(None, errors, "a long call finished, none should")

    def test_unloading_a_loading_model_cancels_its_load(self):
        add_slow_model(self.repository, "slow_load",
                       "max_batch_size: 4\n"
                       "load_policy: LOAD_POLICY_FIRST_REQUEST\n" +
                       ENDLESS_WARMUP)
        self.start()
        result = {}

        def load():
            try:
                self.stub.RepositoryModelLoad(
                    inference_pb2.RepositoryModelLoadRequest(
                        model_name="slow_load"), timeout=600)
                result["load"] = "ok"
            except grpc.RpcError as error:
                result["load"] = (error.code(), error.details())

        loader = threading.Thread(target=load)
        loader.start()
        self.wait_for_log("loading model")
        time.sleep(0.5)  # Inside the first warmup forward.
        self.stub.RepositoryModelUnload(
            inference_pb2.RepositoryModelUnloadRequest(model_name="slow_load"),
            timeout=OVERRUN_SECONDS)
        loader.join(timeout=OVERRUN_SECONDS)
        self.assertFalse(loader.is_alive())
        code, details = result["load"]
        self.assertNotEqual(code, grpc.StatusCode.OK)
        self.assertIn("the model was unloaded while it was loading", details)
        index = self.stub.RepositoryIndex(
            inference_pb2.RepositoryIndexRequest())
        states = {m.name: (m.state, m.reason) for m in index.models}
        self.assertEqual(states["slow_load"], ("UNAVAILABLE", "unloaded"))
        self.assertEqual(states["good"][0], "READY")
        inputs, _ = references(BERT_DIR)
        self.stub.ModelInfer(raw_request("good", inputs), timeout=60)

    def test_sigterm_during_a_startup_load_exits_at_once(self):
        add_slow_model(self.repository, "slow_load",
                       "max_batch_size: 4\n" + ENDLESS_WARMUP)
        self.start(wait_ready=False)
        self.wait_for_log('msg="loading model" model=slow_load')
        time.sleep(0.5)
        code, seconds = self.stop_and_time()
        log = self.daemon.output()
        self.assertEqual(code, 0, log)
        self.assertIn("stop signal during startup", log)
        self.assertLess(seconds, GRACE_SECONDS + OVERRUN_SECONDS, log)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
