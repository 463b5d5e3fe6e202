#!/usr/bin/python3
"""Wake latency per memory tier (issue 28): how long the first request to a
demoted model takes, against the same request on the hot model and against
what an unloaded model pays (a load, then the request). A move up returns
once the model's promotion has started; the wake request runs beside it.

One daemon per configuration of --model (a Llama-shaped bf16 checkpoint from
gen_llama_checkpoint.py, for example --shape 1b), no budget. Per round: the
model is loaded (RepositoryModelLoad) and answers --warmup requests; then,
for each tier, an explicit move (RepositoryModelLoad with parameters
{"tier": ...}), one timed request (the wake) and one more (hot again); then
a move to cool with a request sent --during-delay after it starts (it
waits while the move holds forwards off), and back to hot; then an unload,
a load and one request (the reload). Requests: REST generate,
--prompt-tokens prompt ids, --new-tokens new tokens, greedy. Medians over
--rounds. A second table gives the promotions the daemon timed (each one
that built the model back to hot off the request path, from its log), by
the tier they started from: what the memory budget's choice of demotions
weighs (tier_policy.h, WakeRates).

With --profile-dir, the first round's wake requests run under `perf record
-g` attached to the daemon (Debian's linux-perf), one file per config and
tier; `perf report -i FILE --no-children` says where the wake's time goes.

Usage (from the repository root, after `bazel build //server:castserve`):
  python3 benchmarks/drivers/gen_llama_checkpoint.py --shape 1b --out /tmp/castserve-bench/llama-1b
  /usr/bin/python3 benchmarks/drivers/tier_wake.py --castserve=bazel-bin/server/castserve \\
      --model=/tmp/castserve-bench/llama-1b [--rounds=3] [--json=PATH]
"""

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from many_models_tiers import (  # noqa: E402
    Daemon, promotion_summary, timed_promotions)

CONFIGS = {
    # Storage that is the file's bytes: a cool model serves from the mapping
    # until its promotion (casting::Weight::ServesMappedWhenCool).
    "bf16 as stored; bf16 compute": """weights {
  casting { storage_dtype: STORAGE_DTYPE_BF16 compute_dtype: COMPUTE_DTYPE_BF16 }
}
""",
    "bf16 as stored; transient f32 compute": """weights {
  compute_copy: COMPUTE_COPY_TRANSIENT
  reuse_transient_buffers: true
  casting { storage_dtype: STORAGE_DTYPE_BF16 compute_dtype: COMPUTE_DTYPE_F32 }
}
""",
    # Storage converted from the file: a cool model makes it again.
    "f32 resident (from the bf16 file)": """weights { residency: RESIDENCY_RESIDENT }
""",
    "bf16 storage; cached f32 compute": """weights {
  casting { storage_dtype: STORAGE_DTYPE_BF16 compute_dtype: COMPUTE_DTYPE_F32 }
}
""",
    "fp8 e4m3 per-row; transient f32 compute": """weights {
  compute_copy: COMPUTE_COPY_TRANSIENT
  reuse_transient_buffers: true
  casting {
    storage_dtype: STORAGE_DTYPE_F8_E4M3FN
    compute_dtype: COMPUTE_DTYPE_F32
    scaling: SCALING_PER_ROW
  }
}
""",
}


def timed(daemon, method_path, body):
    start = time.monotonic()
    status, reply = daemon.post(method_path, body, 600)
    elapsed = time.monotonic() - start
    if status != 200:
        raise SystemExit(f"{method_path}: {status} {reply}")
    return elapsed, reply


class Profile:
    """perf record -g on the daemon while the with-block runs."""

    def __init__(self, daemon, path):
        self.command = ["perf", "record", "-q", "-g", "-e", "cpu-clock",
                        "-p", str(daemon.process.pid), "-o", path]

    def __enter__(self):
        self.process = subprocess.Popen(self.command)
        time.sleep(0.5)  # perf attaches before the request starts.

    def __exit__(self, *exc):
        self.process.send_signal(signal.SIGINT)
        self.process.wait()


