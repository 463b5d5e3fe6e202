#!/usr/bin/python3
"""Drives benchmarks/lazy_load_benchmark: experiments 2 and 4 of BENCHMARKS.md.

    # Checkpoints (once; under /tmp, never committed):
    python3 benchmarks/drivers/gen_llama_checkpoint.py --shape 1b --out /tmp/castserve-bench/llama-1b
    python3 benchmarks/drivers/gen_llama_checkpoint.py --shape 8b --out /tmp/castserve-bench/llama-8b
    bazel build -c opt //benchmarks:lazy_load_benchmark
    # Both experiments in one hold of the lock (what BENCHMARKS.md reports):
    python3 benchmarks/drivers/run_lazy_load.py all --repeats 3 --forwards 3
    python3 benchmarks/drivers/lazy_load_report.py   # the Markdown tables
    # Or one at a time:
    python3 benchmarks/drivers/run_lazy_load.py experiment2 --repeats 5
    python3 benchmarks/drivers/run_lazy_load.py experiment4 --repeats 2

Every measurement is its own process, spawned under
`flock /tmp/castserve_bench.lock` so timed runs of different benchmarks never
overlap. The modes of one round run back to back, alternating, and each
round's ratios are computed within the round; figures are the median with
min-max over the rounds. Init is timed twice: by the benchmark (from the
spawn time the driver passes) and by the driver (from spawn to the "ready"
line on stdout).

Page cache: "warm" reads every shard once (cat > /dev/null) before each
process; "cold" evicts the shards' pages with posix_fadvise(DONTNEED), which
needs no privilege (drop_caches is not writable here), and checks with
fincore that they are gone. The lock is held for a whole round, from
preparing the cache to the last process's exit. Other work (builds) shares the machine: before each process
the driver waits (up to 30 s) for the CPUs to be 90% idle, measures the CPU
time others used while it ran (foreign_cpu_share), and runs it once more if
that was over 15%; both attempts' share is recorded.
"""

import argparse
import fcntl
import glob
import json
import os
import resource
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_BINARY = ("/tmp/bazel_lead/execroot/castserve/bazel-out/k8-opt/bin/"
                  "benchmarks/lazy_load_benchmark")
LOCK = os.environ.get("CASTSERVE_BENCH_LOCK", "/tmp/castserve_bench.lock")


def shards(model):
    return sorted(glob.glob(os.path.join(model, "*.safetensors")))


def resident_bytes(model):
    """Page-cache bytes of the shards, from util-linux fincore."""
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output",
                          "RES"] + shards(model), capture_output=True,
                         text=True, check=True).stdout
    return sum(int(line) for line in out.split())


def warm_cache(model):
    for path in shards(model):
        subprocess.run("cat '%s' > /dev/null" % path, shell=True, check=True)
    return resident_bytes(model)


def drop_cache(model):
    for path in shards(model):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return resident_bytes(model)


