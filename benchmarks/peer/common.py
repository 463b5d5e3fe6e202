"""Shared pieces of the peer benchmark: child processes that are always
cleaned up, castserve started on free ports, /proc memory and CPU readings,
summary statistics, tables and the JSON result file."""

import contextlib
import fcntl
import json
import math
import os
import platform
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(HERE))
DEFAULT_CASTSERVE = os.path.join(REPO_ROOT, "bazel-bin", "server", "castserve")
# Generated checkpoints and scratch files live here, never in the repository.
BENCH_DIR = os.environ.get("CASTSERVE_BENCH_DIR", "/tmp/castserve-bench")
# The lock BENCHMARKS.md's drivers hold while timing, so that timed runs of
# different benchmarks never overlap.
LOCK_PATH = os.environ.get("CASTSERVE_BENCH_LOCK", "/tmp/castserve_bench.lock")
READY_RE = re.compile(r'msg="castserve ready" grpc_port=(\d+) metrics_port=(\d+)')
UNKNOWN_FLAG_RE = re.compile(r"unknown flag '(--[^'=]+)")


def offline_env():
    """Hugging Face libraries must never try the hub (it is unreachable)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def thread_env(threads):
    """Environment for a child: OpenMP/MKL pools of `threads` (Python also
    calls torch.set_num_threads; castserve also gets --intra-op-threads)."""
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(threads)
    env["MKL_NUM_THREADS"] = str(threads)
    return env


def free_port():
    """A TCP port free right now (for servers that cannot pick their own)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------
# Child processes
# ---------------------------------------------------------------------------


class Child:
    """A server or worker process in its own session (so a Ctrl-C at the
    terminal reaches only the driver, which then stops it in order), with
    its output in a log file."""

    def __init__(self, name, argv, env, log_path):
        self.name = name
        self.log_path = log_path
        self._log = open(log_path, "w")
        self.spawned = time.monotonic()
        self.spawned_epoch = time.time()
        self.process = subprocess.Popen(argv, env=env, stdout=self._log,
                                        stderr=subprocess.STDOUT,
                                        start_new_session=True)
        self.pid = self.process.pid

    def log_text(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def alive(self):
        return self.process.poll() is None

    def stop(self, timeout=30):
        """SIGTERM to the child's process group, SIGKILL after `timeout`."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.pid, signal.SIGKILL)
                self.process.wait()
        if not self._log.closed:
            self._log.close()
        return self.process.returncode


class Children:
    """Every child the driver started; stop_all() runs on exit, Ctrl-C and
    SIGTERM (turned into SystemExit so that `finally` blocks run)."""

    def __init__(self):
        self._children = []
        # Ctrl-C raises KeyboardInterrupt even when the driver was started
        # with SIGINT ignored (as background jobs of a script are).
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGHUP, self._on_signal)

    @staticmethod
    def _on_signal(signum, _frame):
        raise SystemExit(128 + signum)

    def spawn(self, name, argv, env, log_path):
        child = Child(name, argv, env, log_path)
        self._children.append(child)
        return child

    def stop(self, child):
        if child in self._children:
            self._children.remove(child)
        return child.stop()

    def alive_pids(self):
        return [c.pid for c in self._children if c.alive()]

    def stop_all(self):
        while self._children:
            self._children.pop().stop(timeout=15)


def start_castserve(children, binary, repository, flags, threads, log_path,
                    name="castserve", timeout=300):
    """Starts castserve on free ports; returns (child, grpc_port, startup_s,
    flags actually used).

    `--intra-op-threads=<threads>` is added unless `flags` sets it (castserve
    otherwise uses cores / instances), and
    `--allow-symlinks-outside-repository` and `--http-port=off` (once each;
    not the latter when `flags` names an --http-port: the native peers
    drive castserve over REST);
    OMP_NUM_THREADS and MKL_NUM_THREADS are
    set too. A flag castserve rejects as unknown is dropped (with a warning)
    and the daemon started again without it. A daemon that exits without a
    word (its binary being rebuilt) is retried after a pause."""
    flags = list(flags)
    if not any(f.startswith("--intra-op-threads") for f in flags):
        flags.append(f"--intra-op-threads={threads}")
    # The benchmark repositories link the checkpoints in (`hf` symlinks);
    # REST is off, or two daemons of one run would both want port 8000.
    for fixed in ("--allow-symlinks-outside-repository", "--http-port=off"):
        if fixed == "--http-port=off" and any(
                f.startswith("--http-port") for f in flags):
            continue
        if fixed not in flags:
            flags.append(fixed)
    silent_exits = 0
    while True:
        wait_for_file(binary, what="castserve binary")
        argv = [binary, f"--model-repository={repository}", "--grpc-port=0",
                "--metrics-port=0", *flags]
        child = children.spawn(name, argv, thread_env(threads), log_path)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = READY_RE.search(child.log_text())
            if match:
                child.grpc_port = int(match.group(1))
                child.metrics_port = int(match.group(2))
                return (child, child.grpc_port,
                        time.monotonic() - child.spawned, flags)
            if not child.alive():
                break
            time.sleep(0.02)
        text = child.log_text()
        children.stop(child)
        unknown = UNKNOWN_FLAG_RE.search(text)
        dropped = [f for f in flags if unknown and
                   f.split("=")[0] == unknown.group(1)]
        if dropped:
            print(f"warning: castserve rejects {dropped[0]}; dropped it",
                  file=sys.stderr)
            flags.remove(dropped[0])
            continue
        if not text.strip() and silent_exits < 3:
            silent_exits += 1
            print(f"warning: {name} exited silently (binary being rebuilt?); "
                  f"retrying in 20 s", file=sys.stderr)
            time.sleep(20)
            continue
        raise RuntimeError(f"{name} did not become ready; log "
                           f"{log_path}:\n{text[-3000:]}")


def wait_model_ready(client, model, child, timeout=300):
    """Polls ServerReady and ModelReady (any KServe v2 server)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not child.alive():
            raise RuntimeError(f"{child.name} exited; log {child.log_path}:\n"
                               f"{child.log_text()[-3000:]}")
        with contextlib.suppress(Exception):
            if client.is_server_ready() and client.is_model_ready(model):
                return time.monotonic() - child.spawned
        time.sleep(0.1)
    raise RuntimeError(f"{child.name}: {model} not ready in {timeout} s; "
                       f"log {child.log_path}")


def scrape_metrics(port, prefixes=("castserve_model_", "castserve_process_")):
    """castserve's Prometheus samples whose names start with `prefixes`."""
    samples = {}
    with contextlib.suppress(OSError):
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                      timeout=5).read().decode()
        for line in text.splitlines():
            if line.startswith(prefixes):
                key, _, value = line.rpartition(" ")
                samples[key] = float(value)
    return samples


