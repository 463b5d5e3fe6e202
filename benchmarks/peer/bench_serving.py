"""`run_peer.py serving`: castserve against KServe's Python model server on
the same all-MiniLM-L6-v2 checkpoint, under the same closed-loop gRPC load.

Four server processes run side by side, each serving one configuration, so
that each one's RSS is its own:

  castserve_f32  castserve, weights resident in f32, made at load (eager)
  castserve_fp8  castserve, the shipped deploy/model_repository/minilm config
                 (mapped checkpoint, lazy fp8 e4m3 per-row, transient f32)
  python_f32     python_server.py: transformers AutoModel, f32
  python_fp8     python_server.py with diffusers' apply_layerwise_casting
                 (fp8 e4m3 storage, f32 compute)

Both castserve configs keep the shipped config's serving settings
(max_batch_size 8, dynamic batching with a 1 ms window, one instance);
KServe's Python server has no batcher, so at concurrency > 1 castserve
batches and the Python server queues. That is part of what is compared.

Load: C client threads (tritonclient.grpc, one channel each), each sending its
next ModelInfer (batch 1, seq 128, output pooler_output) as soon as the last
returned. Windows are interleaved: for every round and concurrency, each
server in turn gets `--seconds` of load while the others idle.
"""

import os
import subprocess
import sys
import threading
import time

import numpy as np

import common

MODEL_F32 = "minilm_f32"
MODEL_FP8 = "minilm_fp8"
SHIPPED_CONFIG = os.path.join(common.REPO_ROOT, "deploy", "model_repository",
                              "minilm", "config.pbtxt")
F32_WEIGHTS = """weights {
  residency: RESIDENCY_RESIDENT
  materialization: MATERIALIZATION_EAGER
}
"""
SENTENCES = [
    "A man is playing a guitar on the street corner.",
    "The new movie is awesome and everyone should watch it.",
    "Castserve keeps model weights in a compact storage format.",
    "A woman is slicing tomatoes in a small kitchen.",
    "The stock market fell sharply after the announcement.",
    "Two dogs are running through a field of tall grass.",
    "Quantum computers may one day break today's encryption.",
    "The children built a sandcastle near the water.",
    "Please send me the report before the meeting tomorrow.",
    "A plane is taking off from a busy airport at dusk.",
    "He forgot his umbrella and got soaked on the way home.",
    "Researchers found a new species of frog in the rainforest.",
    "The orchestra rehearsed the symphony for three hours.",
    "An old bookshop on the corner sells rare first editions.",
    "The server answered every request within a few milliseconds.",
    "Snow covered the mountain pass, closing the road for days.",
]
PAIRS = [("castserve_f32", "python_f32"), ("castserve_fp8", "python_fp8"),
         ("castserve_fp8", "python_f32")]


def add_arguments(parser):
    parser.add_argument("--checkpoint", default=None,
                        help="all-MiniLM-L6-v2 folder (default: the one "
                             "setup_peer.sh unpacks, else "
                             "models/testdata/minilm/weights)")
    parser.add_argument("--concurrency", default="1,4,16",
                        help="comma-separated closed-loop concurrencies")
    parser.add_argument("--seconds", type=float, default=10.0,
                        help="length of one load window")
    parser.add_argument("--warmup-seconds", type=float, default=3.0)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--no-python-fp8", action="store_true",
                        help="leave out the diffusers fp8 Python server")


def default_checkpoint():
    unpacked = os.path.join(common.BENCH_DIR, "all-MiniLM-L6-v2")
    if os.path.exists(os.path.join(unpacked, "model.safetensors")):
        return unpacked
    return os.path.join(common.REPO_ROOT, "models", "testdata", "minilm",
                        "weights")


def make_repository(root, model, config_text, checkpoint):
    """<root>/<model>/config.pbtxt + hf -> checkpoint (symlink)."""
    model_dir = os.path.join(root, model)
    os.makedirs(model_dir)
    with open(os.path.join(model_dir, "config.pbtxt"), "w") as f:
        f.write(config_text)
    os.symlink(os.path.abspath(checkpoint), os.path.join(model_dir, "hf"))
    return root