def cpu_times():
    """(idle + iowait, total) jiffies of all CPUs."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:8]]
    return fields[3] + fields[4], sum(fields)


def children_cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def busy_cpu_seconds():
    idle, total = cpu_times()
    return (total - idle) / os.sysconf("SC_CLK_TCK")


def wait_for_idle_cpus(min_idle=0.9, timeout_s=float(os.environ.get("CASTSERVE_BENCH_IDLE_WAIT_S", 30))):
    """Waits until the CPUs are at least min_idle idle over 0.5 s."""
    deadline = time.time() + timeout_s
    while True:
        idle0, total0 = cpu_times()
        time.sleep(0.5)
        idle1, total1 = cpu_times()
        idle = (idle1 - idle0) / max(1, total1 - total0)
        if idle >= min_idle or time.time() > deadline:
            return idle


def run_benchmark(binary, model, mode, forwards, cache, extra_args=(),
                  env=None, max_foreign_share=0.15, tries=2):
    """One benchmark process, rerun (up to `tries` times) while other work
    took more than `max_foreign_share` of the CPUs during it."""
    for attempt in range(tries):
        result = run_benchmark_once(binary, model, mode, forwards, cache,
                                    extra_args, env)
        result["attempt"] = attempt + 1
        if result["foreign_cpu_share"] <= max_foreign_share:
            break
    return result


def run_benchmark_once(binary, model, mode, forwards, cache, extra_args, env):
    """One benchmark process; the caller holds the lock (BenchLock)."""
    json_path = "/tmp/castserve-bench/last_result.json"
    cache_bytes = warm_cache(model) if cache == "warm" else drop_cache(model)
    idle = wait_for_idle_cpus()
    busy_before = busy_cpu_seconds()
    children_before = children_cpu_seconds()
    spawn_ns = time.time_ns()
    spawn = time.monotonic()
    proc = subprocess.Popen(
        [binary, "--model=" + model, "--mode=" + mode,
         "--forwards=%d" % forwards, "--json=" + json_path,
         "--spawn_time_ns=%d" % spawn_ns] + list(extra_args),
        stdout=subprocess.PIPE, text=True, env=dict(os.environ, **(env or {})))
    ready_wall = None
    for line in proc.stdout:
        if line.startswith("ready") and ready_wall is None:
            ready_wall = time.monotonic() - spawn
    code = proc.wait()
    wall = time.monotonic() - spawn
    busy = busy_cpu_seconds() - busy_before
    own = children_cpu_seconds() - children_before
    if code != 0:
        raise RuntimeError("%s %s exited with %d" % (mode, model, code))
    with open(json_path) as f:
        result = json.load(f)
    result["driver_ready_seconds"] = ready_wall
    result["cache"] = cache
    result["cache_resident_bytes_before"] = cache_bytes
    result["cpu_idle_before"] = idle
    result["wall_seconds"] = wall
    # CPU time others used while we ran, as a share of all CPUs' time.
    result["foreign_cpu_share"] = max(0.0, busy - own) / (wall * os.cpu_count())
    return result


class BenchLock:
    """flock on LOCK: timed runs of different benchmarks never overlap. Held
    for one round (every mode once, cache preparation included), so that a
    round's ratios compare runs made under the same conditions."""

    depth = 0  # Re-entrant: nested holds share the outermost one.

    def __enter__(self):
        if BenchLock.depth == 0:
            self.file = open(LOCK, "a")
            fcntl.flock(self.file, fcntl.LOCK_EX)
        BenchLock.depth += 1
        return self

    def __exit__(self, *exc):
        BenchLock.depth -= 1
        if BenchLock.depth == 0:
            fcntl.flock(self.file, fcntl.LOCK_UN)
            self.file.close()


def phase(result, name):
    for p in result["phases"]:
        if p["name"] == name:
            return p
    return None


def summary(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values),
            "max": max(values), "n": len(values)}


def metrics_of(result):
    init = phase(result, "init")
    out = {"init_seconds": init["from_process_start_seconds"] if init else None,
           "init_seconds_driver": result["driver_ready_seconds"],
           "init_phase_seconds": init["seconds"] if init else None,
           "init_read_bytes": init["read_bytes"] if init else None,
           "vm_hwm_bytes": result["vm_hwm_bytes"],
           "rss_anon_peak_bytes": result["rss_anon_peak_bytes_sampled"],
           "tracked_peak_bytes": result["tracked_peak_bytes_process"],
           "foreign_cpu_share": result["foreign_cpu_share"],
           "attempt": result["attempt"],
           "main_entered_seconds": result.get("main_entered_seconds")}
    for p in result["phases"]:
        if p["name"] in ("read", "decode", "acquire", "fused_new",
                         "fused_reused"):  # decode_only passes
            out[p["name"] + "_seconds"] = p["seconds"]
            out[p["name"] + "_gb_per_s"] = p["bytes_processed"] / p["seconds"] / 1e9
        if p["name"].startswith("forward"):
            out[p["name"] + "_seconds"] = p["seconds"]
            out[p["name"] + "_cpu_seconds"] = p.get("cpu_seconds")
            out[p["name"] + "_wait_seconds"] = p["weight_wait_seconds"]
            out[p["name"] + "_math_seconds"] = p["module_math_seconds"]
            out[p["name"] + "_read_bytes"] = p["read_bytes"]
            out[p["name"] + "_tracked_peak_bytes"] = p["tracked_peak_bytes"]
            out[p["name"] + "_logits_finite"] = p.get("logits_finite")
    return out


