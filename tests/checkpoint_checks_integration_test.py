#!/usr/bin/python3
"""End-to-end: checkpoints that disagree with their config.json never load.

Each case is a copy of the bert fixture whose config.json was edited: a
vocab_size of 64 for a word embedding of 211 rows (loaded as it is by
default, and mapped lazily), a hidden_size of 10^9, an intermediate_size of
10^12. Each must leave its model UNAVAILABLE, not ready, with a reason naming
the tensor or the config field with what was expected and what was found,
while the daemon keeps serving a good model.

Run by Bazel as:
  checkpoint_checks_integration_test.py CASTSERVE BERT_FILE
(Debian's python3 with python3-grpcio, python3-protobuf and python3-numpy).
"""

import json
import os
import sys
import unittest

sys.path.insert(0, os.getcwd())  # the runfiles root holds proto/*_pb2.py
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402
from proto import inference_pb2  # noqa: E402

from daemon_testlib import RepositoryTestCase, add_model  # noqa: E402

CASTSERVE = os.path.abspath(sys.argv[1])
BERT_DIR = os.path.dirname(os.path.abspath(sys.argv[2]))

BERT_CONFIG = "max_batch_size: 4\n"
MAPPED_CONFIG = BERT_CONFIG + "weights { residency: RESIDENCY_MAPPED }\n"

# name -> (config.json changes, config.pbtxt, what the reason must say)
BAD_MODELS = {
    "small_vocab": (
        {"vocab_size": 64}, BERT_CONFIG,
        ["weight 'embeddings.word_embeddings.weight'",
         "expected shape [64, 32]", "found [211, 32]"]),
    "small_vocab_mapped": (
        {"vocab_size": 64}, MAPPED_CONFIG,
        ["weight 'embeddings.word_embeddings.weight'",
         "expected shape [64, 32]", "found [211, 32]"]),
    "huge_hidden": (
        {"hidden_size": 10**9}, BERT_CONFIG,
        ["hidden_size", "1000000000", "65536"]),
    "huge_intermediate": (
        {"intermediate_size": 10**12}, BERT_CONFIG,
        ["intermediate_size", "1000000000000", "1048576"]),
}


class CheckpointChecksTest(RepositoryTestCase):
    castserve = CASTSERVE
    good_dir = BERT_DIR
    good_config = BERT_CONFIG

    @classmethod
    def add_models(cls, repository):
        for name, (changes, config, _) in BAD_MODELS.items():
            model_dir = add_model(repository, name, BERT_DIR, config)
            config_path = os.path.join(model_dir, "config.json")
            with open(config_path) as f:
                hf_config = json.load(f)
            hf_config.update(changes)
            with open(config_path, "w") as f:
                json.dump(hf_config, f)

    def test_mismatched_models_are_unavailable_naming_the_cause(self):
        index = self.index()
        for name, (_, _, reasons) in BAD_MODELS.items():
            with self.subTest(name):
                self.assertEqual(index[name].state, "UNAVAILABLE",
                                 index[name].reason)
                for reason in reasons:
                    self.assertIn(reason, index[name].reason)
        self.assertEqual(index["good"].state, "READY")

    def test_mismatched_models_are_not_ready_and_advertise_nothing(self):
        for name in BAD_MODELS:
            with self.subTest(name):
                ready = self.stub.ModelReady(
                    inference_pb2.ModelReadyRequest(name=name))
                self.assertFalse(ready.ready)
                with self.assertRaises(grpc.RpcError):
                    self.stub.ModelMetadata(
                        inference_pb2.ModelMetadataRequest(name=name))

    def test_the_good_model_keeps_serving(self):
        self.assertIsNone(self.daemon.process.poll(), self.daemon.output())
        response = self.infer_good()
        self.assertEqual(response.model_name, "good")


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