def shipped_config():
    """deploy/model_repository/minilm/config.pbtxt as shipped."""
    with open(SHIPPED_CONFIG) as f:
        return f.read()


def f32_config():
    """The shipped config's serving settings with f32 weights resident."""
    shipped = shipped_config()
    head = shipped[:shipped.index("weights {")]
    lines = [l for l in head.splitlines() if not l.startswith("#")]
    return "\n".join(lines).strip() + "\n" + F32_WEIGHTS


def make_token_batches(checkpoint, seq_len, count=16, seed=0):
    """`count` requests of real token ids: consecutive sentences tokenized
    with the checkpoint's tokenizer, packed to `seq_len` tokens (no padding).
    Without tokenizer files: seeded random ids in [1000, 30000)."""
    try:
        from transformers import AutoTokenizer
        tokenizer = AutoTokenizer.from_pretrained(checkpoint)
        source = "tokenizer"
    except Exception:  # noqa: BLE001 (no tokenizer files: random ids)
        tokenizer, source = None, "random"
    batches = []
    rng = np.random.default_rng(seed)
    for i in range(count):
        if tokenizer is not None:
            text = " ".join(SENTENCES[(i + k) % len(SENTENCES)]
                            for k in range(len(SENTENCES)))
            ids = tokenizer(text, max_length=seq_len, truncation=True,
                            return_tensors="np")["input_ids"].astype(np.int64)
            while ids.shape[1] < seq_len:  # never for 16 sentences, but safe
                ids = np.concatenate([ids, ids], axis=1)[:, :seq_len]
        else:
            ids = rng.integers(1000, 30000, (1, seq_len), dtype=np.int64)
        batches.append({"input_ids": ids,
                        "attention_mask": np.ones_like(ids),
                        "token_type_ids": np.zeros_like(ids)})
    return batches, source


class Target:
    """One server under test and the gRPC clients that load it."""

    def __init__(self, label, child, port, model, startup_s, castserve):
        import tritonclient.grpc as grpcclient
        self.label, self.child, self.model = label, child, model
        self.url = f"127.0.0.1:{port}"
        self.startup_s, self.castserve = startup_s, castserve
        self.control = grpcclient.InferenceServerClient(self.url)
        self.clients = []
        self.serving_peak_rss = 0

    def client(self, i):
        import tritonclient.grpc as grpcclient
        while len(self.clients) <= i:
            self.clients.append(grpcclient.InferenceServerClient(self.url))
        return self.clients[i]

    def batch_counters(self):
        """(items, executions) castserve counted for the model; None for
        the Python server (it runs every request alone)."""
        if not self.castserve:
            return None
        stats = self.control.get_inference_statistics(self.model).model_stats
        return stats[0].inference_count, stats[0].execution_count


def make_inputs(batch):
    import tritonclient.grpc as grpcclient
    inputs = []
    for name, value in batch.items():
        tensor = grpcclient.InferInput(name, list(value.shape), "INT64")
        tensor.set_data_from_numpy(value)
        inputs.append(tensor)
    outputs = [grpcclient.InferRequestedOutput("pooler_output")]
    return inputs, outputs