def run_rounds(binary, model, modes, forwards, cache, repeats, log):
    """modes: {label: (mode, extra_args[, env])}; returns {label: [metrics]}."""
    runs = {label: [] for label in modes}
    for r in range(repeats):
        with BenchLock():
            for label, spec in modes.items():
                mode, extra = spec[0], spec[1]
                env = spec[2] if len(spec) > 2 else None
                result = run_benchmark(binary, model, mode, forwards, cache,
                                       extra, env)
                m = metrics_of(result)
                m["cpu_idle_before"] = result["cpu_idle_before"]
                m["cache_resident_bytes_before"] = (
                    result["cache_resident_bytes_before"])
                runs[label].append(m)
                log("%s %s %s round %d: %s" % (os.path.basename(model), cache,
                                               label, r + 1, brief(m)))
    return runs


def brief(m):
    keys = ["init_seconds", "forward1_seconds", "forward2_seconds",
            "forward1_wait_seconds", "rss_anon_peak_bytes",
            "foreign_cpu_share", "attempt"]
    return ", ".join("%s=%.3g" % (k, m[k]) for k in keys if m.get(k) is not None)


def summarize(runs):
    out = {}
    for label, ms in runs.items():
        keys = sorted({k for m in ms for k in m if isinstance(m.get(k), (int, float))
                       and not isinstance(m.get(k), bool)})
        out[label] = {k: summary([m.get(k) for m in ms]) for k in keys}
    return out


def round_ratios(runs, num, den, key_num, key_den=None):
    key_den = key_den or key_num
    return summary([a[key_num] / b[key_den] for a, b in zip(runs[num], runs[den])
                    if a.get(key_num) and b.get(key_den)])


MODES_1B = {
    "eager": ("eager", []),
    "lazy_cached": ("lazy_cached", []),
    "lazy_cached_no_prefetch": ("lazy_cached", ["--prefetch=0"]),
    "mapped_transient": ("mapped_transient", []),
    "mapped_transient_no_prefetch": ("mapped_transient", ["--prefetch=0"]),
    "mapped_transient_pool": ("mapped_transient", ["--buffer_pool=1"]),
}
LAZY_LABELS = [k for k in MODES_1B if k != "eager"]


def experiment2_1b(args, out, cache, repeats, log):
    runs = run_rounds(args.binary, args.model_1b, MODES_1B, 2, cache, repeats,
                      log)
    out["runs"]["1b_" + cache] = runs
    out["summary"]["1b_" + cache] = summarize(runs)
    ratios = {}
    for lazy in LAZY_LABELS:
        ratios[lazy] = {
            "eager_init_over_lazy_init": round_ratios(
                runs, "eager", lazy, "init_seconds"),
            "eager_load_call_over_lazy_load_call": round_ratios(
                runs, "eager", lazy, "init_phase_seconds"),
            "first_forward_over_eager": round_ratios(
                runs, lazy, "eager", "forward1_seconds"),
            "second_forward_over_eager": round_ratios(
                runs, lazy, "eager", "forward2_seconds"),
            "init_plus_first_over_eager": summary(
                [(a["init_seconds"] + a["forward1_seconds"]) /
                 (b["init_seconds"] + b["forward1_seconds"])
                 for a, b in zip(runs[lazy], runs["eager"])]),
        }
    out["ratios"]["1b_" + cache] = ratios


