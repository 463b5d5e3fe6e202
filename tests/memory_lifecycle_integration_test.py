#!/usr/bin/python3
"""End-to-end test of castserve's model memory lifecycle.

Against the real daemon binary and the committed fixture models (copied into
a temporary repository), with layerwise casting on (fp8 e4m3fn per-row
storage, transient f32 compute copies):

1. Unload frees the model's memory: 50 cycles of RepositoryModelLoad, one
   ModelInfer (checked against the fixture's fp8 per-row round-trip
   reference within 1e-4) and RepositoryModelUnload leave the daemon's
   anonymous resident memory (RssAnon: where storage and compute copies
   live) within 5% of where it was after the first cycle (plus the freed
   memory the allocator may keep cached, 16 MiB), and no file of the
   repository mapped. (VmRSS also counts the page-cache pages of
   LibTorch's 450 MB library, which come and go with the code paths run.) The model is the
   bert fixture with its word-embedding table padded with unused random rows
   (to 131072 rows, 16 MiB of f32), so that a model left behind per cycle
   would show clearly in the RSS; the reference inputs only use the original
   211 token ids and per-row scales are per row, so the reference holds.
2. The memory budget (--memory-budget-bytes), sized from measured numbers
   (ModelStatistics memory_usage of each model loaded alone in a daemon with
   no budget), memory tiers off: with room for one model but not two,
   loading B evicts the idle least recently used A (RepositoryIndex says
   why), and a request for A loads it again, evicting B; with a budget below
   any single model a load fails with RESOURCE_EXHAUSTED and a precise
   message while the daemon keeps serving.

Run by Bazel as:
  memory_lifecycle_integration_test.py CASTSERVE BERT_FILE CLIP_FILE
(BERT_FILE, CLIP_FILE: a file of models/testdata/bert and clip_vision)
(Debian's python3 with python3-grpcio, python3-protobuf and python3-numpy).
"""

import json
import os
import shutil
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.getcwd())  # the runfiles root holds proto/*_pb2.py
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402
import numpy as np  # noqa: E402
from proto import inference_pb2, inference_pb2_grpc  # noqa: E402

from daemon_testlib import (FP8_CASTING_WEIGHTS, Daemon,  # noqa: E402
                             add_model, raw_request, read_safetensors,
                             references,
                             response_arrays, write_file,
                             write_safetensors)

CASTSERVE = os.path.abspath(sys.argv[1])
BERT_DIR = os.path.dirname(os.path.abspath(sys.argv[2]))
CLIP_DIR = os.path.dirname(os.path.abspath(sys.argv[3]))
TOLERANCE = 1e-4
CALL_TIMEOUT_SECONDS = 60
CYCLES = 50
RSS_TOLERANCE = 0.05
# Freed memory glibc may keep at the top of an arena instead of returning it
# (the daemon's trim threshold, casting/memory/malloc_settings.cc: 8 MiB), for the
# two arenas a load and a forward leave warm. A model left behind per cycle
# (>4 MiB of fp8 storage each) passes this allowance by the fifth cycle.
ALLOCATOR_CACHE_BYTES = 2 * (8 << 20)
PADDED_VOCAB = 131072  # x 32 hidden x 4 bytes = 16 MiB of f32 embeddings.
REFERENCE_FORMAT = "roundtrip.F8_E4M3FN:per_row.output."

CASTING = FP8_CASTING_WEIGHTS + """
instance_group { kind: KIND_CPU count: 1 }
"""
BERT_CONFIG = "max_batch_size: 8\n" + CASTING
CLIP_CONFIG = "max_batch_size: 4\n" + CASTING
LAZY = "load_policy: LOAD_POLICY_FIRST_REQUEST\n"


