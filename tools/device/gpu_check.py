#!/usr/bin/env python3
"""The H200 check of issue 15 (see gpu_check.sh, which runs this).

Standard library only, besides the machine's torch (asked for its library
folder and the visible GPUs) and numpy (which gen_siglip_so400m.py needs).
Every part ends up in results.json as PASSED, FAILED or SKIPPED, with the
reason for the last two; nothing that needs a GPU passes without one.
"""

import argparse
import glob
import json
import lzma
import os
import platform
import shutil
import signal
import struct
import subprocess
import sys
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PARTS = ("kernels", "experiment", "daemon")
# Every target tagged "gpu" (pack_daemon.sh packs the same list).
GPU_TESTS = ("codec_cuda_device_test", "weight_cuda_test",
             "device_model_memory_cuda_test", "side_stream_test",
             "cuda_model_test")
CONFIGS = ("resident/F32", "resident/BF16", "cast/F8_E5M2/BF16",
           "cast/F8_E4M3FN:per_row/BF16",
           # Storage in pinned host memory, streamed per layer (RESIDENCY_HOST).
           "host/F8_E4M3FN:per_row/BF16")
MODEL = "siglip"
GRPC_PORT, METRICS_PORT = 18001, 18002
# castserve-client's answer on a machine without a GPU (device_probe.h).
NO_DEVICE = "no CUDA device"


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="gpu_check.sh")
    parser.add_argument("out_dir")
    parser.add_argument("--pack", default=os.path.join(REPO, "tools/device/pack"))
    parser.add_argument("--model", default="")
    parser.add_argument("--parts", default=",".join(PARTS))
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--python", default="python3")
    args = parser.parse_args(argv)
    parts = [p for p in args.parts.split(",") if p]
    unknown = [p for p in parts if p not in PARTS]
    if unknown or not parts:
        parser.error(f"--parts: unknown {unknown}; choose from {PARTS}")
    if args.seconds <= 0:
        parser.error("--seconds must be positive")
    args.parts = parts
    return args


