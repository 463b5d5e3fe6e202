#!/usr/bin/python3
"""Issue 28's many-model scenario in miniature: is --memory-budget-bytes a
ceiling, and are requests lost while waiting could have made room?

Writes a repository under --work-dir of --models MiniLM-shaped embedding
models (the all-MiniLM-L6-v2 folder, hard-linked, so each model is its own
folder and checkpoint path with no copy on disk): all but four f32 resident
weights, two with bf16 and two with fp8 (e4m3fn, per-row) layerwise casting
(transient f32 compute copies), every one loaded on its first request. Then:

1. One daemon without a budget serves one request to the first f32 model;
   its ModelStatistics memory_usage is one model's bytes (M).
2. One daemon with --memory-budget-bytes = --budget-models x M serves a
   closed-loop stream: --clients threads, each sending --requests ModelInfer
   calls (input_ids [1, 16]) to models drawn from a Zipf popularity
   (s = --zipf, seeded per thread; the most popular model is an f32 one).
   A sampler thread scrapes /metrics every --sample-ms: the sum over models
   of max(castserve_model_allocated_bytes, owned castserve_model_weight_bytes)
   (what the budget counts of READY models), castserve_device_allocated_bytes
   {device="cpu"}, and the daemon's RssAnon from /proc.

Prints one JSON object: the budget, the largest sampled model bytes and
process bytes, the samples over the budget, failed requests by status code
(with one message each), latency p50/p99/max in ms, throughput. Run it with
the binary of each branch to compare (BENCHMARKS.md).

Usage (Debian's python3 has grpcio, protobuf and numpy; run from the
repository root so that proto/ resolves, after `bazel build //proto:py_grpc`):
  /usr/bin/python3 benchmarks/drivers/many_models_budget.py
      --castserve=bazel-bin/server/castserve
      --minilm=models/testdata/minilm/weights [--models=16]
      [--budget-models=4.5] [--clients=4] [--requests=100] [--json=PATH]
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import numpy as np

for path in ("bazel-bin", os.getcwd()):
    sys.path.insert(0, path)
import grpc  # noqa: E402
from proto import inference_pb2, inference_pb2_grpc  # noqa: E402

CAST = """weights {{
  compute_copy: COMPUTE_COPY_TRANSIENT
  casting {{
    storage_dtype: {storage}
    compute_dtype: COMPUTE_DTYPE_F32
{scaling}  }}
}}
"""
OWNED_STATES = ("resident", "cached_compute", "transient_compute")
SAMPLE = re.compile(r'^(castserve_model_allocated_bytes|'
                    r'castserve_model_weight_bytes|'
                    r'castserve_device_allocated_bytes)\{([^}]*)\} (\S+)$')


def model_kinds(count):
    """Name and weights block of each model: f32 first, 2 bf16, 2 fp8 last."""
    kinds = [(f"f32_{i:02d}", "") for i in range(count - 4)]
    kinds += [(f"bf16_{i}", CAST.format(storage="STORAGE_DTYPE_BF16",
                                        scaling="")) for i in range(2)]
    kinds += [(f"fp8_{i}", CAST.format(
        storage="STORAGE_DTYPE_F8_E4M3FN",
        scaling="    scaling: SCALING_PER_ROW\n")) for i in range(2)]
    return kinds


def link_tree(source, destination):
    os.makedirs(destination)
    for entry in os.listdir(source):
        from_path = os.path.join(source, entry)
        to_path = os.path.join(destination, entry)
        if os.path.isdir(from_path):
            link_tree(from_path, to_path)
        else:
            os.link(from_path, to_path)


def write_repository(root, minilm, count):
    names = []
    for name, weights in model_kinds(count):
        folder = os.path.join(root, name)
        link_tree(minilm, os.path.join(folder, "hf"))
        with open(os.path.join(folder, "config.pbtxt"), "w") as f:
            f.write('max_batch_size: 8\ncheckpoint { path: "hf" }\n'
                    'load_policy: LOAD_POLICY_FIRST_REQUEST\n'
                    'instance_group { kind: KIND_CPU count: 1 }\n' + weights)
        names.append(name)
    return names


class Daemon:
    def __init__(self, castserve, repository, *flags):
        self.log = tempfile.NamedTemporaryFile("w+", suffix=".log")
        self.process = subprocess.Popen(
            [castserve, f"--model-repository={repository}", "--grpc-port=0",
             "--metrics-port=0", "--http-port=off",
             "--bind-address=127.0.0.1", *flags],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with open(self.log.name) as f:
                match = re.search(r'msg="castserve ready" grpc_port=(\d+) '
                                  r'metrics_port=(\d+)', f.read())
            if match:
                self.grpc_port, self.metrics_port = map(int, match.groups())
                break
            if self.process.poll() is not None:
                raise SystemExit("daemon exited:\n" + open(self.log.name).read())
            time.sleep(0.05)
        else:
            raise SystemExit("daemon not ready")
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.grpc_port}")
        self.stub = inference_pb2_grpc.GRPCInferenceServiceStub(self.channel)

    def close(self):
        self.channel.close()
        self.process.kill()
        self.process.wait()

    def output(self):
        with open(self.log.name) as f:
            return f.read()


def infer_request(name, tokens):
    request = inference_pb2.ModelInferRequest(model_name=name)
    request.inputs.add(name="input_ids", datatype="INT64",
                       shape=list(tokens.shape))
    request.raw_input_contents.append(tokens.astype("<i8").tobytes())
    return request


def sample(daemon):
    with urllib.request.urlopen(
            f"http://127.0.0.1:{daemon.metrics_port}/metrics",
            timeout=10) as reply:
        text = reply.read().decode()
    allocated, owned, device = {}, {}, 0.0
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if not match:
            continue
        family, value = match.group(1), float(match.group(3))
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2)))
        if family == "castserve_device_allocated_bytes":
            if labels.get("device") == "cpu":
                device = value
        elif family == "castserve_model_allocated_bytes":
            allocated[labels["model"]] = value
        elif labels.get("state") in OWNED_STATES:
            owned[labels["model"]] = owned.get(labels["model"], 0) + value
    models = set(allocated) | set(owned)
    with open(f"/proc/{daemon.process.pid}/status") as f:
        rss = next(int(line.split()[1]) * 1024 for line in f
                   if line.startswith("RssAnon:"))
    return (sum(max(allocated.get(m, 0), owned.get(m, 0)) for m in models),
            device, rss, len(models))


def zipf_weights(count, s):
    weights = np.array([1 / (rank + 1) ** s for rank in range(count)])
    return weights / weights.sum()


def run_stream(daemon, names, args):
    tokens = (np.arange(16, dtype=np.int64) % 1000 + 1000).reshape(1, 16)
    popularity = zipf_weights(len(names), args.zipf)
    latencies, failures, lock = [], {}, threading.Lock()

    def client(index):
        rng = np.random.default_rng(args.seed + index)
        for _ in range(args.requests):
            name = names[rng.choice(len(names), p=popularity)]
            start = time.monotonic()
            try:
                daemon.stub.ModelInfer(infer_request(name, tokens),
                                       timeout=args.timeout_seconds)
                with lock:
                    latencies.append(time.monotonic() - start)
            except grpc.RpcError as error:
                with lock:
                    failures.setdefault(error.code().name,
                                        [0, error.details()])[0] += 1

    samples, stop = [], threading.Event()

    def sampler():
        while not stop.is_set():
            samples.append(sample(daemon))
            time.sleep(args.sample_ms / 1000)

    sampling = threading.Thread(target=sampler)
    sampling.start()
    clients = [threading.Thread(target=client, args=(i,))
               for i in range(args.clients)]
    start = time.monotonic()
    for thread in clients:
        thread.start()
    for thread in clients:
        thread.join()
    elapsed = time.monotonic() - start
    stop.set()
    sampling.join()
    return latencies, failures, samples, elapsed


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--castserve", required=True)
    parser.add_argument("--minilm", required=True)
    parser.add_argument("--work-dir", default=None)
    parser.add_argument("--models", type=int, default=16)
    parser.add_argument("--budget-models", type=float, default=4.5)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--requests", type=int, default=100,
                        help="requests per client")
    parser.add_argument("--zipf", type=float, default=1.1)
    parser.add_argument("--seed", type=int, default=28)
    parser.add_argument("--sample-ms", type=float, default=50)
    parser.add_argument("--timeout-seconds", type=float, default=60)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    root = tempfile.mkdtemp(prefix="castserve-many-", dir=args.work_dir)
    try:
        names = write_repository(root, os.path.abspath(args.minilm),
                                 args.models)
        alone = Daemon(args.castserve, root)
        tokens = np.arange(16, dtype=np.int64).reshape(1, 16) + 1000
        alone.stub.ModelInfer(infer_request(names[0], tokens), timeout=60)
        stats = alone.stub.ModelStatistics(
            inference_pb2.ModelStatisticsRequest(name=names[0]), timeout=10)
        model_bytes = stats.model_stats[0].memory_usage[0].byte_size
        alone.close()

        budget = int(args.budget_models * model_bytes)
        daemon = Daemon(args.castserve, root,
                        f"--memory-budget-bytes={budget}")
        latencies, failures, samples, elapsed = run_stream(daemon, names,
                                                           args)
        log = daemon.output()
        daemon.close()
    finally:
        shutil.rmtree(root)

    ms = np.array(latencies) * 1000 if latencies else np.zeros(1)
    result = {
        "castserve": args.castserve,
        "models": args.models, "clients": args.clients,
        "requests": args.clients * args.requests,
        "model_bytes": model_bytes, "budget_bytes": budget,
        "samples": len(samples),
        "max_model_bytes": max(s[0] for s in samples),
        "samples_over_budget": sum(s[0] > budget for s in samples),
        "max_ready_models": max(s[3] for s in samples),
        "max_process_cpu_bytes": max(s[1] for s in samples),
        "max_rss_anon_bytes": max(s[2] for s in samples),
        "succeeded": len(latencies),
        "failed": {code: {"count": count, "example": message[:300]}
                   for code, (count, message) in failures.items()},
        "p50_ms": float(np.percentile(ms, 50)),
        "p99_ms": float(np.percentile(ms, 99)),
        "max_ms": float(ms.max()),
        "requests_per_second": len(latencies) / elapsed,
        "evictions": log.count("evicted model"),
        "loads": log.count('msg="loading model"'),
        "loads_waited": log.count("load waits for memory"),
    }
    print(json.dumps(result, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