def run_config(args, label, weights):
    root = tempfile.mkdtemp(prefix="castserve-wake-", dir=args.work_dir)
    try:
        folder = os.path.join(root, "llama")
        os.makedirs(folder)
        os.symlink(os.path.abspath(args.model), os.path.join(folder, "hf"))
        with open(os.path.join(folder, "config.pbtxt"), "w") as f:
            f.write('checkpoint { path: "hf" }\n'
                    'load_policy: LOAD_POLICY_FIRST_REQUEST\n'
                    'instance_group { kind: KIND_CPU count: 1 }\n'
                    'generation { kv_cache_bytes: 134217728 }\n' + weights)
        daemon = Daemon(args.castserve, root,
                        f"--intra-op-threads={args.threads}",
                        "--allow-symlinks-outside-repository")
        generate = ("/v2/models/llama/generate", {
            "input_ids": list(range(100, 100 + args.prompt_tokens)),
            "parameters": {"max_tokens": args.new_tokens,
                           "ignore_eos": True}})
        load = "/v2/repository/models/llama/load"
        rows = {"hot": [], "warm": [], "cool": [], "reload": [],
                "move_warm": [], "move_cool": [], "load": [],
                "during_cool": [], "move_during": []}
        try:
            timed(daemon, load, {})
            for _ in range(args.warmup):
                timed(daemon, *generate)
            for _ in range(args.rounds):
                rows["hot"].append(timed(daemon, *generate)[0])
                for tier in ("warm", "cool"):
                    rows[f"move_{tier}"].append(timed(
                        daemon, load, {"parameters": {"tier": tier}})[0])
                    if args.profile_dir and len(rows[tier]) == 0:
                        slug = re.sub(r"[^a-z0-9]+", "_", label.lower())
                        path = os.path.join(args.profile_dir,
                                            f"wake_{slug}_{tier}.perf")
                        with Profile(daemon, path):
                            rows[tier].append(timed(daemon, *generate)[0])
                    else:
                        rows[tier].append(timed(daemon, *generate)[0])
                    timed(daemon, *generate)  # Hot again.
                # A request that arrives while the model moves to cool:
                # it waits for the move to let forwards in again.
                move = threading.Thread(target=lambda: rows[
                    "move_during"].append(timed(
                        daemon, load, {"parameters": {"tier": "cool"}})[0]))
                move.start()
                time.sleep(args.during_delay)
                rows["during_cool"].append(timed(daemon, *generate)[0])
                move.join()
                timed(daemon, load, {"parameters": {"tier": "hot"}})
                timed(daemon, *generate)
                timed(daemon, "/v2/repository/models/llama/unload", {})
                rows["load"].append(timed(daemon, load, {})[0])
                rows["reload"].append(timed(daemon, *generate)[0] +
                                      rows["load"][-1])
                timed(daemon, *generate)
            # A promotion is timed only if it ends before the next move
            # (which cancels it), and logged at the model's next wake: wake
            # from cool, then from warm, each promotion given time to end.
            for tier in ("cool", "warm", "cool"):
                timed(daemon, load, {"parameters": {"tier": tier}})
                timed(daemon, *generate)
                time.sleep(args.promotion_wait)
            promotions = timed_promotions(daemon.output())
        finally:
            daemon.close()
    finally:
        shutil.rmtree(root)
    medians = {key: statistics.median(values) for key, values in rows.items()}
    return {"config": label, "median_s": medians, "runs_s": rows,
            "promotions": promotions}


def promotion_cell(summary):
    """Median seconds and GB/s of a promotion_summary entry, or "-"."""
    if not summary:
        return "-"
    return f"{summary['median_s']:.3f} ({summary['median_gb_per_s']:.1f})"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--castserve", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--work-dir", default=None)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--prompt-tokens", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--during-delay", type=float, default=0.02,
                        help="seconds between starting a move to cool and "
                             "the request sent during it")
    parser.add_argument("--configs", default=",".join(CONFIGS),
                        help="comma-separated keys of CONFIGS")
    parser.add_argument("--promotion-wait", type=float, default=5,
                        help="seconds a promotion is given to end")
    parser.add_argument("--json", default=None)
    parser.add_argument("--profile-dir", default=None)
    args = parser.parse_args()

    results = [run_config(args, label, CONFIGS[label])
               for label in args.configs.split(",")]
    print("| config | hot request s | first request after a move to warm s "
          "| to cool s | after unload: load + request s | moves warm / "
          "cool s | request sent during a move to cool s (that move s) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in results:
        m = r["median_s"]
        print(f"| {r['config']} | {m['hot']:.3f} | {m['warm']:.3f} | "
              f"{m['cool']:.3f} | {m['reload']:.3f} | "
              f"{m['move_warm']:.3f} / {m['move_cool']:.3f} | "
              f"{m['during_cool']:.3f} ({m['move_during']:.3f}) |")
    print()
    print("| config | promotion from warm s (GB/s) | from cool s (GB/s) |")
    print("|---|---:|---:|")
    for r in results:
        p = promotion_summary(r["promotions"])
        print(f"| {r['config']} | {promotion_cell(p.get('warm'))} | "
              f"{promotion_cell(p.get('cool'))} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results}, f, indent=2)


if __name__ == "__main__":
    main()