def run_window(target, batches, concurrency, seconds, children):
    """Closed loop for `seconds`; returns the window's measurements."""
    latencies, errors, lock = [], [], threading.Lock()
    requests = [make_inputs(b) for b in batches]
    clients = [target.client(i) for i in range(concurrency)]
    start_gate = threading.Barrier(concurrency + 1)
    deadline = [0.0]

    def loop(index):
        client = clients[index]
        n = index
        start_gate.wait()
        while time.monotonic() < deadline[0]:
            inputs, outputs = requests[n % len(requests)]
            n += concurrency
            t0 = time.perf_counter()
            try:
                client.infer(target.model, inputs, outputs=outputs,
                             client_timeout=120)
                elapsed = time.perf_counter() - t0
                with lock:
                    latencies.append(elapsed)
            except Exception as error:  # noqa: BLE001 (counted, reported)
                with lock:
                    errors.append(str(error)[:300])

    threads = [threading.Thread(target=loop, args=(i,), daemon=True)
               for i in range(concurrency)]
    for t in threads:
        t.start()
    counters_before = target.batch_counters()
    cpu_before = common.proc_cpu_seconds(target.child.pid)
    with common.RssSampler(target.child.pid) as sampler, \
            common.ForeignCpu(children) as foreign:
        start = time.monotonic()
        deadline[0] = start + seconds
        start_gate.wait()
        for t in threads:
            t.join()
        wall = time.monotonic() - start
    cpu = common.proc_cpu_seconds(target.child.pid) - cpu_before
    counters_after = target.batch_counters()
    memory = common.proc_memory(target.child.pid)
    target.serving_peak_rss = max(target.serving_peak_rss, sampler.peak)
    done = len(latencies)
    result = {
        "target": target.label, "concurrency": concurrency,
        "requests": done, "errors": len(errors),
        "first_error": errors[0] if errors else None, "wall_s": wall,
        "throughput_rps": done / wall,
        "p50_ms": common.percentile(latencies, 50) * 1e3,
        "p99_ms": common.percentile(latencies, 99) * 1e3,
        "server_cpu_s": cpu,
        "server_cpu_ms_per_request": cpu / done * 1e3 if done else None,
        "peak_rss_bytes": sampler.peak, "vm_hwm_bytes": memory.get("VmHWM"),
        "foreign_cpu_share": foreign.share,
        "latencies_ms": [round(x * 1e3, 3) for x in latencies]}
    if counters_before and counters_after:
        items = counters_after[0] - counters_before[0]
        runs = counters_after[1] - counters_before[1]
        result["mean_batch"] = items / runs if runs else None
    return result


def start_targets(args, children, workdir):
    """Starts the four servers one after the other (startup is timed
    without competition); returns them in interleaving order."""
    python = sys.executable
    server_py = os.path.join(common.HERE, "python_server.py")
    targets = {}
    specs = [("castserve_f32", MODEL_F32, f32_config()),
             ("python_f32", MODEL_F32, "f32"),
             ("castserve_fp8", MODEL_FP8, shipped_config()),
             ("python_fp8", MODEL_FP8, "fp8")]
    if args.no_python_fp8:
        specs = [s for s in specs if s[0] != "python_fp8"]
    for label, model, config in specs:
        log = os.path.join(workdir, label + ".log")
        if label.startswith("castserve"):
            repo = make_repository(os.path.join(workdir, "repo_" + label),
                                   model, config, args.checkpoint)
            child, port, _, args.castserve_flag = common.start_castserve(
                children, args.castserve, repo, args.castserve_flag,
                args.threads, log, name=label)
        else:
            port = common.free_port()
            argv = [python, server_py, "--checkpoint", args.checkpoint,
                    "--name", model, "--grpc-port", str(port),
                    "--http-port", str(common.free_port()),
                    "--threads", str(args.threads), "--dtype", config]
            child = children.spawn(label, argv,
                                   common.thread_env(args.threads), log)
        target = Target(label, child, port, model, None,
                        label.startswith("castserve"))
        target.startup_s = common.wait_model_ready(target.control, model,
                                                   child)
        target.idle_rss = common.proc_memory(child.pid).get("VmRSS")
        print(f"  {label:14s} ready in {target.startup_s:6.2f} s, "
              f"RSS {common.mib(target.idle_rss):7.1f} MiB (pid {child.pid})",
              flush=True)
        targets[label] = target
    return [targets[label] for label in
            ("castserve_f32", "python_f32", "castserve_fp8", "python_fp8")
            if label in targets]


