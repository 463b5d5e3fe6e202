#!/usr/bin/python3
"""Soak test: the daemon under mixed valid and invalid traffic, model churn
and a checkpoint truncated under it, for a bounded time on loopback.

  bazel build //server:castserve //proto:py_grpc
  /usr/bin/python3 tools/soak.py --minutes 20 --out /tmp/soak.json

What runs at once, for --minutes:
- --clients threads, each sending ModelInfer requests: 60 % valid (to four
  models), 40 % invalid (wrong dtype, wrong rank, an unknown output, an
  unknown model, a malformed timeout parameter), each with a 30 s deadline;
- an admin thread reloading (with a new config), unloading and loading the
  model "churn" every 2 s;
- a thread truncating the checkpoint of "fragile" (mapped, transient compute
  copies) to half its size for 3 s every 15 s, then restoring it;
- a sampler reading the daemon's RSS, threads and file descriptors.

It passes when: the daemon never exits, no call hangs (DEADLINE_EXCEEDED on
our 30 s deadline), RSS at the end is within 5 % of RSS after the first
fifth of the run, every request to a model that is never unloaded is
counted exactly once in castserve_request_success_total /
castserve_request_failure_total with the status code the client saw, and
the daemon exits 0 on SIGTERM. It prints a table and writes JSON; its exit
status says whether it passed. Not run in CI (README, "Reliability").

Needs Debian's python3 with python3-grpcio, python3-protobuf and
python3-numpy, run from the repository root after the bazel build above.
"""

import argparse
import collections
import json
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bazel-bin"))  # proto/*_pb2.py
sys.path.insert(0, os.path.join(ROOT, "tests"))

import grpc  # noqa: E402
import numpy as np  # noqa: E402
from proto import inference_pb2, inference_pb2_grpc  # noqa: E402

from daemon_testlib import (FP8_CASTING_WEIGHTS, Daemon, add_model,  # noqa: E402,E501
                             raw_request, references)

BERT_DIR = os.path.join(ROOT, "models", "testdata", "bert")
CALL_DEADLINE_SECONDS = 30
BASE_CONFIG = "max_batch_size: 4\ndynamic_batching { }\n"
MAPPED_WEIGHTS = """
weights {
  residency: RESIDENCY_MAPPED
  materialization: MATERIALIZATION_LAZY
  compute_copy: COMPUTE_COPY_TRANSIENT
}
"""
# Never unloaded: their requests must all be in the metrics.
STEADY_MODELS = ("steady", "steady_fp8", "fragile")


def make_repository(folder):
    repository = os.path.join(folder, "models")
    os.makedirs(repository)
    add_model(repository, "steady", BERT_DIR, BASE_CONFIG)
    add_model(repository, "steady_fp8", BERT_DIR,
              BASE_CONFIG + FP8_CASTING_WEIGHTS)
    add_model(repository, "fragile", BERT_DIR, BASE_CONFIG + MAPPED_WEIGHTS)
    add_model(repository, "churn", BERT_DIR, BASE_CONFIG)
    return repository


class Tally:
    """Client-side counts: (model, status code name) -> calls."""

    def __init__(self):
        self.lock = threading.Lock()
        self.counts = collections.Counter()
        self.hangs = 0

    def add(self, model, code):
        with self.lock:
            self.counts[(model, code)] += 1
            if code == "DEADLINE_EXCEEDED":
                self.hangs += 1


def requests_for(inputs):
    """(model, request) makers: valid ones and ways to be refused."""
    ids = inputs["input_ids"]

    def valid(model):
        return model, raw_request(model, {"input_ids": ids})

    def wrong_dtype(model):
        request = raw_request(model, {"input_ids": ids})
        request.inputs[0].datatype = "FP32"
        return model, request

    def wrong_rank(model):
        request = raw_request(model, {"input_ids": ids})
        del request.inputs[0].shape[0]
        return model, request

    def unknown_output(model):
        request = raw_request(model, {"input_ids": ids})
        request.outputs.add(name="nope")
        return model, request

    def unknown_model(_):
        return "ghost", raw_request("ghost", {"input_ids": ids})

    def bad_timeout(model):
        request = raw_request(model, {"input_ids": ids})
        request.parameters["timeout"].string_param = "soon"
        return model, request

    return [(valid, 60), (wrong_dtype, 10), (wrong_rank, 8),
            (unknown_output, 8), (unknown_model, 7), (bad_timeout, 7)]


