#!/usr/bin/python3
"""Experiment 3: serving throughput and latency against concurrency.

Starts the castserve daemon once per variant (dynamic batching on/off x
layerwise casting on/off) on a model repository written under --work-dir,
each serving one SigLIP-shaped checkpoint folder, and sweeps closed-loop
concurrency (each of C client threads sends its next ModelInfer when the
previous one returns). Per point: throughput (requests/s over the point's
wall time) and latency p50/p99 (ms, per request, client side). Then, as the
ceiling, the same forwards in-process: layerwise_casting_benchmark on the same
folder, the same configurations, the daemon's thread settings, batch 1 (and
the largest batch the batcher forms).

perf_analyzer is not used: PyPI's perf-analyzer is a placeholder without the
binary, and nothing else here provides it.

Usage (Debian's python3 has grpcio and protobuf):
  /usr/bin/python3 benchmarks/drivers/serving_load.py --castserve=BIN --bench=BIN
      --model=DIR [--concurrency=1,2,4,8,16,32] [--seconds=20]
      [--min-requests=8] [--variants=...] [--json=PATH]

Variants: batch-cast, batch-nocast, nobatch-cast, nobatch-nocast. "cast" is
fp8 e5m2 storage with bf16 compute (transient copies, prefetch, buffer
reuse); "nocast" keeps every weight resident in bf16 (bf16 storage, bf16
compute, cached). Timed work should run under `flock
/tmp/castserve_bench.lock`.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

MODEL = "siglip"
MAX_BATCH = 8
CASTING = {
    "cast": """  compute_copy: COMPUTE_COPY_TRANSIENT
  prefetch: true
  reuse_transient_buffers: true
  casting {
    storage_dtype: STORAGE_DTYPE_F8_E5M2
    compute_dtype: COMPUTE_DTYPE_BF16
  }""",
    # bf16 storage = bf16 compute: every weight resident in bf16, nothing
    # decoded per forward (a casting block needs a storage dtype, and without
    # one the compute dtype would be f32).
    "nocast": """  compute_copy: COMPUTE_COPY_CACHED
  casting {
    storage_dtype: STORAGE_DTYPE_BF16
    compute_dtype: COMPUTE_DTYPE_BF16
  }""",
}
# The in-process configuration of layerwise_casting_benchmark for each.
BENCH_CONFIG = {"cast": "cast/F8_E5M2/BF16", "nocast": "resident/BF16"}


def config_pbtxt(batching, casting):
    batch = (f"dynamic_batching {{ max_queue_delay_microseconds: 2000 }}\n"
             if batching else "")
    return (f'max_batch_size: {MAX_BATCH}\n'
            f'architecture: "siglip_vision_model"\n'
            f'load_policy: LOAD_POLICY_STARTUP\n'
            f'instance_group {{ kind: KIND_CPU count: 1 }}\n{batch}'
            f'weights {{\n  residency: RESIDENCY_RESIDENT\n'
            f'  materialization: MATERIALIZATION_EAGER\n{CASTING[casting]}\n}}\n')


def load_stubs(work_dir):
    """Generates proto/*_pb2*.py with protoc and imports them."""
    repo_root = os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
    out = os.path.join(work_dir, "stubs")
    os.makedirs(out, exist_ok=True)
    plugin = subprocess.check_output(["sh", "-c",
                                      "command -v grpc_python_plugin"],
                                     text=True).strip()
    subprocess.check_call(
        ["protoc", "-I.", f"--python_out={out}", f"--grpc_out={out}",
         f"--plugin=protoc-gen-grpc={plugin}", "proto/inference.proto",
         "proto/model_config.proto", "proto/health.proto"], cwd=repo_root)
    sys.path.insert(0, out)
    from proto import inference_pb2, inference_pb2_grpc
    return inference_pb2, inference_pb2_grpc


class Daemon:
    """castserve on free ports, read back from its 'ready' log line."""

    def __init__(self, binary, repository, log_path):
        self.log_path = log_path
        self.log = open(log_path, "w")
        self.process = subprocess.Popen(
            # The repository links the checkpoint's files in.
            [binary, f"--model-repository={repository}", "--grpc-port=0",
             "--metrics-port=0", "--allow-symlinks-outside-repository"],
            stdout=self.log, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout=300):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with open(self.log_path) as f:
                match = re.search(r'msg="castserve ready" grpc_port=(\d+)',
                                  f.read())
            if match:
                return int(match.group(1))
            if self.process.poll() is not None:
                raise RuntimeError("daemon exited; see " + self.log_path)
            time.sleep(0.2)
        raise RuntimeError("daemon not ready; see " + self.log_path)

    def stop(self):
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


def make_request(pb2, image_size):
    pixels = np.random.default_rng(1).standard_normal(
        (1, 3, image_size, image_size), dtype=np.float32)
    request = pb2.ModelInferRequest(model_name=MODEL)
    request.inputs.add(name="pixel_values", datatype="FP32",
                       shape=pixels.shape)
    request.raw_input_contents.append(pixels.astype("<f4").tobytes())
    return request


def sweep_point(stub, request, concurrency, seconds, min_requests):
    """Closed loop: C threads until `seconds` passed and `min_requests` done."""
    latencies, errors, lock = [], [], threading.Lock()
    start = time.monotonic()

    def client():
        while True:
            with lock:
                if (time.monotonic() - start >= seconds and
                        len(latencies) + len(errors) >= min_requests):
                    return
            t0 = time.monotonic()
            try:
                stub.ModelInfer(request, timeout=600)
                ok = True
            except Exception as error:  # noqa: BLE001 (counted, reported)
                ok, message = False, str(error)
            with lock:
                if ok:
                    latencies.append(time.monotonic() - t0)
                else:
                    errors.append(message)

    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - start
    ms = np.array(latencies) * 1e3
    return {"concurrency": concurrency, "requests": len(latencies),
            "errors": len(errors), "first_error": errors[0] if errors else None,
            "wall_s": round(wall, 3),
            "throughput_rps": round(len(latencies) / wall, 3),
            "p50_ms": round(float(np.percentile(ms, 50)), 1),
            "p99_ms": round(float(np.percentile(ms, 99)), 1),
            "min_ms": round(float(ms.min()), 1),
            "max_ms": round(float(ms.max()), 1)}


STAGES = ("success", "queue", "compute_input", "compute_infer",
          "compute_output")


def server_stats(stub, pb2):
    """The daemon's cumulative (count, ns) per stage of MODEL's requests."""
    response = stub.ModelStatistics(pb2.ModelStatisticsRequest(name=MODEL))
    stats = response.model_stats[0].inference_stats
    return {k: (getattr(stats, k).count, getattr(stats, k).ns) for k in STAGES}


def server_split_ms(before, after):
    """Mean ms per request of each stage between two server_stats."""
    split = {}
    for stage in STAGES:
        count = after[stage][0] - before[stage][0]
        ns = after[stage][1] - before[stage][1]
        split[stage + "_ms"] = round(ns / count / 1e6, 1) if count else None
    return split


def run_variant(args, pb2, pb2_grpc, variant, image_size):
    import grpc
    batching, casting = variant.split("-")
    repository = os.path.join(args.work_dir, "repo_" + variant)
    os.makedirs(os.path.join(repository, MODEL), exist_ok=True)
    model_dir = os.path.join(repository, MODEL)
    # checkpoint.path must be relative: link the checkpoint's files into the
    # model directory instead (an empty path means that directory).
    for name in ("config.json", "model.safetensors"):
        link = os.path.join(model_dir, name)
        if not os.path.lexists(link):
            os.symlink(os.path.abspath(os.path.join(args.model, name)), link)
    with open(os.path.join(model_dir, "config.pbtxt"), "w") as f:
        f.write(config_pbtxt(batching == "batch", casting))
    daemon = Daemon(args.castserve, repository,
                    os.path.join(args.work_dir, f"daemon_{variant}.log"))
    try:
        port = daemon.wait_ready()
        options = [("grpc.max_send_message_length", 64 << 20),
                   ("grpc.max_receive_message_length", 64 << 20)]
        channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=options)
        stub = pb2_grpc.GRPCInferenceServiceStub(channel)
        request = make_request(pb2, image_size)
        for _ in range(3):  # Warm-up: the casting hooks learn their order.
            stub.ModelInfer(request, timeout=600)
        points = []
        for concurrency in args.concurrency:
            before = server_stats(stub, pb2)
            point = sweep_point(stub, request, concurrency, args.seconds,
                                max(args.min_requests, 2 * concurrency))
            point["variant"] = variant
            point["server"] = server_split_ms(before, server_stats(stub, pb2))
            print(json.dumps(point), flush=True)
            points.append(point)
        channel.close()
        return points
    finally:
        daemon.stop()


def in_process(args, work_dir):
    """The ceiling: the same forwards without the server, same threads."""
    if args.in_process_json:
        with open(args.in_process_json) as f:
            return json.load(f)
    path = os.path.join(work_dir, "in_process.json")
    configs = ",".join(BENCH_CONFIG[v.split("-")[1]] for v in args.variants)
    configs = ",".join(dict.fromkeys(configs.split(",")))
    subprocess.check_call(
        [args.bench, f"--model={args.model}", f"--configs={configs}",
         f"--batches=1,{MAX_BATCH}", f"--runs=1:{args.in_process_runs},"
         f"{MAX_BATCH}:3", "--reuse_transient_buffers=true",
         f"--json={path}"])
    with open(path) as f:
        return json.load(f)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--castserve", required=True)
    parser.add_argument("--bench", required=True,
                        help="layerwise_casting_benchmark binary")
    parser.add_argument("--model", required=True)
    parser.add_argument("--concurrency", default="1,2,4,8,16,32")
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--min-requests", type=int, default=8)
    parser.add_argument("--in-process-runs", type=int, default=9)
    parser.add_argument("--in-process-json", default=None,
                        help="reuse an earlier in-process result")
    parser.add_argument("--variants", default="batch-cast,batch-nocast,"
                        "nobatch-cast,nobatch-nocast")
    parser.add_argument("--work-dir", default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    args.variants = args.variants.split(",")
    args.work_dir = args.work_dir or tempfile.mkdtemp(prefix="castserve-load-")
    os.makedirs(args.work_dir, exist_ok=True)
    with open(os.path.join(args.model, "config.json")) as f:
        image_size = json.load(f)["image_size"]
    pb2, pb2_grpc = load_stubs(args.work_dir)
    ceiling = in_process(args, args.work_dir)
    points = []
    for variant in args.variants:
        points += run_variant(args, pb2, pb2_grpc, variant, image_size)
    result = {"experiment": 3, "model": args.model, "image_size": image_size,
              "max_batch_size": MAX_BATCH, "seconds_per_point": args.seconds,
              "client": "benchmarks/drivers/serving_load.py (closed loop, grpcio)",
              "points": points, "in_process": ceiling}
    text = json.dumps(result, indent=1)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    print_summary(result)


def print_summary(result):
    ceiling = {}
    for r in result["in_process"]["results"]:
        for b in r["batches"]:
            ceiling[(r["config"], b["batch"])] = b["latency_median_s"] * 1e3
    print("\n| variant | concurrency | requests | throughput req/s | "
          "p50 ms | p99 ms |")
    print("|---|---:|---:|---:|---:|---:|")
    for p in result["points"]:
        print(f"| {p['variant']} | {p['concurrency']} | {p['requests']} | "
              f"{p['throughput_rps']:.2f} | {p['p50_ms']:.0f} | "
              f"{p['p99_ms']:.0f} |")
    print("\nin-process median ms:", {f"{k[0]} b{k[1]}": round(v)
                                     for k, v in ceiling.items()})
    for p in result["points"]:
        if p["concurrency"] != 1:
            continue
        base = ceiling.get((BENCH_CONFIG[p["variant"].split("-")[1]], 1))
        if base:
            ratio = p["p50_ms"] / base
            print(f"{p['variant']}: daemon p50 at concurrency 1 / in-process "
                  f"= {ratio:.3f} ({'met' if ratio <= 1.05 else 'NOT met'})")


if __name__ == "__main__":
    main()
