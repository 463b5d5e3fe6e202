"""`run_peer.py llama`: a Llama-1B-shaped bf16 checkpoint computed in f32,
16 tokens, castserve's lazy upcast against transformers' eager load.

  python    a fresh process (llama_python.py): import torch + transformers,
            AutoModelForCausalLM.from_pretrained(DIR, dtype=torch.float32)
            (every weight read and upcast at load), two forwards
  castserve a fresh daemon whose model has LOAD_POLICY_FIRST_REQUEST (nothing
            loaded at startup); RepositoryModelLoad, then two ModelInfer.
            Weights: the mapped bf16 checkpoint is the storage, each tensor
            upcast to f32 at first use and kept (COMPUTE_COPY_CACHED)

Timed per side: process startup (castserve: spawn to its 'ready' line;
Python: spawn to torch + transformers imported), load (castserve: the
RepositoryModelLoad call; Python: from_pretrained), first and second forward
(castserve: ModelInfer round trips, the 16 x 128256 f32 logits included;
Python: the forward). Each round runs one process per side, alternating
which goes first, with the page cache warm (every shard read before each
process). Ratios are per round, then the median.

The checkpoint is made by benchmarks/drivers/gen_llama_checkpoint.py (2.5 GB under
/tmp/castserve-bench/) unless it exists.
"""

import glob
import json
import os
import subprocess
import sys
import time

import numpy as np

import common

MODEL = "llama"
# The lazy upcast: the checkpoint's mapped bf16 pages are the storage, each
# weight's f32 copy is made at first use and kept (benchmarks/lazy_load_benchmark's
# lazy_cached mode). No casting block: the storage stays the checkpoint's
# dtype and the compute dtype defaults to f32 (castserve refuses a casting
# block without storage_dtype).
WEIGHTS = """weights {
  residency: RESIDENCY_MAPPED
  materialization: MATERIALIZATION_LAZY
  compute_copy: COMPUTE_COPY_CACHED
}
"""
# The same with the casting spelled out, storage_dtype = the checkpoint's
# bf16. castserve then applies its casting policy and makes a resident bf16
# copy of every castable weight at first use on top of the f32 copy (2.5 GB
# more memory, a slower first forward); --explicit-bf16-storage measures it.
EXPLICIT_CASTING = """  casting {
    storage_dtype: STORAGE_DTYPE_BF16
    compute_dtype: COMPUTE_DTYPE_F32
  }
"""
GENERATOR = os.path.join(common.REPO_ROOT, "benchmarks", "drivers",
                         "gen_llama_checkpoint.py")


def add_arguments(parser):
    parser.add_argument("--checkpoint",
                        default=os.path.join(common.BENCH_DIR, "llama-1b"),
                        help="Llama-shaped bf16 folder; made if missing")
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--prefetch", action="store_true",
                        help="castserve: also decode the next module's "
                             "weights on a background thread")
    parser.add_argument("--explicit-bf16-storage", action="store_true",
                        help="castserve: spell storage_dtype BF16 in the "
                             "casting block (see EXPLICIT_CASTING)")
    parser.set_defaults(rounds=2)


def ensure_checkpoint(path):
    """Runs the repository's generator unless the folder is complete."""
    if os.path.exists(os.path.join(path, "config.json")) and \
            glob.glob(os.path.join(path, "*.safetensors")):
        return False
    print(f"writing the Llama-1B-shaped checkpoint to {path} (2.5 GB)")
    subprocess.run([sys.executable, GENERATOR, "--shape", "1b", "--out", path],
                   check=True)
    return True


def castserve_config(prefetch, explicit_bf16_storage):
    """config.pbtxt of the llama model (not loaded until asked)."""
    weights = WEIGHTS
    if prefetch:
        weights = weights.replace("\n}", "\n  prefetch: true\n}")
    if explicit_bf16_storage:
        weights = weights.replace("\n}", "\n" + EXPLICIT_CASTING.rstrip("\n")
                                  + "\n}")
    return ('max_batch_size: 1\n'
            'checkpoint { path: "hf" }\n'
            'architecture: "llama"\n'
            'load_policy: LOAD_POLICY_FIRST_REQUEST\n'
            'instance_group { kind: KIND_CPU count: 1 }\n' + weights)


def warm_page_cache(path):
    """Reads every shard once so that both sides start from a warm cache."""
    for shard in sorted(glob.glob(os.path.join(path, "*.safetensors"))):
        with open(shard, "rb") as f:
            while f.read(64 << 20):
                pass


def token_ids(checkpoint, count, seed):
    with open(os.path.join(checkpoint, "config.json")) as f:
        vocab = json.load(f)["vocab_size"]
    rng = np.random.default_rng(seed)
    return rng.integers(0, vocab, (1, count), dtype=np.int64)


