#!/usr/bin/python3
"""Issue 28's many-model workload: one request stream replayed identically
against castserve with memory tiers, castserve with LRU unload only, and an
explicit load/unload client loop (what a Triton user writes: load on a miss,
unload the least recently used model while the loaded ones would not fit);
and, as mode "hot", castserve with no budget, where every model stays hot
once loaded: the latencies no memory policy can go under.

The repository (under --work-dir, every model its own copy of its
checkpoint, so no two models share page-cache pages):
- --embedders MiniLM-shaped embedding models (the all-MiniLM-L6-v2 folder,
  f32), their configurations cycling through: f32 resident; bf16 resident
  storage with cached f32 compute copies; fp8 e4m3fn per-row resident storage
  with transient f32 compute copies. Requests: REST infer, input_ids [1, 16].
- --decoders Llama-shaped generation models (the folder --llama, a bf16
  checkpoint written by gen_llama_checkpoint.py, for example --shape small),
  bf16 storage with cached f32 compute copies. Requests: REST generate,
  16 prompt ids, --new-tokens new ones, greedy.
Every model loads on its first request.

The budget: --budget-fraction of the sum of every model's bytes when hot
(each kind's bytes measured first by a daemon without a budget: its
ModelStatistics memory_usage after one request).

The stream (seeded, the same for every mode): Poisson arrivals at --rate
requests/s for --duration s, each to a model drawn from a Zipf popularity
(s = --zipf) over a seeded order of the models; every --burst-every s a burst
of --burst-size requests at once to one model of the least popular half.
Open loop: each request is sent at its time on its own thread (a pool of
--max-in-flight), whatever the ones before it are doing.

Popularity classes: "head" the first quarter of the ranks, "torso" the next
quarter, "tail" the other half (the cold models); "tail after first" are the
tail requests after their model's first one in the mode (a first request is
a load in every mode). Each mode prints and
writes: p50/p99/max latency per class, throughput, failures by status, and,
from /metrics sampled every --sample-ms, the largest sum of the models'
counted bytes (max of allocated and owned weight bytes per model; the
budget's own measure) against the budget, the samples over it, the peak
RssAnon of the daemon, and for the tiers mode the wake latency histogram
(castserve_wake_seconds) and the moves (castserve_tier_moves_total). From
the daemon's log: latency per class by the state each request found its
model in (hot, warm, cool, unloaded, ...), the timed promotions, and where
the slowest tail requests' time went.

Usage (from the repository root, after `bazel build //server:castserve`):
  python3 benchmarks/drivers/gen_llama_checkpoint.py --shape small --out /tmp/llama-small
  /usr/bin/python3 benchmarks/drivers/many_models_tiers.py \\
      --castserve=bazel-bin/server/castserve \\
      --minilm=models/testdata/minilm/weights --llama=/tmp/llama-small \\
      [--embedders=24 --decoders=6 --budget-fraction=0.25 --rate=8 \\
       --duration=60 --modes=tiers,lru,explicit,hot] [--json=PATH]
"""

import argparse
import concurrent.futures
import datetime
import http.client
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

EMBEDDER_KINDS = {
    "f32": "",
    "bf16": """weights {
  casting { storage_dtype: STORAGE_DTYPE_BF16 compute_dtype: COMPUTE_DTYPE_F32 }
}
""",
    "fp8": """weights {
  compute_copy: COMPUTE_COPY_TRANSIENT
  casting {
    storage_dtype: STORAGE_DTYPE_F8_E4M3FN
    compute_dtype: COMPUTE_DTYPE_F32
    scaling: SCALING_PER_ROW
  }
}
""",
}
DECODER_CONFIG = """weights {
  casting { storage_dtype: STORAGE_DTYPE_BF16 compute_dtype: COMPUTE_DTYPE_F32 }
}
generation { kv_cache_bytes: 33554432 max_sequences: 4 }
"""
OWNED_STATES = ("resident", "cached_compute", "transient_compute")
SAMPLE = re.compile(r'^(castserve_model_allocated_bytes|'
                    r'castserve_model_weight_bytes|castserve_model_tier|'
                    r'castserve_wake_seconds_(?:bucket|sum|count)|'
                    r'castserve_tier_moves_total)\{([^}]*)\} (\S+)$')
TIER_NAMES = {0: "hot", 1: "warm", 2: "cool"}
# The daemon's own timings of a request: enqueue to completion, the queue,
# the forward (sums and counts per model).
DURATION = re.compile(r'^castserve_(request|queue|compute)_duration_seconds_'
                      r'(sum|count)\{[^}]*model="([^"]*)"[^}]*\} (\S+)$')