def experiment2_8b_init(args, out, repeats, log):
    """8B: init only. Lazy cached could not run a forward (its f32 copies,
    32 GB, exceed RAM), and eager f32 (32 GB) is not run at all."""
    modes = {"lazy_cached": ("lazy_cached", []),
             "mapped_transient": ("mapped_transient", [])}
    runs = run_rounds(args.binary, args.model_8b, modes, 0, "warm", repeats,
                      log)
    out["runs"]["8b_warm_init_only"] = runs
    out["summary"]["8b_warm_init_only"] = summarize(runs)
    s1 = out["summary"]["1b_warm"]["lazy_cached"]["init_seconds"]["median"]
    s8 = out["summary"]["8b_warm_init_only"]["lazy_cached"]["init_seconds"]["median"]
    out["ratios"]["lazy_init_8b_over_1b"] = s8 / s1


def decode_passes(args, out, repeats, log):
    modes = {"decode_only": ("decode_only", [])}
    runs = run_rounds(args.binary, args.model_1b, modes, 0, "warm", repeats,
                      log)
    out["runs"]["1b_decode_only"] = runs
    out["summary"]["1b_decode_only"] = summarize(runs)


def new_result(args):
    return {"models": {"1b": args.model_1b, "8b": args.model_8b},
            "tokens": 16, "runs": {}, "summary": {}, "ratios": {}}


def experiment2(args, log):
    out = new_result(args)
    experiment2_1b(args, out, "warm", args.repeats, log)
    experiment2_8b_init(args, out, args.repeats, log)
    decode_passes(args, out, 2, log)
    if "cold" in args.caches:
        experiment2_1b(args, out, "cold", args.repeats, log)
    return out


def disk_bandwidth(path, log):
    """Sequential read bandwidth of the disk: dd with O_DIRECT, 16 MiB blocks."""
    proc = subprocess.run(["dd", "if=" + path, "of=/dev/null", "bs=16M",
                           "iflag=direct"], capture_output=True, text=True,
                          check=True)
    last = proc.stderr.strip().splitlines()[-1]
    # "N bytes (...) copied, S s, R GB/s"
    parts = last.split(",")
    nbytes = int(parts[0].split()[0])
    seconds = float(parts[-2].split()[0])
    log("disk: %s" % last)
    return {"bytes": nbytes, "seconds": seconds, "gb_per_s": nbytes / seconds / 1e9,
            "file": path, "dd": last}


MODES_8B = {
    "mapped_transient": ("mapped_transient", []),
    "mapped_transient_pool": ("mapped_transient", ["--buffer_pool=1"]),
}


def experiment4(args, log):
    m8 = args.model_8b
    out = {"model": m8, "tokens": 16, "forwards_per_process": args.forwards,
           "runs": {}, "summary": {}, "disk": []}
    biggest = max(shards(m8), key=os.path.getsize)
    for cache in args.caches:
        for r in range(args.repeats):
            runs = run_rounds(args.binary, m8, MODES_8B, args.forwards, cache,
                              1, log)
            for label, ms in runs.items():
                out["runs"].setdefault(cache, {}).setdefault(label, []).extend(ms)
            if cache == "cold":
                with BenchLock():
                    drop_cache(m8)
                    out["disk"].append(disk_bandwidth(biggest, log))
        out["summary"][cache] = summarize(out["runs"][cache])
    if "cold" in out["runs"]:
        disk = statistics.median(d["gb_per_s"] for d in out["disk"])
        out["disk_gb_per_s_median"] = disk
        for label, ms in out["runs"]["cold"].items():
            rates = [m["forward1_read_bytes"] / m["forward1_seconds"] / 1e9
                     for m in ms]
            out.setdefault("cold_first_forward_read_gb_per_s", {})[label] = (
                summary(rates))
            out.setdefault("read_rate_over_disk_bandwidth", {})[label] = (
                summary([r / disk for r in rates]))
    return out