def measure_baselines(args, children, workdir):
    """RSS of each runtime with no model: castserve on an empty repository,
    and a Python process that imported what python_server.py imports
    (torch, transformers, kserve). Separates the runtimes' own footprint
    from the model's."""
    empty = os.path.join(workdir, "repo_empty")
    os.makedirs(empty)
    child, _, _, _ = common.start_castserve(
        children, args.castserve, empty, args.castserve_flag, args.threads,
        os.path.join(workdir, "castserve_empty.log"), name="castserve_empty")
    time.sleep(0.5)
    castserve_rss = common.proc_memory(child.pid).get("VmRSS")
    children.stop(child)
    probe = ("import re, torch, transformers, kserve\n"
             "print(re.search(r'VmRSS:\\s+(\\d+)', "
             "open('/proc/self/status').read()).group(1))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True,
                         text=True, env=common.thread_env(args.threads),
                         timeout=300)
    python_rss = int(out.stdout.split()[-1]) * 1024 if out.returncode == 0 \
        else None
    return {"castserve_no_model_rss_bytes": castserve_rss,
            "python_imports_only_rss_bytes": python_rss}


def check_outputs(targets, batch):
    """pooler_output of every server on one request, against python_f32's."""
    inputs, outputs = make_inputs(batch)
    results = {t.label: t.control.infer(t.model, inputs, outputs=outputs)
               .as_numpy("pooler_output") for t in targets}
    reference = results.get("python_f32")
    return {label: common.rel_l2(value, reference)
            for label, value in results.items()} if reference is not None \
        else {}


def summarize(windows, targets, concurrencies, rounds):
    """Per target and concurrency, and same-round ratios per pair."""
    by = {}
    for w in windows:
        by.setdefault((w["target"], w["concurrency"]), []).append(w)
    per_target = {}
    for (label, c), ws in by.items():
        lat = [x for w in ws for x in w["latencies_ms"]]
        per_target[f"{label}@{c}"] = {
            "target": label, "concurrency": c,
            "throughput_rps": common.summary([w["throughput_rps"] for w in ws]),
            "p50_ms": common.percentile(lat, 50),
            "p99_ms": common.percentile(lat, 99),
            "errors": sum(w["errors"] for w in ws),
            "server_cpu_ms_per_request": common.summary(
                [w["server_cpu_ms_per_request"] for w in ws]),
            "mean_batch": common.summary([w.get("mean_batch") for w in ws])}
    labels = {t.label: t for t in targets}
    ratios = {}
    for cs, py in PAIRS:
        if cs not in labels or py not in labels:
            continue
        for c in concurrencies:
            per_round = []
            for r in range(rounds):
                a = [w for w in by.get((cs, c), []) if w["round"] == r]
                b = [w for w in by.get((py, c), []) if w["round"] == r]
                if a and b and b[0]["throughput_rps"] > 0:
                    per_round.append(a[0]["throughput_rps"] /
                                     b[0]["throughput_rps"])
            ratios[f"throughput {cs}/{py}@{c}"] = common.summary(per_round)
        for key, attr in (("serving_peak_rss", "serving_peak_rss"),
                          ("vm_hwm", "final_hwm")):
            a, b = getattr(labels[cs], attr), getattr(labels[py], attr)
            ratios[f"{key} {cs}/{py}"] = a / b if a and b else None
    return per_target, ratios