def daemon_durations(text, class_of):
    """Mean ms per popularity class of the daemon's request, queue and
    compute durations (models unloaded meanwhile are not counted)."""
    totals = {}
    for line in text.splitlines():
        match = DURATION.match(line)
        if not match or match.group(3) not in class_of:
            continue
        part, stat, model, value = match.groups()
        key = (class_of[model], part)
        entry = totals.setdefault(key, {"sum": 0.0, "count": 0.0})
        entry[stat] += float(value)
    return {f"{c}_{part}_mean_ms": 1000 * e["sum"] / e["count"]
            for (c, part), e in sorted(totals.items()) if e["count"]}


def write_repository(root, minilm, llama, embedders, decoders):
    """Writes the models; returns [(name, kind)] with kind "embedder:<k>" or
    "decoder"."""
    models = []
    kinds = list(EMBEDDER_KINDS)
    for i in range(embedders):
        kind = kinds[i % len(kinds)]
        models.append((f"emb_{kind}_{i:02d}", f"embedder:{kind}",
                       EMBEDDER_KINDS[kind], minilm))
    for i in range(decoders):
        models.append((f"dec_{i:02d}", "decoder", DECODER_CONFIG, llama))
    for name, _, weights, checkpoint in models:
        folder = os.path.join(root, name)
        shutil.copytree(checkpoint, os.path.join(folder, "hf"))
        with open(os.path.join(folder, "config.pbtxt"), "w") as f:
            batching = "" if weights is DECODER_CONFIG else "max_batch_size: 8\n"
            f.write(batching + 'checkpoint { path: "hf" }\n'
                    'load_policy: LOAD_POLICY_FIRST_REQUEST\n'
                    'instance_group { kind: KIND_CPU count: 1 }\n' + weights)
    return [(name, kind) for name, kind, _, _ in models]


def timed_promotions(log, group=lambda fields: fields["from"]):
    """The daemon's timed promotions (its "memory tier promotion timed" log
    lines: each promotion that ran to its end off the request path), by
    `group` of the line's fields (the tier they started from):
    [(seconds, bytes built back)]."""
    found = {}
    for _, msg, fields in log_events(log):
        if msg == "memory tier promotion timed":
            found.setdefault(group(fields), []).append(
                (float(fields["seconds"]), int(fields["bytes"])))
    return found