# ---------------------------------------------------------------------------
# /proc readings
# ---------------------------------------------------------------------------


def proc_memory(pid):
    """VmRSS and VmHWM (peak RSS since start) of `pid`, in bytes."""
    values = {}
    with contextlib.suppress(OSError):
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                    values[key] = int(rest.split()[0]) * 1024
    return values


def proc_cpu_seconds(pid):
    """User + system CPU seconds of all threads of `pid`."""
    with contextlib.suppress(OSError):
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
        ticks = os.sysconf("SC_CLK_TCK")
        return (int(fields[11]) + int(fields[12])) / ticks
    return float("nan")


def system_busy_seconds():
    """CPU-seconds the whole machine spent busy so far (/proc/stat)."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:9]]
    idle = values[3] + values[4]  # idle + iowait
    return (sum(values) - idle) / os.sysconf("SC_CLK_TCK")


class ForeignCpu:
    """Measures, over a block, the share of the machine's CPU capacity used
    by processes other than this driver and its children (other builds and
    benchmarks on a shared machine). `.share` is 0..1; high values mean the
    block's timings are disturbed."""

    def __init__(self, children):
        self.children, self.share = children, None

    def _ours(self):
        t = os.times()
        alive = sum(proc_cpu_seconds(pid) for pid in self.children.alive_pids())
        return t.user + t.system + t.children_user + t.children_system + alive

    def __enter__(self):
        self._t0, self._busy0 = time.monotonic(), system_busy_seconds()
        self._ours0 = self._ours()
        return self

    def __exit__(self, *exc):
        wall = time.monotonic() - self._t0
        foreign = (system_busy_seconds() - self._busy0) - \
            (self._ours() - self._ours0)
        self.share = max(0.0, foreign) / (wall * os.cpu_count()) if wall else 0


def foreign_cpu_note(shares):
    """One line summarising ForeignCpu shares of the timed blocks."""
    shares = [s for s in shares if s is not None]
    if not shares:
        return ""
    worst = max(shares)
    note = (f"other processes used {statistics.median(shares):.0%} of the CPUs "
            f"during timed blocks (median; worst {worst:.0%})")
    if worst > 0.15:
        note += (": timings are disturbed; rerun on a quiet machine (no builds) "
                 "before reading the ratios")
    return note


