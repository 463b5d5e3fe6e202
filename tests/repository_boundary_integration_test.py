#!/usr/bin/python3
"""End-to-end: the model repository is a boundary on real paths.

Five models each reach a file outside the repository through a symlink: a
symlinked model folder, a checkpoint.path through an in-repository symlink
that leads outside, a model.safetensors that is a symlink to a file outside,
a warmup data file reached through a symlink, and a config.pbtxt that is a
symlink. Each is UNAVAILABLE with a reason naming the path and where it
leads, while a good model serves; with --allow-symlinks-outside-repository
all five load.

Run by Bazel as:
  repository_boundary_integration_test.py CASTSERVE BERT_FILE
(Debian's python3 with python3-grpcio, python3-protobuf and python3-numpy).
"""

import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.getcwd())  # the runfiles root holds proto/*_pb2.py
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402
from proto import inference_pb2, inference_pb2_grpc  # noqa: E402

from daemon_testlib import (Daemon, add_model, raw_request,  # noqa: E402
                             references, write_file)

CASTSERVE = os.path.abspath(sys.argv[1])
BERT_DIR = os.path.dirname(os.path.abspath(sys.argv[2]))
CONFIG = "max_batch_size: 4\n"
WARMUP = ('model_warmup { name: "w" batch_size: 1 inputs { key: "input_ids" '
          'value { data_type: TYPE_INT64 dims: [ 4 ] '
          'input_data_file: "ids.bin" } } }\n')
LINKED = ["linked_folder", "linked_checkpoint_path", "linked_weights",
          "linked_warmup_file", "linked_config"]


def make_repository(base):
    """The repository under base/repo and the files it links to under
    base/outside; returns the repository's path."""
    repository = os.path.join(base, "repo")
    outside = os.path.join(base, "outside")
    os.makedirs(repository)
    add_model(outside, "bert", BERT_DIR, CONFIG)
    with open(os.path.join(outside, "ids.bin"), "wb") as f:
        f.write(bytes(8 * 4))  # four int64 token ids, all 0
    write_file(os.path.join(outside, "config.pbtxt"), CONFIG)
    outside_bert = os.path.join(outside, "bert")

    add_model(repository, "good", BERT_DIR, CONFIG)
    os.symlink(outside_bert, os.path.join(repository, "linked_folder"))
    model = add_model(repository, "linked_checkpoint_path", BERT_DIR,
                      CONFIG + 'checkpoint { path: "ckpt" }\n')
    os.symlink(outside_bert, os.path.join(model, "ckpt"))
    model = add_model(repository, "linked_weights", BERT_DIR, CONFIG)
    os.remove(os.path.join(model, "model.safetensors"))
    os.symlink(os.path.join(outside_bert, "model.safetensors"),
               os.path.join(model, "model.safetensors"))
    model = add_model(repository, "linked_warmup_file", BERT_DIR,
                      CONFIG + WARMUP)
    os.symlink(os.path.join(outside, "ids.bin"),
               os.path.join(model, "ids.bin"))
    model = add_model(repository, "linked_config", BERT_DIR, CONFIG)
    os.remove(os.path.join(model, "config.pbtxt"))
    os.symlink(os.path.join(outside, "config.pbtxt"),
               os.path.join(model, "config.pbtxt"))
    return repository


class RepositoryBoundaryTest(unittest.TestCase):

    def setUp(self):
        self.base = tempfile.mkdtemp(prefix="castserve-boundary-")
        self.repository = make_repository(self.base)

    def tearDown(self):
        shutil.rmtree(self.base)

    def serve(self, *flags):
        daemon = Daemon(CASTSERVE, f"--model-repository={self.repository}",
                        "--grpc-port=0", "--metrics-port=0",
                        "--http-port=0",
                        "--bind-address=127.0.0.1", *flags).wait_ready()
        self.addCleanup(daemon.kill)
        channel = grpc.insecure_channel(f"127.0.0.1:{daemon.grpc_port}")
        self.addCleanup(channel.close)
        stub = inference_pb2_grpc.GRPCInferenceServiceStub(channel)
        index = stub.RepositoryIndex(inference_pb2.RepositoryIndexRequest())
        return stub, {m.name: (m.state, m.reason) for m in index.models}

    def test_symlinks_that_leave_the_repository_are_refused(self):
        stub, index = self.serve()
        outside = os.path.realpath(os.path.join(self.base, "outside"))
        for name in LINKED:
            with self.subTest(name):
                state, reason = index[name]
                self.assertEqual(state, "UNAVAILABLE", reason)
                self.assertIn("outside the model repository", reason)
                self.assertIn(f"leads to {outside}", reason)
        self.assertEqual(index["good"][0], "READY")
        inputs, _ = references(BERT_DIR)
        stub.ModelInfer(raw_request("good", inputs), timeout=60)
        # Loading one explicitly gives the same reason.
        with self.assertRaises(grpc.RpcError) as raised:
            stub.RepositoryModelLoad(inference_pb2.RepositoryModelLoadRequest(
                model_name="linked_weights"), timeout=60)
        self.assertIn("checkpoint file", raised.exception.details())

    def test_the_flag_allows_them(self):
        _, index = self.serve("--allow-symlinks-outside-repository")
        for name in LINKED + ["good"]:
            with self.subTest(name):
                self.assertEqual(index[name][0], "READY", index[name][1])


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