def add_padded_bert(repository, name, config):
    """The bert fixture with PADDED_VOCAB word embeddings (extra rows random,
    never used by the reference inputs)."""
    model_dir = add_model(repository, name, BERT_DIR, config)
    weights = read_safetensors(os.path.join(BERT_DIR, "model.safetensors"))
    weights = {k: np.array(v) for k, v in weights.items()}
    table = weights["embeddings.word_embeddings.weight"]
    extra = np.random.default_rng(5).normal(
        0, 0.02, (PADDED_VOCAB - table.shape[0], table.shape[1]))
    weights["embeddings.word_embeddings.weight"] = np.concatenate(
        [table, extra.astype(np.float32)])
    write_safetensors(os.path.join(model_dir, "model.safetensors"), weights)
    with open(os.path.join(BERT_DIR, "config.json")) as f:
        hf_config = json.load(f)
    hf_config["vocab_size"] = PADDED_VOCAB
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        json.dump(hf_config, f)


def anon_rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                value, unit = line.split()[1:3]
                assert unit == "kB", line
                return int(value) * 1024
    raise AssertionError(f"no RssAnon in /proc/{pid}/status")


def mapped_files_under(pid, folder):
    """The files under `folder` that the process has mapped now."""
    mapped = set()
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and fields[5].strip().startswith(folder):
                mapped.add(fields[5].strip())
    return mapped


def mib(value):
    return f"{value / (1 << 20):.1f} MiB"


class Served:
    """A running daemon and a stub to it."""

    def __init__(self, repository, *flags):
        self.daemon = Daemon(CASTSERVE, f"--model-repository={repository}",
                             "--grpc-port=0", "--metrics-port=0",
                             "--http-port=0",
                             "--bind-address=127.0.0.1", *flags).wait_ready()
        self.channel = grpc.insecure_channel(
            f"127.0.0.1:{self.daemon.grpc_port}")
        self.stub = inference_pb2_grpc.GRPCInferenceServiceStub(self.channel)

    def close(self):
        self.channel.close()
        self.daemon.kill()

    def load(self, name):
        self.stub.RepositoryModelLoad(
            inference_pb2.RepositoryModelLoadRequest(model_name=name),
            timeout=CALL_TIMEOUT_SECONDS)

    def unload(self, name):
        self.stub.RepositoryModelUnload(
            inference_pb2.RepositoryModelUnloadRequest(model_name=name),
            timeout=CALL_TIMEOUT_SECONDS)

    def infer(self, name, inputs):
        return response_arrays(self.stub.ModelInfer(
            raw_request(name, inputs), timeout=CALL_TIMEOUT_SECONDS))

    def index(self):
        response = self.stub.RepositoryIndex(
            inference_pb2.RepositoryIndexRequest(), timeout=10)
        return {model.name: model for model in response.models}

    def memory_bytes(self, name):
        response = self.stub.ModelStatistics(
            inference_pb2.ModelStatisticsRequest(name=name), timeout=10)
        assert len(response.model_stats) == 1, response
        usage = response.model_stats[0].memory_usage
        assert [m.type for m in usage] == ["CPU"], usage
        return usage[0].byte_size


class MemoryLifecycleTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.repository = tempfile.mkdtemp(prefix="castserve-memory-")
        add_padded_bert(cls.repository, "bert_big", BERT_CONFIG + LAZY)
        add_model(cls.repository, "bert", BERT_DIR, BERT_CONFIG + LAZY)
        add_model(cls.repository, "clip", CLIP_DIR, CLIP_CONFIG + LAZY)
        cls.bert_inputs, cls.bert_outputs = references(BERT_DIR,
                                                       REFERENCE_FORMAT)
        cls.clip_inputs, cls.clip_outputs = references(CLIP_DIR,
                                                       REFERENCE_FORMAT)
        cls.reference = {"bert": (cls.bert_inputs, cls.bert_outputs),
                         "bert_big": (cls.bert_inputs, cls.bert_outputs),
                         "clip": (cls.clip_inputs, cls.clip_outputs)}

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.repository)

    def start(self, *flags):
        served = Served(self.repository, *flags)
        self.addCleanup(served.close)
        return served

    def assert_infers(self, served, name):
        inputs, expected = self.reference[name]
        outputs = served.infer(name, inputs)
        self.assertEqual(sorted(outputs), sorted(expected), name)
        for output, want in expected.items():
            got = outputs[output]
            self.assertEqual(got.shape, want.shape, f"{name} {output}")
            difference = float(np.max(np.abs(got - want)))
            self.assertLessEqual(difference, TOLERANCE, f"{name} {output}")

    def assert_state(self, served, name, state, reason=None):
        model = served.index()[name]
        self.assertEqual(model.state, state, f"{name}: {model.reason}")
        if reason is not None:
            self.assertIn(reason, model.reason, name)
        return model.reason

    # --- 1. unload frees the model's memory -------------------------------

    def run_cycles(self, served, names):
        """CYCLES x (load, infer, unload) of each of `names`; RssAnon by
        cycle, read right after the last unload of the cycle returns, when
        no file of the repository may still be mapped."""
        pid = served.daemon.process.pid
        for name in names:  # first_request: not loaded before cycle 1.
            self.assert_state(served, name, "UNAVAILABLE")
        rss, started = {}, time.monotonic()
        for cycle in range(1, CYCLES + 1):
            for name in names:
                served.load(name)
                self.assert_state(served, name, "READY")
                loaded_bytes = served.memory_bytes(name)
                self.assert_infers(served, name)
                served.unload(name)
                self.assert_state(served, name, "UNAVAILABLE", "unloaded")
                if cycle == 1:
                    print(f"{name} measured while loaded: {loaded_bytes} "
                          f"bytes", flush=True)
            rss[cycle] = anon_rss_bytes(pid)
            self.assertEqual(mapped_files_under(pid, self.repository), set(),
                             f"mapped after the unloads of cycle {cycle}")
        elapsed = time.monotonic() - started
        for cycle in (1, 10, 25, CYCLES):
            print(f"RssAnon after cycle {cycle}: {rss[cycle]} bytes "
                  f"({mib(rss[cycle])}, {rss[cycle] / rss[1] - 1:+.2%} "
                  f"vs cycle 1)", flush=True)
        print(f"{CYCLES} cycles of {'+'.join(names)} in {elapsed:.1f} s; "
              f"RssAnon min {mib(min(rss.values()))}, max "
              f"{mib(max(rss.values()))}", flush=True)
        for cycle, value in rss.items():
            self.assertLessEqual(abs(value - rss[1]),
                                 RSS_TOLERANCE * rss[1] + ALLOCATOR_CACHE_BYTES,
                                 f"RssAnon after cycle {cycle}: {value} vs "
                                 f"{rss[1]} after cycle 1")
        self.assertTrue(served.stub.ServerLive(
            inference_pb2.ServerLiveRequest()).live)
        return rss

    def test_cycles_of_the_fixture_models_keep_resident_memory_flat(self):
        """The issue's criterion as it stands: the committed fixtures, the
        daemon's allocator left at its defaults."""
        self.run_cycles(self.start(), ["bert", "clip"])

    def test_cycles_of_a_16_mib_model_keep_resident_memory_flat(self):
        """A model big enough that one left behind per cycle (>4 MiB of fp8
        storage, 16 MiB of mapped checkpoint) breaks the 5% bound at once.
        The daemon runs with glibc's default allocator settings: unload hands
        freed arenas back to the kernel (malloc_trim), so RssAnon shows what is
        live."""
        served = self.start()
        self.run_cycles(served, ["bert_big"])
        served.load("bert_big")
        self.assertGreater(served.memory_bytes("bert_big"), 4 << 20)

    # --- 2. the memory budget -----------------------------------------------

    def measure_alone(self):
        """Measured bytes of bert and clip, each loaded alone, no budget."""
        served = self.start()
        measured = {}
        for name in ("bert", "clip"):
            served.load(name)
            at_load = served.memory_bytes(name)
            self.assert_infers(served, name)
            after_infer = served.memory_bytes(name)
            served.unload(name)
            self.assertGreater(at_load, 0, name)
            measured[name] = max(at_load, after_infer)
            print(f"{name} measured alone: {at_load} bytes at load, "
                  f"{after_infer} after an inference", flush=True)
        served.close()
        return measured

    def test_memory_budget_evicts_lru_and_refuses_what_cannot_fit(self):
        measured = self.measure_alone()
        large, small = max(measured.values()), min(measured.values())
        budget = large + small // 2  # Room for one model, not for both.
        self.assertLess(budget, measured["bert"] + measured["clip"])
        print(f"budget fitting one model, not two: {budget} bytes",
              flush=True)

        # The LRU unload on its own: with memory tiers on, the budget demotes
        # an idle model before it unloads one (memory_budget_integration_test
        # and model_manager_tiers_test cover that).
        served = self.start(f"--memory-budget-bytes={budget}",
                            "--memory-tiers=false")
        # first_request models: nothing loaded yet.
        self.assert_state(served, "bert", "UNAVAILABLE")
        self.assert_state(served, "clip", "UNAVAILABLE")

        self.assert_infers(served, "bert")  # Loads bert on first request.
        self.assert_state(served, "bert", "READY")
        self.assert_infers(served, "clip")  # Loads clip, evicting bert.
        self.assert_state(served, "clip", "READY")
        reason = self.assert_state(served, "bert", "UNAVAILABLE",
                                   "memory budget")
        self.assertIn("evicted", reason)
        print(f"bert after clip loaded: UNAVAILABLE, {reason!r}", flush=True)
        self.assertLessEqual(served.memory_bytes("clip"), budget)

        self.assert_infers(served, "bert")  # Loads again, evicting clip.
        self.assert_state(served, "bert", "READY")
        self.assert_state(served, "clip", "UNAVAILABLE", "evicted")
        self.assertLessEqual(served.memory_bytes("bert"), budget)

        served.load("clip")  # An explicit load evicts the idle bert.
        self.assert_state(served, "clip", "READY")
        self.assert_state(served, "bert", "UNAVAILABLE", "evicted")
        self.assert_infers(served, "clip")
        self.assert_infers(served, "bert")
        self.assert_state(served, "clip", "UNAVAILABLE", "evicted")
        served.close()

        tiny = small // 2  # Below any single model.
        print(f"budget below any model: {tiny} bytes", flush=True)
        served = self.start(f"--memory-budget-bytes={tiny}")
        for name in ("bert", "clip"):
            with self.assertRaises(grpc.RpcError) as raised:
                served.load(name)
            error = raised.exception
            print(f"load {name} under {tiny}: {error.code()}: "
                  f"{error.details()}", flush=True)
            self.assertEqual(error.code(), grpc.StatusCode.RESOURCE_EXHAUSTED,
                             error.details())
            self.assertIn("memory budget exceeded", error.details())
            self.assertIn(f"model {name}", error.details())
            self.assertIn(f"budget {tiny} bytes", error.details())
            self.assertIn("alone needs", error.details())
            self.assert_state(served, name, "UNAVAILABLE",
                              "memory budget exceeded")
            self.assertFalse(served.stub.ModelReady(
                inference_pb2.ModelReadyRequest(name=name)).ready)
        # Still serving: liveness, readiness, metadata, the index.
        self.assertTrue(served.stub.ServerLive(
            inference_pb2.ServerLiveRequest()).live)
        self.assertTrue(served.stub.ServerReady(
            inference_pb2.ServerReadyRequest()).ready)
        served.stub.ServerMetadata(inference_pb2.ServerMetadataRequest())
        self.assertEqual(set(served.index()), {"bert", "bert_big", "clip"})
        self.assertIsNone(served.daemon.process.poll())


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]], verbosity=2)