def client_loop(stub, makers, until, tally, seed):
    rng = random.Random(seed)
    kinds = [k for k, _ in makers]
    weights = [w for _, w in makers]
    models = list(STEADY_MODELS) + ["churn"]
    while time.monotonic() < until:
        kind = rng.choices(kinds, weights)[0]
        model, request = kind(rng.choice(models))
        # A malformed timeout is refused before any model takes it.
        counted_as = "" if kind.__name__ in ("bad_timeout",
                                             "unknown_model") else model
        try:
            stub.ModelInfer(request, timeout=CALL_DEADLINE_SECONDS)
            tally.add(counted_as, "OK")
        except grpc.RpcError as error:
            tally.add(counted_as, error.code().name)


def admin_loop(stub, until, log):
    rng = random.Random(7)
    while time.monotonic() < until:
        action = rng.choice(["reload", "unload", "load"])
        try:
            if action == "unload":
                stub.RepositoryModelUnload(
                    inference_pb2.RepositoryModelUnloadRequest(
                        model_name="churn"), timeout=60)
            else:
                request = inference_pb2.RepositoryModelLoadRequest(
                    model_name="churn")
                if action == "reload":
                    request.parameters["config"].string_param = json.dumps(
                        {"max_batch_size": rng.choice([2, 4, 8])})
                stub.RepositoryModelLoad(request, timeout=60)
            log[action + "_ok"] += 1
        except grpc.RpcError as error:
            log[f"{action}_{error.code().name}"] += 1
        time.sleep(2)