def probe_torch(python):
    """The machine's torch: version, library folders, visible GPUs."""
    code = (
        "import json, os, glob, torch\n"
        "root = os.path.dirname(torch.__file__)\n"
        "site = os.path.dirname(root)\n"
        "libs = [os.path.join(root, 'lib')] + sorted(glob.glob(os.path.join("
        "site, 'nvidia', '*', 'lib'))) + sorted(glob.glob(os.path.join(site, "
        "'nvidia', 'cu*', 'lib')))\n"
        "n = torch.cuda.device_count() if torch.cuda.is_available() else 0\n"
        "print(json.dumps({'version': torch.__version__, 'cuda': "
        "torch.version.cuda, 'lib_dirs': libs, 'gpus': [torch.cuda."
        "get_device_name(i) for i in range(n)]}))\n")
    try:
        out = subprocess.run([python, "-c", code], capture_output=True,
                             text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as error:
        return {"error": str(error), "gpus": [], "lib_dirs": []}
    if out.returncode != 0:
        return {"error": out.stderr.strip()[-500:], "gpus": [], "lib_dirs": []}
    return json.loads(out.stdout.strip().splitlines()[-1])


def unpack_libraries(pack):
    """Decompresses the pack's xz-compressed libraries (pack_daemon.sh
    compresses the large ones to fit what travels) beside themselves, once."""
    lib = os.path.join(pack, "lib")
    for name in sorted(glob.glob(os.path.join(lib, "*.xz"))):
        target = name[:-len(".xz")]
        if not os.path.exists(target):
            with lzma.open(name) as src, open(target + ".part", "wb") as dst:
                shutil.copyfileobj(src, dst)
            os.replace(target + ".part", target)


def library_path(pack, torch_info):
    dirs = [os.path.join(pack, "lib")] + torch_info.get("lib_dirs", [])
    dirs += ["/usr/local/cuda/lib64"]
    return ":".join(d for d in dirs if os.path.isdir(d))


def run(cmd, env, log_path, timeout):
    """Runs `cmd`, its output to log_path: (exit status, output tail)."""
    with open(log_path, "w") as log:
        try:
            status = subprocess.run(cmd, env=env, stdout=log,
                                    stderr=subprocess.STDOUT,
                                    timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            status = "timeout"
        except OSError as error:
            log.write(str(error))
            status = "not started"
    with open(log_path) as log:
        return status, log.read()[-2000:]


def part(status, reason="", **details):
    result = {"status": status}
    if reason:
        result["reason"] = reason
    result.update(details)
    return result


def check_kernels(ctx):
    """(a) The GPU test targets, each with its gtest JSON report."""
    tests, statuses = [], []
    for name in GPU_TESTS:
        binary = os.path.join(ctx.pack, "bin", name)
        report = os.path.join(ctx.out, f"kernels_{name}.json")
        status, tail = run([binary, f"--gtest_output=json:{report}"], ctx.env,
                           os.path.join(ctx.out, f"kernels_{name}.log"), 240)
        cases = gtest_cases(report)
        skipped = [c for c in cases if c["result"] == "SKIPPED"]
        if status != 0:
            verdict = "FAILED"
        elif cases and len(skipped) == len(cases):
            verdict = "SKIPPED"
        else:
            verdict = "PASSED" if cases else "FAILED"
        reason = ""
        if verdict == "SKIPPED":
            reason = NO_DEVICE if NO_DEVICE in tail else "every test skipped"
        elif verdict == "FAILED":
            reason = f"exit status {status}: {tail[-300:]}"
        tests.append({"test": name, "status": verdict, "reason": reason,
                      "cases": cases})
        statuses.append(verdict)
    return part(overall(statuses), first_reason(tests), tests=tests)


def gtest_cases(report):
    try:
        with open(report) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return []
    cases = []
    for suite in data.get("testsuites", []):
        for case in suite.get("testsuite", []):
            failed = bool(case.get("failures"))
            result = case.get("result", "COMPLETED")
            cases.append({"name": f"{suite['name']}.{case['name']}",
                          "result": "FAILED" if failed else
                          ("SKIPPED" if result == "SKIPPED" else "PASSED")})
    return cases


def overall(statuses):
    if "FAILED" in statuses:
        return "FAILED"
    return "PASSED" if "PASSED" in statuses else "SKIPPED"


def first_reason(entries):
    for entry in entries:
        if entry.get("reason"):
            return entry["reason"]
    return ""


def ensure_model(ctx):
    """The SigLIP-so400m-shaped folder (generated once, 1.6 GB)."""
    if ctx.args.model:
        return ctx.args.model
    folder = os.path.join(os.path.dirname(os.path.abspath(ctx.out)),
                          "gpu_check_siglip_so400m")
    if not os.path.exists(os.path.join(folder, "model.safetensors")):
        status, tail = run([ctx.args.python, os.path.join(
            REPO, "benchmarks/drivers/gen_siglip_so400m.py"), folder],
            ctx.env, os.path.join(ctx.out, "gen_siglip.log"), 300)
        if status != 0:
            raise RuntimeError(f"gen_siglip_so400m.py failed: {tail[-300:]}")
    return folder


def check_experiment(ctx):
    """(b) layerwise_casting_benchmark on cuda:0."""
    bench = os.path.join(ctx.pack, "bin", "layerwise_casting_benchmark")
    if not ctx.gpus:
        # The benchmark checks the device before reading the model: its own
        # answer is the reason.
        status, tail = run([bench, "--model=/nonexistent", "--device=cuda:0"],
                           ctx.env, os.path.join(ctx.out, "experiment.log"), 60)
        if status == 3:
            return part("SKIPPED", tail.strip().splitlines()[-1])
        return part("FAILED", f"exit status {status} without a GPU: {tail}")
    try:
        model = ensure_model(ctx)
    except RuntimeError as error:
        return part("FAILED", str(error))
    report = os.path.join(ctx.out, "experiment.json")
    status, tail = run([bench, f"--model={model}", "--device=cuda:0",
                        "--batches=1,4,16", "--configs=" + ",".join(CONFIGS),
                        "--runs=3,16:5", "--warmup=1", f"--json={report}"],
                       ctx.env, os.path.join(ctx.out, "experiment.log"), 360)
    if status != 0:
        return part("FAILED", f"exit status {status}: {tail[-300:]}")
    with open(report) as f:
        return part("PASSED", table=experiment_table(json.load(f)),
                    raw="experiment.json")


def experiment_table(bench):
    """Footprint and peak by configuration and batch (MB = 2^20 bytes)."""
    rows = []
    for config in bench.get("results", []):
        for batch in config.get("batches", []):
            rows.append({key: value for key, value in
                         {"config": config.get("config"),
                          "footprint_mb": config.get("footprint_mb"),
                          "batch": batch.get("batch"),
                          "peak_mb": batch.get("peak_mb"),
                          "latency_median_s": batch.get("latency_median_s")
                          }.items()
                         if value is not None})
    return rows


def write_npy(path, shape):
    """A float32 .npy of zeros, without numpy."""
    header = ("{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }"
              % "".join(f"{d}, " for d in shape))
    header += " " * (63 - (len(header) + 10) % 64) + "\n"
    count = 1
    for d in shape:
        count *= d
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)))
        f.write(header.encode("latin1"))
        f.write(b"\x00" * (4 * count))