def log_events(log):
    """[(unix time, msg, fields)] of the daemon's log lines with a model."""
    events = []
    for line in log.splitlines():
        fields = dict(re.findall(r'(\w+)=("[^"]*"|\S+)', line))
        if "ts" not in fields or "model" not in fields:
            continue
        when = datetime.datetime.strptime(
            fields["ts"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(
                tzinfo=datetime.timezone.utc).timestamp()
        events.append((when, fields.get("msg", "").strip('"'), fields))
    return events


def state_at(events, name, when):
    """The state model `name` was in at `when`, from the daemon's log events
    (its last lifecycle event before): "never loaded", "loading", "hot",
    "warm", "cool" or "evicted"."""
    state = "never loaded"
    for at, msg, fields in events:
        if at > when:
            break
        if fields["model"] != name:
            continue
        if msg == "loading model":
            state = "loading"
        elif msg == "model ready":
            state = "hot"
        elif msg in ("moved model to a colder memory tier",
                     "moved model to a warmer memory tier"):
            state = fields.get("to", "?")
        elif msg.startswith("evicted model"):
            state = "evicted"
    return state


def latency_by_found_state(timeline, log):
    """{class: {state the model was in when the request arrived: count, p50
    and p99 ms}}: how much of a class's latency is wakes and loads."""
    events = log_events(log)
    found = {}
    for start, end, name, popularity_class, _, error in timeline:
        if error is None:
            found.setdefault(popularity_class, {}).setdefault(
                state_at(events, name, start), []).append(1000 * (end - start))
    return {c: {state: {"n": len(ms), "p50_ms": float(np.percentile(ms, 50)),
                        "p99_ms": float(np.percentile(ms, 99))}
                for state, ms in sorted(states.items())}
            for c, states in found.items()}


def slowest_tail(timeline, log, kinds, count=5):
    """Where the slowest tail requests' time went, from the daemon's log: for
    each, the state its model was in when it arrived (state_at), and what
    the daemon did for any model while it ran (loads started, moves down,
    evictions)."""
    events = log_events(log)
    tail = sorted((r for r in timeline if r[3] == "tail" and r[5] is None),
                  key=lambda r: r[1] - r[0], reverse=True)[:count]
    found = []
    for start, end, name, _, first, _ in tail:
        during = [(msg, fields["model"]) for when, msg, fields in events
                  if start <= when <= end]
        found.append({
            "ms": 1000 * (end - start), "model": name, "kind": kinds[name],
            "first_request": first, "found": state_at(events, name, start),
            "loads_during": sum(m == "loading model" for m, _ in during),
            "own_load_during": ("loading model", name) in during,
            "moves_down_during": sum(
                m == "moved model to a colder memory tier" for m, _ in during),
            "evictions_during": sum(m.startswith("evicted model")
                                    for m, _ in during)})
    return found


def promotion_summary(found):
    """{group: count, median seconds, median and range of GB/s} of
    timed_promotions (groups whose promotions all took no time left out)."""
    summary = {}
    for key, promotions in found.items():
        rates = [b / s / 1e9 for s, b in promotions if s > 0]
        if not rates:
            continue
        summary[key] = {"count": len(promotions),
                        "median_s": statistics.median(s for s, _ in promotions),
                        "median_gb_per_s": statistics.median(rates),
                        "min_gb_per_s": min(rates),
                        "max_gb_per_s": max(rates)}
    return summary


class Daemon:
    def __init__(self, castserve, repository, *flags):
        self.log = tempfile.NamedTemporaryFile("w+", suffix=".log")
        self.process = subprocess.Popen(
            [castserve, f"--model-repository={repository}", "--grpc-port=0",
             "--metrics-port=0", "--http-port=0", "--bind-address=127.0.0.1",
             "--intra-op-threads=1",
             # One client address sends up to --max-in-flight at once.
             "--http-max-connections-per-ip=256", *flags],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with open(self.log.name) as f:
                match = re.search(r'msg="castserve ready" grpc_port=\d+ '
                                  r'metrics_port=(\d+) http_port=(\d+)',
                                  f.read())
            if match:
                self.metrics_port, self.http_port = map(int, match.groups())
                return
            if self.process.poll() is not None:
                raise SystemExit("daemon exited:\n" + self.output())
            time.sleep(0.05)
        raise SystemExit("daemon not ready:\n" + self.output())

    def close(self):
        self.process.kill()
        self.process.wait()

    def output(self):
        with open(self.log.name) as f:
            return f.read()

    def post(self, path, body, timeout):
        """(status, parsed JSON or text) of a REST POST."""
        connection = http.client.HTTPConnection("127.0.0.1", self.http_port,
                                                timeout=timeout)
        try:
            connection.request("POST", path, json.dumps(body),
                               {"Content-Type": "application/json"})
            reply = connection.getresponse()
            text = reply.read().decode()
        finally:
            connection.close()
        try:
            return reply.status, json.loads(text) if text else {}
        except ValueError:
            return reply.status, text

    def metrics(self):
        connection = http.client.HTTPConnection("127.0.0.1",
                                                self.metrics_port, timeout=10)
        try:
            connection.request("GET", "/metrics")
            return connection.getresponse().read().decode()
        finally:
            connection.close()

    def rss_anon(self):
        with open(f"/proc/{self.process.pid}/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f
                        if line.startswith("RssAnon:"))


def request_body(kind):
    ids = [int(i) for i in np.arange(16) % 500 + 100]
    if kind == "decoder":
        return "generate", {"input_ids": ids, "parameters": {
            "max_tokens": ARGS.new_tokens, "ignore_eos": True}}
    return "infer", {"inputs": [{"name": "input_ids", "datatype": "INT64",
                                 "shape": [1, 16], "data": ids}]}


def send(daemon, name, kind, timeout):
    endpoint, body = request_body(kind)
    return daemon.post(f"/v2/models/{name}/{endpoint}", body, timeout)


def parse_metrics(text):
    allocated, owned, tiers = {}, {}, {}
    wake, moves = {}, {}
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if not match:
            continue
        family, value = match.group(1), float(match.group(3))
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2)))
        if family == "castserve_model_allocated_bytes":
            allocated[labels["model"]] = value
        elif family == "castserve_model_weight_bytes":
            if labels.get("state") in OWNED_STATES:
                owned[labels["model"]] = (owned.get(labels["model"], 0) +
                                          value)
        elif family == "castserve_model_tier":
            tiers[labels["model"]] = TIER_NAMES.get(int(value), str(value))
        elif family.startswith("castserve_wake_seconds"):
            entry = wake.setdefault(labels.get("tier", "?"),
                                    {"buckets": {}, "sum": 0, "count": 0})
            if family.endswith("_bucket"):
                entry["buckets"][labels["le"]] = value
            else:
                entry[family.rsplit("_", 1)[1]] = value
        else:
            key = (f'{labels.get("from")}->{labels.get("to")} '
                   f'({labels.get("cause")})')
            moves[key] = moves.get(key, 0) + value
    counted = {m: max(allocated.get(m, 0), owned.get(m, 0))
               for m in set(allocated) | set(owned)}
    return counted, tiers, wake, moves