def truncate_loop(path, until, log):
    with open(path, "rb") as f:
        original = f.read()
    while time.monotonic() < until:
        time.sleep(12)
        with open(path, "r+b") as f:
            f.truncate(len(original) // 2)
        log["truncated"] += 1
        time.sleep(3)
        with open(path, "r+b") as f:
            f.write(original)
        log["restored"] += 1


def proc_status(pid):
    values = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            values[key] = value.split()[0] if value.split() else ""
    return {"rss_bytes": int(values["VmRSS"]) * 1024,
            "threads": int(values["Threads"]),
            "fds": len(os.listdir(f"/proc/{pid}/fd"))}


def metric_counts(text):
    """{(model, code): count} from the success and failure counters."""
    counts = collections.Counter()
    for line in text.splitlines():
        match = re.match(r"castserve_request_(success|failure)_total"
                         r"(\{[^}]*\})? (\S+)", line)
        if not match:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2) or ""))
        code = "OK" if match.group(1) == "success" else labels["reason"]
        counts[(labels.get("model", ""), code)] += int(float(match.group(3)))
    return counts


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--castserve", default=os.path.join(
        ROOT, "bazel-bin", "server", "castserve"))
    parser.add_argument("--minutes", type=float, default=20)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--out", default="/tmp/castserve_soak.json")
    args = parser.parse_args()

    folder = tempfile.mkdtemp(prefix="castserve-soak-")
    binary = os.path.join(folder, "castserve")
    shutil.copy(args.castserve, binary)  # A rebuild must not pull it away.
    repository = make_repository(folder)
    daemon = Daemon(binary, f"--model-repository={repository}",
                    "--grpc-port=0", "--metrics-port=0",
                    "--http-port=0",
                    "--shutdown-grace-seconds=5").wait_ready()
    pid = daemon.process.pid
    channel = grpc.insecure_channel(f"127.0.0.1:{daemon.grpc_port}")
    stub = inference_pb2_grpc.GRPCInferenceServiceStub(channel)
    inputs, _ = references(BERT_DIR)
    makers = requests_for(inputs)

    start = time.monotonic()
    until = start + args.minutes * 60
    tally = Tally()
    events = collections.Counter()
    threads = [threading.Thread(target=client_loop,
                                args=(stub, makers, until, tally, i))
               for i in range(args.clients)]
    threads.append(threading.Thread(target=admin_loop,
                                    args=(stub, until, events)))
    threads.append(threading.Thread(target=truncate_loop, args=(
        os.path.join(repository, "fragile", "model.safetensors"), until,
        events)))
    for thread in threads:
        thread.start()
    samples = []
    while time.monotonic() < until and daemon.process.poll() is None:
        samples.append({"t": round(time.monotonic() - start, 1),
                        **proc_status(pid)})
        time.sleep(5)
    for thread in threads:
        thread.join()
    alive = daemon.process.poll() is None
    # Scrape what the daemon counted, then stop it.
    metrics = ""
    if alive:
        with urllib.request.urlopen(
                f"http://127.0.0.1:{daemon.metrics_port}/metrics",
                timeout=30) as response:
            metrics = response.read().decode()
        samples.append({"t": round(time.monotonic() - start, 1),
                        **proc_status(pid)})
    channel.close()
    exit_code = None
    if alive:
        daemon.process.send_signal(signal.SIGTERM)
        exit_code = daemon.process.wait(timeout=30)
    daemon.kill()

    counted = metric_counts(metrics)
    mismatches = {}
    for (model, code), sent in tally.counts.items():
        if model in STEADY_MODELS and counted[(model, code)] != sent:
            mismatches[f"{model} {code}"] = {"sent": sent,
                                            "counted": counted[(model, code)]}
    for (model, code), seen in counted.items():
        if model in STEADY_MODELS and (model, code) not in tally.counts:
            mismatches[f"{model} {code}"] = {"sent": 0, "counted": seen}
    baseline = next((s for s in samples if s["t"] >= args.minutes * 12),
                    samples[0])
    drift = samples[-1]["rss_bytes"] / baseline["rss_bytes"] - 1
    total = sum(tally.counts.values())
    result = {
        "minutes": args.minutes, "clients": args.clients,
        "requests": total,
        "requests_per_second": round(total / (args.minutes * 60), 1),
        "by_model_and_code": {f"{m or '(unrouted)'} {c}": n for (m, c), n
                              in sorted(tally.counts.items())},
        "events": dict(events), "hangs": tally.hangs,
        "daemon_alive_at_end": alive, "sigterm_exit_code": exit_code,
        "rss_baseline_bytes": baseline["rss_bytes"],
        "rss_end_bytes": samples[-1]["rss_bytes"],
        "rss_drift": round(drift, 4),
        "threads_start_end": [samples[0]["threads"], samples[-1]["threads"]],
        "fds_start_end": [samples[0]["fds"], samples[-1]["fds"]],
        "accounting_mismatches": mismatches, "samples": samples,
    }
    checks = {
        "no crash": alive,
        "no hang": tally.hangs == 0,
        "RSS drift under 5 %": abs(drift) < 0.05,
        "every steady request counted once": not mismatches,
        "SIGTERM exits 0": exit_code == 0,
    }
    result["checks"] = checks
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"{total} requests in {args.minutes} min "
          f"({result['requests_per_second']}/s), {args.clients} clients")
    for key, value in result["by_model_and_code"].items():
        print(f"  {key:40s} {value}")
    print(f"events: {dict(events)}")
    print(f"RSS {baseline['rss_bytes'] >> 20} MiB after "
          f"{baseline['t']:.0f} s -> {samples[-1]['rss_bytes'] >> 20} MiB "
          f"at the end ({drift:+.2%}); threads "
          f"{result['threads_start_end']}, fds {result['fds_start_end']}")
    for name, ok in checks.items():
        print(f"{'PASS' if ok else 'FAIL'}  {name}")
    if mismatches:
        print(f"accounting mismatches: {mismatches}")
    print(f"wrote {args.out}")
    shutil.rmtree(folder, ignore_errors=True)
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