def write_repository(ctx, model_dir):
    repo = os.path.join(ctx.out, "repository")
    folder = os.path.join(repo, MODEL)
    os.makedirs(folder, exist_ok=True)
    for name in ("config.json", "model.safetensors"):
        source = os.path.join(model_dir, name) if model_dir else ""
        link = os.path.join(folder, name)
        if source and os.path.exists(source) and not os.path.lexists(link):
            os.symlink(os.path.abspath(source), link)
    with open(os.path.join(folder, "config.pbtxt"), "w") as f:
        f.write('max_batch_size: 8\narchitecture: "siglip_vision_model"\n'
                'load_policy: LOAD_POLICY_STARTUP\n'
                'instance_group { kind: KIND_GPU gpus: [0] }\n'
                'dynamic_batching { max_queue_delay_microseconds: 2000 }\n'
                'weights {\n  residency: RESIDENCY_RESIDENT\n'
                '  materialization: MATERIALIZATION_EAGER\n'
                '  compute_copy: COMPUTE_COPY_TRANSIENT\n  prefetch: true\n'
                '  casting {\n    storage_dtype: STORAGE_DTYPE_F8_E5M2\n'
                '    compute_dtype: COMPUTE_DTYPE_BF16\n  }\n}\n')
    return repo


def client(ctx, *args, timeout=30):
    cmd = [os.path.join(ctx.pack, "bin", "castserve-client"),
           f"--url=127.0.0.1:{GRPC_PORT}", f"--timeout-seconds={timeout}"]
    try:
        out = subprocess.run(cmd + list(args), env=ctx.env, capture_output=True,
                             text=True, timeout=timeout + 10)
    except subprocess.TimeoutExpired:
        return "timeout", ""
    return out.returncode, out.stdout + out.stderr


def scrape_metrics():
    try:
        with urllib.request.urlopen(
                f"http://127.0.0.1:{METRICS_PORT}/metrics", timeout=10) as r:
            text = r.read().decode()
    except OSError as error:
        return {"error": str(error)}
    wanted = ("castserve_device_", "castserve_model_batch_peak_bytes_sum",
              "castserve_model_batch_peak_bytes_count",
              "castserve_memory_budget_bytes", "castserve_model_state")
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith(wanted) and " " in line}


def start_daemon(ctx, repo):
    log = open(os.path.join(ctx.out, "daemon.log"), "w")
    daemon = subprocess.Popen(
        [os.path.join(ctx.pack, "bin", "castserve"),
         f"--model-repository={repo}", f"--grpc-port={GRPC_PORT}",
         f"--metrics-port={METRICS_PORT}", "--http-port=off"],
        env=ctx.env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 180
    while time.time() < deadline and daemon.poll() is None:
        status, out = client(ctx, "index", timeout=5)
        if status == 0 and ('"READY"' in out or "UNAVAILABLE" in out):
            return daemon, out
        time.sleep(1)
    return daemon, ""


def stop_daemon(daemon):
    if daemon.poll() is None:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=60)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()


def drive_load(ctx, inputs, concurrency=8):
    """Closed loop: `concurrency` castserve-client processes for --seconds."""
    end = time.time() + ctx.args.seconds
    done = failed = 0
    running = []
    while time.time() < end or running:
        while time.time() < end and len(running) < concurrency:
            running.append(subprocess.Popen(
                [os.path.join(ctx.pack, "bin", "castserve-client"),
                 f"--url=127.0.0.1:{GRPC_PORT}", "--timeout-seconds=60",
                 "infer", MODEL, f"--inputs=pixel_values={inputs}",
                 "--outputs=pooler_output"],
                env=ctx.env, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL))
        still = []
        for proc in running:
            if proc.poll() is None:
                still.append(proc)
            elif proc.returncode == 0:
                done += 1
            else:
                failed += 1
        running = still
        time.sleep(0.005)
    return {"concurrency": concurrency, "seconds": ctx.args.seconds,
            "requests": done, "failed": failed,
            "requests_per_second": done / ctx.args.seconds}