def measure_castserve(args, children, repo, workdir, ids, round_index):
    """One daemon: startup, load call, two forwards; returns a record."""
    import tritonclient.grpc as grpcclient
    child, port, startup, flags = common.start_castserve(
        children, args.castserve, repo, args.castserve_flag, args.threads,
        os.path.join(workdir, f"castserve_{round_index}.log"))
    args.castserve_flag = flags
    try:
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
        record = {"side": "castserve", "startup_s": startup}
        t0 = time.perf_counter()
        client.load_model(MODEL)
        record["load_s"] = time.perf_counter() - t0
        record["vm_hwm_after_load_bytes"] = common.proc_memory(
            child.pid).get("VmHWM")
        tensor = grpcclient.InferInput("input_ids", list(ids.shape), "INT64")
        tensor.set_data_from_numpy(ids)
        outputs = [grpcclient.InferRequestedOutput("logits")]
        for name in ("first_forward_s", "second_forward_s"):
            stats0 = compute_infer_ns(client)
            cpu0 = common.proc_cpu_seconds(child.pid)
            t0 = time.perf_counter()
            result = client.infer(MODEL, [tensor], outputs=outputs,
                                  client_timeout=600)
            record[name] = time.perf_counter() - t0
            record[name.replace("_s", "_cpu_s")] = \
                common.proc_cpu_seconds(child.pid) - cpu0
            # The daemon's own forward time (ModelStatistics compute_infer),
            # to tell the forward from the round trip around it.
            record[name.replace("_s", "_server_compute_s")] = \
                (compute_infer_ns(client) - stats0) / 1e9
        record["vm_hwm_bytes"] = common.proc_memory(child.pid).get("VmHWM")
        record["metrics"] = common.scrape_metrics(child.metrics_port)
        record["last_logits"] = result.as_numpy("logits")[0, -1]
        return record
    finally:
        children.stop(child)


def compute_infer_ns(client):
    """Cumulative compute_infer nanoseconds castserve reports for MODEL."""
    stats = client.get_inference_statistics(MODEL).model_stats
    return stats[0].inference_stats.compute_infer.ns if stats else 0


def measure_python(args, children, workdir, ids, round_index):
    """One llama_python.py process; returns its record."""
    out = os.path.join(workdir, f"python_{round_index}.json")
    logits = os.path.join(workdir, f"python_{round_index}.npy")
    argv = [sys.executable, os.path.join(common.HERE, "llama_python.py"),
            "--checkpoint", args.checkpoint,
            "--tokens", ",".join(str(int(t)) for t in ids[0]),
            "--threads", str(args.threads), "--out", out, "--logits", logits]
    child = None
    try:
        argv += ["--spawned", repr(time.time())]
        child = children.spawn("python_llama", argv,
                               common.thread_env(args.threads),
                               os.path.join(workdir,
                                            f"python_{round_index}.log"))
        code = child.process.wait()
        if code != 0:
            raise RuntimeError(f"llama_python.py exited {code}:\n"
                               f"{child.log_text()[-3000:]}")
        with open(out) as f:
            record = json.load(f)
        record["side"] = "python"
        record["last_logits"] = np.load(logits)
        return record
    finally:
        if child is not None:
            children.stop(child)


def run(args, children, workdir):
    common.wait_for_file(args.castserve, what="castserve binary")
    ensure_checkpoint(args.checkpoint)
    result = {"subcommand": "llama", "args": common.args_dict(args),
              "environment": common.environment(args.castserve, args.threads),
              "castserve_config": castserve_config(
                  args.prefetch, args.explicit_bf16_storage)}
    repo = os.path.join(workdir, "repo")
    os.makedirs(os.path.join(repo, MODEL))
    with open(os.path.join(repo, MODEL, "config.pbtxt"), "w") as f:
        f.write(result["castserve_config"])
    os.symlink(os.path.abspath(args.checkpoint),
               os.path.join(repo, MODEL, "hf"))
    ids = token_ids(args.checkpoint, args.tokens, args.seed)
    records = []
    with common.bench_lock(not args.no_lock):
        for r in range(args.rounds):
            order = ("castserve", "python") if r % 2 == 0 else \
                ("python", "castserve")
            for side in order:
                warm_page_cache(args.checkpoint)
                with common.ForeignCpu(children) as foreign:
                    if side == "castserve":
                        rec = measure_castserve(args, children, repo,
                                                workdir, ids, r)
                    else:
                        rec = measure_python(args, children, workdir, ids,
                                             r)
                rec["round"] = r
                rec["foreign_cpu_share"] = foreign.share
                records.append(rec)
                print(f"  round {r} {side:9s} startup "
                      f"{rec['startup_s']:6.2f} s  load "
                      f"{rec['load_s']:6.3f} s  first "
                      f"{rec['first_forward_s']:6.2f} s  second "
                      f"{rec['second_forward_s']:6.2f} s  VmHWM "
                      f"{common.mib(rec['vm_hwm_bytes']):8.1f} MiB  "
                      f"others' CPU {foreign.share:.0%}", flush=True)
    result["castserve_flags"] = args.castserve_flag
    result["logits_rel_err"] = [
        common.rel_l2(c["last_logits"], p["last_logits"])
        for c, p in pairs_by_round(records)]
    for rec in records:
        rec.pop("last_logits")
    result["records"] = records
    result["summary"], result["ratios"] = report(records, result)
    common.write_json(args.out, result)