def schedule(models, args):
    """[(time, name, kind, class)], the same for every mode."""
    rng = np.random.default_rng(args.seed)
    order = [models[i] for i in rng.permutation(len(models))]
    ranks = np.arange(1, len(order) + 1)
    popularity = 1 / ranks ** args.zipf
    popularity /= popularity.sum()
    quarter = max(1, len(order) // 4)

    def popularity_class(rank):
        return ("head" if rank < quarter else
                "torso" if rank < 2 * quarter else "tail")

    events, now = [], 0.0
    while True:
        now += rng.exponential(1 / args.rate)
        if now >= args.duration:
            break
        index = rng.choice(len(order), p=popularity)
        events.append((now, *order[index], popularity_class(index)))
    burst_time = args.burst_every
    while burst_time < args.duration:
        index = int(rng.integers(len(order) // 2, len(order)))
        for _ in range(args.burst_size):
            events.append((burst_time, *order[index], "tail"))
        burst_time += args.burst_every
    events.sort(key=lambda event: event[0])
    return events, [name for name, _ in order]


class ExplicitController:
    """The client-side loop a Triton user writes: load on a miss, and first
    unload least recently used models until the loaded ones and the new one
    fit in the budget (by the bytes measured per kind)."""

    def __init__(self, daemon, model_bytes, budget):
        self.daemon, self.model_bytes, self.budget = daemon, model_bytes, budget
        # name -> kind; name -> requests in flight; name -> last use.
        self.loaded, self.in_flight, self.last_use = {}, {}, {}
        self.lock = threading.Condition()
        self.loads = self.unloads = 0

    def acquire(self, name, kind):
        with self.lock:
            while name not in self.loaded:
                held = sum(self.model_bytes[k] for k in self.loaded.values())
                if held + self.model_bytes[kind] <= self.budget:
                    self.loaded[name] = kind
                    status, reply = self.daemon.post(
                        f"/v2/repository/models/{name}/load", {}, 600)
                    self.loads += 1
                    if status != 200:
                        del self.loaded[name]
                        return f"load {status}: {str(reply)[:200]}"
                    break
                idle = [m for m in self.loaded if not self.in_flight.get(m)]
                if not idle:
                    self.lock.wait(0.05)
                    continue
                victim = min(idle, key=lambda m: self.last_use.get(m, 0))
                del self.loaded[victim]
                self.daemon.post(f"/v2/repository/models/{victim}/unload",
                                 {}, 600)
                self.unloads += 1
            self.in_flight[name] = self.in_flight.get(name, 0) + 1
            self.last_use[name] = time.monotonic()
            return None

    def release(self, name):
        with self.lock:
            self.in_flight[name] -= 1
            self.lock.notify_all()


def mode_flags(mode, budget):
    """castserve's flags in `mode`; "explicit" keeps to the budget itself, and
    "hot" has none (every model stays hot once loaded)."""
    return {"tiers": [f"--memory-budget-bytes={budget}"],
            "lru": [f"--memory-budget-bytes={budget}", "--memory-tiers=false"],
            "explicit": ["--memory-tiers=false"],
            "hot": []}[mode]


MODES = ("tiers", "lru", "explicit", "hot")


def run_mode(mode, root, models, model_bytes, budget, events, args):
    kinds = dict(models)
    flags = mode_flags(mode, budget)
    daemon = Daemon(args.castserve, root, *flags)
    controller = (ExplicitController(daemon, model_bytes, budget)
                  if mode == "explicit" else None)
    results, lock = [], threading.Lock()
    samples, stop = [], threading.Event()

    def sampler():
        while not stop.is_set():
            counted, tiers, _, _ = parse_metrics(daemon.metrics())
            samples.append((sum(counted.values()), len(counted),
                            daemon.rss_anon(),
                            sum(t != "hot" for t in tiers.values())))
            time.sleep(args.sample_ms / 1000)

    timeline = []  # (wall start, wall end, name, class, first, error)

    def one(event, first):
        _, name, kind, popularity_class = event
        wall_start = time.time()
        start = time.monotonic()
        error = controller.acquire(name, kind) if controller else None
        status = 0
        if error is None:
            try:
                status, reply = send(daemon, name, kind, args.timeout_seconds)
                if status != 200:
                    error = f"{status}: {str(reply)[:200]}"
            except OSError as failure:
                error = f"transport: {failure}"
            finally:
                if controller:
                    controller.release(name)
        with lock:
            results.append((popularity_class, time.monotonic() - start, error,
                            first))
            timeline.append((wall_start, time.time(), name, popularity_class,
                             first, error))

    sampling = threading.Thread(target=sampler)
    sampling.start()
    started = time.monotonic()
    seen = set()
    with concurrent.futures.ThreadPoolExecutor(args.max_in_flight) as pool:
        for event in events:
            delay = event[0] - (time.monotonic() - started)
            if delay > 0:
                time.sleep(delay)
            pool.submit(one, event, event[1] not in seen)
            seen.add(event[1])
    elapsed = time.monotonic() - started
    stop.set()
    sampling.join()
    final_metrics = daemon.metrics()
    _, _, wake, moves = parse_metrics(final_metrics)
    durations = daemon_durations(final_metrics,
                                 {e[1]: e[3] for e in events})
    log = daemon.output()
    daemon.close()

    report = {"mode": mode, "flags": flags, "elapsed_s": elapsed,
              "requests": len(results),
              "throughput_rps": sum(r[2] is None for r in results) /
              elapsed}
    # "tail_later": tail requests after their model's first in this mode
    # (which is a load in every mode): where the residency policy shows.
    for popularity_class in ("head", "torso", "tail", "tail_later", "all"):
        ms = np.array([t * 1000 for c, t, e, first in results
                       if e is None and (popularity_class in (c, "all") or
                                         (popularity_class == "tail_later" and
                                          c == "tail" and not first))])
        report[popularity_class] = {
            "n": int(ms.size),
            "mean_ms": float(ms.mean()) if ms.size else None,
            "p50_ms": float(np.percentile(ms, 50)) if ms.size else None,
            "p99_ms": float(np.percentile(ms, 99)) if ms.size else None,
            "max_ms": float(ms.max()) if ms.size else None}
    failures = {}
    for _, _, error, _ in results:
        if error:
            entry = failures.setdefault(error.split(":")[0], [0, error])
            entry[0] += 1
    report["failed"] = {k: {"count": n, "example": example}
                        for k, (n, example) in failures.items()}
    report.update({
        "budget_bytes": budget,
        "samples": len(samples),
        "max_counted_bytes": max(s[0] for s in samples),
        "samples_over_budget": sum(s[0] > budget for s in samples),
        "max_ready_models": max(s[1] for s in samples),
        "max_demoted_models": max(s[3] for s in samples),
        "peak_rss_anon_bytes": max(s[2] for s in samples),
        "wake_seconds": {tier: {"count": w["count"],
                                "mean_ms": 1000 * w["sum"] / w["count"]
                                if w["count"] else None,
                                "buckets": w["buckets"]}
                         for tier, w in wake.items()},
        "moves": moves,
        "daemon_durations": durations,
        # Promotions that built a model back to hot off the request path,
        # as the daemon timed them for its choice of demotions.
        "timed_promotions": promotion_summary(timed_promotions(log)),
        # The same by the models' kinds: how far their wake rates differ.
        "timed_promotions_by_kind": promotion_summary(timed_promotions(
            log, lambda fields: f"{kinds[fields['model']]} from "
                                f"{fields['from']}")),
        "slowest_tail": slowest_tail(timeline, log, kinds),
        "latency_by_found_state": latency_by_found_state(timeline, log),
        "loads": log.count('msg="loading model"'),
        "evictions": log.count("evicted model"),
    })
    if controller:
        report.update(client_loads=controller.loads,
                      client_unloads=controller.unloads)
    return report


def measure_model_bytes(root, models, args):
    """Bytes of one model of each kind when hot, from a daemon without a
    budget."""
    daemon = Daemon(args.castserve, root)
    sizes = {}
    try:
        for name, kind in models:
            if kind in sizes:
                continue
            status, reply = send(daemon, name, kind, 600)
            if status != 200:
                raise SystemExit(f"{name}: {status} {reply}")
            sizes[kind] = parse_metrics(daemon.metrics())[0][name]
    finally:
        daemon.close()
    return sizes


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--castserve", required=True)
    parser.add_argument("--minilm", required=True)
    parser.add_argument("--llama", default=None)
    parser.add_argument("--work-dir", default=None)
    parser.add_argument("--embedders", type=int, default=24)
    parser.add_argument("--decoders", type=int, default=6)
    parser.add_argument("--new-tokens", type=int, default=8)
    parser.add_argument("--budget-fraction", type=float, default=0.25)
    parser.add_argument("--rate", type=float, default=8)
    parser.add_argument("--duration", type=float, default=60)
    parser.add_argument("--burst-every", type=float, default=15)
    parser.add_argument("--burst-size", type=int, default=4)
    parser.add_argument("--zipf", type=float, default=1.1)
    parser.add_argument("--seed", type=int, default=28)
    parser.add_argument("--max-in-flight", type=int, default=64)
    parser.add_argument("--sample-ms", type=float, default=50)
    parser.add_argument("--timeout-seconds", type=float, default=120)
    parser.add_argument("--modes", default="tiers,lru,explicit")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    ARGS = args
    if args.decoders and not args.llama:
        parser.error("--decoders needs --llama (a gen_llama_checkpoint.py "
                     "folder)")
    unknown = [m for m in args.modes.split(",") if m not in MODES]
    if unknown:
        parser.error(f"--modes: unknown {', '.join(unknown)} (expected a "
                     f"comma-separated list of {', '.join(MODES)})")

    root = tempfile.mkdtemp(prefix="castserve-tiers-", dir=args.work_dir)
    try:
        models = write_repository(root, os.path.abspath(args.minilm),
                                  args.llama and os.path.abspath(args.llama),
                                  args.embedders, args.decoders)
        model_bytes = measure_model_bytes(root, models, args)
        all_hot = sum(model_bytes[kind] for _, kind in models)
        budget = int(args.budget_fraction * all_hot)
        events, order = schedule(models, args)
        result = {"castserve": args.castserve, "models": len(models),
                  "model_bytes_by_kind": model_bytes,
                  "all_hot_bytes": all_hot, "budget_bytes": budget,
                  "popularity_order": order, "events": len(events),
                  "args": vars(args), "modes": []}
        for mode in args.modes.split(","):
            report = run_mode(mode, root, models, model_bytes, budget,
                              events, args)
            result["modes"].append(report)
            print(json.dumps({k: report[k] for k in (
                "mode", "throughput_rps", "head", "torso", "tail",
                "tail_later", "failed",
                "max_counted_bytes", "samples_over_budget",
                "peak_rss_anon_bytes", "wake_seconds", "moves",
                "timed_promotions", "timed_promotions_by_kind",
                "slowest_tail", "latency_by_found_state",
                "daemon_durations")}, indent=1),
                flush=True)
    finally:
        shutil.rmtree(root)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    print_table(result)


def print_table(result):
    print(f"\nbudget {result['budget_bytes']:,} bytes = "
          f"{result['budget_bytes'] / result['all_hot_bytes']:.2f} of all "
          f"{result['models']} models hot ({result['all_hot_bytes']:,})")
    print("| mode | req/s | head p50/p99 ms | torso p50/p99 ms | tail p50/p99 "
          "ms | tail after first p50/p99 ms | failed | max counted / budget | "
          "over budget | peak RssAnon MiB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for m in result["modes"]:
        def pair(c):
            return (f"{m[c]['p50_ms']:.0f} / {m[c]['p99_ms']:.0f}"
                    if m[c]["n"] else "-")
        failed = sum(f["count"] for f in m["failed"].values())
        print(f"| {m['mode']} | {m['throughput_rps']:.2f} | {pair('head')} | "
              f"{pair('torso')} | {pair('tail')} | {pair('tail_later')} | "
              f"{failed} of "
              f"{m['requests']} | "
              f"{m['max_counted_bytes'] / m['budget_bytes']:.2f} | "
              f"{m['samples_over_budget']} of {m['samples']} | "
              f"{m['peak_rss_anon_bytes'] / 2**20:.0f} |")


ARGS = None

if __name__ == "__main__":
    sys.exit(main())