class RssSampler:
    """Samples a process's VmRSS on a thread while in use; `.peak` is the
    largest value seen (bytes)."""

    def __init__(self, pid, interval=0.02):
        self.pid, self.interval, self.peak = pid, interval, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, proc_memory(self.pid).get("VmRSS", 0))
            self._stop.wait(self.interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, proc_memory(self.pid).get("VmRSS", 0))


# ---------------------------------------------------------------------------
# Statistics, tables, results
# ---------------------------------------------------------------------------


def summary(values):
    """{'median', 'min', 'max', 'n'} of the finite values (None if none)."""
    values = [v for v in values if v is not None and math.isfinite(v)]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values),
            "max": max(values), "n": len(values)}


def percentile(values, q):
    """The q-th percentile (0-100) by linear interpolation."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def fmt_summary(s, digits=2, scale=1.0):
    """'median (min–max)' or 'median' when n == 1; '-' when empty."""
    if not s:
        return "-"
    med = f"{s['median'] * scale:.{digits}f}"
    if s["n"] == 1:
        return med
    return f"{med} ({s['min'] * scale:.{digits}f}-{s['max'] * scale:.{digits}f})"


def verdict(value, op, bound):
    """'met' / 'NOT met' for value <= or >= bound."""
    if value is None or not math.isfinite(value):
        return "n/a"
    ok = value <= bound if op == "<=" else value >= bound
    return "met" if ok else "NOT met"


def print_table(title, headers, rows):
    """A plain fixed-width table on stdout."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h)
              for i, h in enumerate(headers)]
    print(f"\n{title}")
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths)))
    print("  ".join("-" * w for w in widths))
    for row in cells:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)))
    sys.stdout.flush()


def mib(n):
    return n / 2**20 if n else float("nan")


def rel_l2(a, b):
    """Relative L2 distance ||a - b|| / ||b|| of two numpy arrays."""
    import numpy as np
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def castserve_version(binary):
    with contextlib.suppress(Exception):
        return subprocess.run([binary, "--version"], capture_output=True,
                              text=True, timeout=30).stdout.strip()
    return None


def environment(binary, threads):
    """What the run ran on and with, for the JSON file."""
    import torch
    import transformers
    info = {"castserve": castserve_version(binary), "castserve_binary": binary,
            "torch": torch.__version__, "transformers": transformers.__version__,
            "python": platform.python_version(), "threads": threads,
            "cpus": os.cpu_count(), "loadavg_start": os.getloadavg(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as f:
            info["cpu_model"] = next((l.split(":", 1)[1].strip() for l in f
                                      if l.startswith("model name")), None)
    with contextlib.suppress(Exception):
        import diffusers
        info["diffusers"] = diffusers.__version__
    return info


def args_dict(args):
    """The command line as recorded in the JSON file."""
    return {k: v for k, v in vars(args).items() if k != "module"}


def write_json(path, data):
    data.setdefault("environment", {})["loadavg_end"] = os.getloadavg()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(data, f, indent=1, default=str)
    print(f"\nwrote {path}")


@contextlib.contextmanager
def bench_lock(enabled=True):
    """Holds the shared benchmark lock (waits for whoever has it)."""
    if not enabled:
        yield
        return
    with open(LOCK_PATH, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"waiting for {LOCK_PATH} (another benchmark is timing)",
                  file=sys.stderr)
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def wait_for_file(path, timeout=120, what="file"):
    """castserve may be rebuilt under us: wait for its binary to reappear."""
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise FileNotFoundError(f"{what} {path} not found")
        print(f"waiting for {what} {path}", file=sys.stderr)
        time.sleep(10)


def run_subcommand(args):
    """Runs `args.module.run(args, children, workdir)` (a run_peer.py or
    run_native_peers.py subcommand): `--out` defaults to
    BENCH_DIR/peer_<command>.json; servers' repositories and logs go to a
    scratch folder, removed with the servers unless --keep-logs. Returns the
    exit status (130 on Ctrl-C)."""
    import shutil
    import tempfile

    offline_env()
    args.out = args.out or os.path.join(BENCH_DIR, f"peer_{args.command}.json")
    os.makedirs(BENCH_DIR, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix=f"peer-{args.command}-", dir=BENCH_DIR)
    children = Children()
    try:
        args.module.run(args, children, workdir)
    except KeyboardInterrupt:
        print("\ninterrupted; servers stopped", file=sys.stderr)
        return 130
    finally:
        children.stop_all()
        if args.keep_logs:
            print(f"logs kept in {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0