def pairs_by_round(records):
    """(castserve record, python record) of each complete round."""
    rounds = {}
    for rec in records:
        rounds.setdefault(rec["round"], {})[rec["side"]] = rec
    return [(v["castserve"], v["python"]) for _, v in sorted(rounds.items())
            if len(v) == 2]


def report(records, result):
    """Prints the stage and ratio tables; returns (summary, ratios)."""
    stages = ("startup_s", "load_s", "first_forward_s", "second_forward_s",
              "first_forward_cpu_s", "second_forward_cpu_s",
              "first_forward_server_compute_s",
              "second_forward_server_compute_s")
    summary = {}
    for side in ("castserve", "python"):
        mine = [r for r in records if r["side"] == side]
        summary[side] = {s: common.summary([r.get(s) for r in mine])
                         for s in stages}
        summary[side]["load_plus_first_s"] = common.summary(
            [r["load_s"] + r["first_forward_s"] for r in mine])
        summary[side]["startup_load_first_s"] = common.summary(
            [r["startup_s"] + r["load_s"] + r["first_forward_s"]
             for r in mine])
        summary[side]["vm_hwm_bytes"] = common.summary(
            [r["vm_hwm_bytes"] for r in mine])
    pairs = pairs_by_round(records)

    def ratio(fn):
        return common.summary([fn(c) / fn(p) for c, p in pairs])

    ratios = {
        "second_forward": ratio(lambda r: r["second_forward_s"]),
        "load_plus_first": ratio(lambda r: r["load_s"] + r["first_forward_s"]),
        "startup": ratio(lambda r: r["startup_s"]),
        "startup_load_first": ratio(lambda r: r["startup_s"] + r["load_s"] +
                                    r["first_forward_s"]),
        "first_forward": ratio(lambda r: r["first_forward_s"]),
        "second_forward_cpu": ratio(lambda r: r["second_forward_cpu_s"]),
        "vm_hwm": ratio(lambda r: r["vm_hwm_bytes"]),
    }
    names = {"startup_s": "process startup", "load_s": "load",
             "first_forward_s": "first forward",
             "second_forward_s": "second forward",
             "first_forward_cpu_s": "first forward, process CPU",
             "second_forward_cpu_s": "second forward, process CPU",
             "first_forward_server_compute_s": "first forward, daemon compute",
             "second_forward_server_compute_s":
                 "second forward, daemon compute",
             "load_plus_first_s": "load + first forward",
             "startup_load_first_s": "startup + load + first forward"}
    rows = [[label, common.fmt_summary(summary["castserve"][key], 3),
             common.fmt_summary(summary["python"][key], 3)]
            for key, label in names.items()]
    rows.append(["peak RSS (VmHWM), MiB",
                 common.fmt_summary(summary["castserve"]["vm_hwm_bytes"], 0,
                                    2**-20),
                 common.fmt_summary(summary["python"]["vm_hwm_bytes"], 0,
                                    2**-20)])
    common.print_table("Llama-1B shape, bf16 checkpoint, f32 compute, "
                       f"{len(records) // 2} round(s): seconds, median "
                       "(min-max)", ["stage", "castserve", "python"], rows)
    targets = {"second_forward": ("<=", 1.05), "load_plus_first": ("<=", 1.5)}
    ratio_rows = []
    for key, value in ratios.items():
        op, bound = targets.get(key, (None, None))
        ratio_rows.append([key.replace("_", " "),
                           common.fmt_summary(value, 3),
                           f"{op} {bound}" if op else "(info)",
                           common.verdict(value and value["median"], op, bound)
                           if op else ""])
    common.print_table("Ratios castserve / Python (per round, median "
                       "(min-max))", ["ratio", "value", "target", ""],
                       ratio_rows)
    errs = result.get("logits_rel_err")
    if errs:
        print("\nlast-position logits, castserve vs Python, relative L2: "
              + ", ".join(f"{e:.2e}" for e in errs))
    print("\n" + common.foreign_cpu_note(
        [r["foreign_cpu_share"] for r in records]))
    return summary, ratios