def check_daemon(ctx):
    """(c) castserve on KIND_GPU, driven by castserve-client, scraped."""
    model_dir = ""
    if ctx.gpus:
        try:
            model_dir = ensure_model(ctx)
        except RuntimeError as error:
            return part("FAILED", str(error))
    repo = write_repository(ctx, model_dir)
    daemon, index = start_daemon(ctx, repo)
    try:
        if not index:
            return part("FAILED", "the daemon did not answer; see daemon.log")
        if not ctx.gpus:
            metrics = scrape_metrics()
            if NO_DEVICE in index:
                return part("SKIPPED", f"model UNAVAILABLE: {NO_DEVICE}",
                            index=parse_json(index), metrics=metrics)
            return part("FAILED", f"expected '{NO_DEVICE}' without a GPU",
                        index=index)
        inputs = os.path.join(ctx.out, "pixel_values.npy")
        write_npy(inputs, (1, 3, 384, 384))
        load = drive_load(ctx, inputs)
        _, stats = client(ctx, "stats", MODEL)
        metrics = scrape_metrics()
        ok = load["requests"] > 0 and load["failed"] == 0 and any(
            'device="cuda:0"' in key for key in metrics)
        return part("PASSED" if ok else "FAILED",
                    "" if ok else "failed requests or no cuda:0 metrics",
                    load=load, metrics=metrics, statistics=parse_json(stats))
    finally:
        stop_daemon(daemon)


def version_tuple(text):
    return tuple(int(p) for p in text.split(".") if p.isdigit())


def check_glibc(pack):
    """Why the packed binaries cannot run on this glibc, or ""."""
    try:
        with open(os.path.join(pack, "GLIBC_REQUIRED")) as f:
            required = f.read().strip()
    except OSError:
        return ""
    library, version = platform.libc_ver()
    if library != "glibc" or not version:
        return ""
    if version_tuple(version) < version_tuple(required):
        return (f"the pack needs glibc >= {required}, this machine has "
                f"{version}: build and pack on an older system")
    return ""


def parse_json(text):
    try:
        return json.loads(text)
    except ValueError:
        return text


class Context:
    pass


def main(argv):
    args = parse_args(argv)
    started = time.time()
    os.makedirs(args.out_dir, exist_ok=True)
    ctx = Context()
    ctx.args, ctx.out, ctx.pack = args, args.out_dir, os.path.abspath(args.pack)
    torch_info = probe_torch(args.python)
    ctx.gpus = torch_info.get("gpus", [])
    unpack_libraries(ctx.pack)
    ctx.env = dict(os.environ, LD_LIBRARY_PATH=library_path(ctx.pack, torch_info))
    results = {"script": "tools/device/gpu_check.sh", "host": platform.node(),
               "machine": platform.machine(), "cpus": os.cpu_count(),
               "torch": torch_info, "gpus": ctx.gpus, "parts": {}}
    missing = [b for b in ("castserve", "castserve-client")
               if not os.path.exists(os.path.join(ctx.pack, "bin", b))]
    glibc_problem = check_glibc(ctx.pack)
    checks = {"kernels": check_kernels, "experiment": check_experiment,
              "daemon": check_daemon}
    for name in PARTS:
        if name not in args.parts:
            results["parts"][name] = part("SKIPPED", "not in --parts")
        elif missing:
            results["parts"][name] = part(
                "FAILED", f"{ctx.pack} lacks {missing}: run "
                "tools/device/pack_daemon.sh where Bazel is")
        elif glibc_problem:
            results["parts"][name] = part("FAILED", glibc_problem)
        elif "error" in torch_info and name != "kernels":
            results["parts"][name] = part("SKIPPED", "no torch: " +
                                          torch_info["error"][-200:])
        else:
            begin = time.time()
            results["parts"][name] = checks[name](ctx)
            results["parts"][name]["seconds"] = round(time.time() - begin, 1)
        print(f"gpu_check: {name}: {results['parts'][name]['status']} "
              f"{results['parts'][name].get('reason', '')}", flush=True)
    results["elapsed_seconds"] = round(time.time() - started, 1)
    with open(os.path.join(args.out_dir, "results.json"), "w") as f:
        json.dump(results, f, indent=2)
    return 1 if any(p["status"] == "FAILED"
                    for p in results["parts"].values()) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