def print_report(per_target, ratios, targets, concurrencies, baselines):
    rows = []
    for c in concurrencies:
        for t in targets:
            s = per_target.get(f"{t.label}@{c}")
            if not s:
                continue
            rows.append([c, t.label, common.fmt_summary(s["throughput_rps"], 1),
                         f"{s['p50_ms']:.1f}", f"{s['p99_ms']:.1f}",
                         s["errors"],
                         common.fmt_summary(s["server_cpu_ms_per_request"], 1),
                         common.fmt_summary(s["mean_batch"], 2)])
    common.print_table(
        "Serving (median over rounds, min-max; latency percentiles pooled)",
        ["conc", "server", "req/s", "p50 ms", "p99 ms", "errors",
         "server CPU ms/req", "mean batch"], rows)
    common.print_table(
        "Memory (MiB): RSS after startup, peak VmRSS sampled under load, "
        "VmHWM at the end (includes load-time peaks)",
        ["server", "startup s", "idle RSS", "serving peak RSS", "VmHWM"],
        [[t.label, f"{t.startup_s:.2f}", f"{common.mib(t.idle_rss):.1f}",
          f"{common.mib(t.serving_peak_rss):.1f}",
          f"{common.mib(t.final_hwm):.1f}"] for t in targets] +
        [[label, "", f"{common.mib(baselines[key]):.1f}", "", ""]
         for label, key in (
             ("castserve, no model", "castserve_no_model_rss_bytes"),
             ("python, imports only", "python_imports_only_rss_bytes"))])
    rows = []
    for cs, py in PAIRS:
        for c in concurrencies:
            s = ratios.get(f"throughput {cs}/{py}@{c}")
            if s:
                rows.append([f"throughput {cs} / {py}", f"c={c}",
                             common.fmt_summary(s, 3), ">= 1.0",
                             common.verdict(s["median"], ">=", 1.0)])
        for key in ("serving_peak_rss", "vm_hwm"):
            v = ratios.get(f"{key} {cs}/{py}")
            if v is not None:
                rows.append([f"{key} {cs} / {py}", "", f"{v:.3f}", "<= 0.5",
                             common.verdict(v, "<=", 0.5)])
    common.print_table("Ratios castserve / Python (same run; per-round "
                       "median (min-max) for throughput)",
                       ["ratio", "", "value", "target", ""], rows)


def run(args, children, workdir):
    common.wait_for_file(args.castserve, what="castserve binary")
    args.checkpoint = args.checkpoint or default_checkpoint()
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    result = {"subcommand": "serving", "args": common.args_dict(args),
              "environment": common.environment(args.castserve, args.threads)}
    batches, source = make_token_batches(args.checkpoint, args.seq_len)
    result["token_source"] = source
    print(f"checkpoint {args.checkpoint}; token ids from {source}; "
          f"seq {args.seq_len}, batch 1, threads {args.threads}")
    with common.bench_lock(not args.no_lock):
        print("starting servers (one at a time)")
        baselines = measure_baselines(args, children, workdir)
        result["runtime_baselines"] = baselines
        targets = start_targets(args, children, workdir)
        result["castserve_flags"] = args.castserve_flag
        for t in targets:
            run_window(t, batches, max(concurrencies), args.warmup_seconds,
                       children)
            run_window(t, batches, 1, args.warmup_seconds / 2, children)
        result["pooler_rel_err_vs_python_f32"] = check_outputs(
            targets, batches[0])
        windows = []
        for r in range(args.rounds):
            for c in concurrencies:
                for t in targets:
                    w = run_window(t, batches, c, args.seconds, children)
                    w["round"] = r
                    windows.append(w)
                    print(f"  round {r} c={c:<3d} {t.label:14s} "
                          f"{w['throughput_rps']:7.1f} req/s  p50 "
                          f"{w['p50_ms']:7.1f} ms  p99 {w['p99_ms']:7.1f}"
                          f" ms  errors {w['errors']}  others' CPU "
                          f"{w['foreign_cpu_share']:.0%}", flush=True)
    for t in targets:
        t.final_hwm = common.proc_memory(t.child.pid).get("VmHWM")
        if t.castserve:
            result.setdefault("castserve_metrics", {})[t.label] = \
                common.scrape_metrics(t.child.metrics_port)
    per_target, ratios = summarize(windows, targets, concurrencies,
                                   args.rounds)
    print("\npooler_output relative L2 error vs python_f32: " +
          ", ".join(f"{k} {v:.2e}" for k, v in
                    result["pooler_rel_err_vs_python_f32"].items()))
    print_report(per_target, ratios, targets, concurrencies, baselines)
    print("\n" + common.foreign_cpu_note(
        [w["foreign_cpu_share"] for w in windows]))
    result.update({
        "servers": {t.label: {"startup_s": t.startup_s,
                              "idle_rss_bytes": t.idle_rss,
                              "serving_peak_rss_bytes": t.serving_peak_rss,
                              "vm_hwm_bytes": t.final_hwm,
                              "pid": t.child.pid, "log": t.child.log_path}
                    for t in targets},
        "windows": windows, "summary": per_target, "ratios": ratios})
    common.write_json(args.out, result)