def everything(args, log):
    """Both experiments in one hold of the lock, in priority order; writes
    each JSON as soon as its part is done."""
    def write(name, result):
        result["command"] = " ".join(sys.argv)
        result["date_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        path = os.path.join(args.out_dir, name + ".json")
        with open(path, "w") as f:
            json.dump(result, f, indent=1, sort_keys=True)
        log("wrote " + path)

    with BenchLock():
        exp2 = new_result(args)
        experiment2_1b(args, exp2, "warm", args.repeats, log)
        experiment2_8b_init(args, exp2, args.repeats, log)
        decode_passes(args, exp2, 2, log)
        write("experiment2", exp2)
        exp4_args = argparse.Namespace(**vars(args))
        exp4_args.caches, exp4_args.repeats = ["cold"], 1
        write("experiment4", experiment4(exp4_args, log))
        experiment2_1b(args, exp2, "cold", max(2, args.repeats - 1), log)
        write("experiment2", exp2)
    return None


# glibc tunables that stand in for prototypes of changes to the lead's code.
# Freed memory stays in malloc's heap (no mmap, no trim), so a transient
# copy reuses the pages of the previous one: what a buffer pool would do.
HEAP_REUSE = {"GLIBC_TUNABLES": "glibc.malloc.mmap_max=0:"
                                "glibc.malloc.trim_threshold=1000000000000"}
# Transparent huge pages for malloc's large chunks (THP is "madvise" here).
HUGE_PAGES = {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}


def diagnose(args, log):
    """Why the lazy first forward is slower: variants on the 1B shape."""
    m1 = args.model_1b
    modes = {
        "decode_only": ("decode_only", []),
        "eager": ("eager", []),
        "eager_thp": ("eager", [], HUGE_PAGES),
        "lazy_cached": ("lazy_cached", []),
        "lazy_cached_thp": ("lazy_cached", [], HUGE_PAGES),
        "mapped_transient": ("mapped_transient", []),
        "mapped_transient_no_prefetch": ("mapped_transient", ["--prefetch=0"]),
        "mapped_transient_codec_1_thread": ("mapped_transient",
                                            ["--codec_threads=1"]),
        "mapped_transient_omp_passive": ("mapped_transient", [],
                                         {"OMP_WAIT_POLICY": "PASSIVE"}),
        "mapped_transient_heap_reuse": ("mapped_transient", [], HEAP_REUSE),
        "mapped_transient_no_prefetch_heap_reuse": (
            "mapped_transient", ["--prefetch=0"], HEAP_REUSE),
    }
    if args.only:
        modes = {k: v for k, v in modes.items() if k in args.only.split(",")}
    out = {"model": m1, "runs": {}, "summary": {}}
    for cache in args.caches:
        runs = run_rounds(args.binary, m1, modes, 2, cache, args.repeats, log)
        out["runs"][cache] = runs
        out["summary"][cache] = summarize(runs)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("experiment", choices=["experiment2", "experiment4",
                                               "diagnose", "all"])
    parser.add_argument("--only", default="",
                        help="diagnose: comma-separated variant labels")
    parser.add_argument("--binary", default=DEFAULT_BINARY)
    parser.add_argument("--model-1b", default="/tmp/castserve-bench/llama-1b")
    parser.add_argument("--model-8b", default="/tmp/castserve-bench/llama-8b")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--forwards", type=int, default=3,
                        help="forwards per process (experiment4)")
    parser.add_argument("--caches", default="warm,cold")
    parser.add_argument("--out", default=None)
    parser.add_argument("--out-dir", default=os.path.join(REPO, "benchmarks",
                                                          "results"))
    args = parser.parse_args()
    args.caches = args.caches.split(",")
    out_path = args.out or os.path.join(REPO, "benchmarks", "results",
                                        args.experiment + ".json")
    log = lambda s: print(time.strftime("%H:%M:%S"), s, flush=True)
    started = time.time()
    result = {"experiment2": experiment2, "experiment4": experiment4,
              "diagnose": diagnose, "all": everything}[args.experiment](args, log)
    if result is None:
        return 0
    result["command"] = " ".join(sys.argv)
    result["seconds"] = time.time() - started
    result["date_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    with open(out_path, "w") as f:
        json.dump(result, f, indent=1, sort_keys=True)
    log("wrote %s" % out_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
