"""ort: castserve's embedding forward against ONNX Runtime, side by side.

all-MiniLM-L6-v2 by default, or --model / --onnx (setup_onnxruntime.sh: the
sha256-pinned PyPI folder, a BERT-base-shaped one, and their ONNX exports,
checked against transformers). ONNX Runtime runs in this
process (CPU provider, intra-op threads = --threads, inter-op 1, all graph
optimisations); castserve serves the same folder (f32 resident, eager, one
instance, no dynamic batching, max_batch_size 32) and is driven over REST
(KServe v2 infer, JSON). Both compute `pooler_output` from the same token
ids (seeded random ids, every position attended). Each round times every
(batch, sequence) shape on both sides, alternating which goes first: the
median of --iters requests after --warmup untimed ones. Ratios are speed
castserve / ORT (ORT's time / castserve's) within the round; castserve's
includes the HTTP round trip and JSON, ORT's does not (in-process), so the
table also shows castserve's own compute time from its ModelStatistics.
"""

import json
import os
import statistics
import time
import urllib.request

import numpy as np

import common


def add_arguments(parser):
    parser.add_argument("--model",
                        default=os.path.join(common.BENCH_DIR, "minilm-hf"))
    parser.add_argument("--onnx", default=os.path.join(
        common.BENCH_DIR, "minilm-onnx", "model.onnx"))
    parser.add_argument("--batches", default="1,8,32")
    parser.add_argument("--seqs", default="16,128")
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)


def start_castserve(args, children, workdir):
    repo = os.path.join(workdir, "repo")
    model = os.path.join(repo, "minilm")
    os.makedirs(model, exist_ok=True)
    os.symlink(os.path.abspath(args.model), os.path.join(model, "hf"))
    with open(os.path.join(model, "config.pbtxt"), "w") as f:
        f.write("""max_batch_size: 32
checkpoint { path: "hf" }
architecture: "bert"
load_policy: LOAD_POLICY_STARTUP
instance_group { kind: KIND_CPU count: 1 }
weights { residency: RESIDENCY_RESIDENT materialization: MATERIALIZATION_EAGER }
""")
    flags = [f for f in args.castserve_flag if not f.startswith("--http-port")]
    flags.append("--http-port=0")
    child, _, _, used = common.start_castserve(
        children, args.castserve, repo, flags, args.threads,
        os.path.join(workdir, "castserve.log"))
    import re
    child.http_port = int(re.search(r"http_port=(\d+)",
                                    child.log_text()).group(1))
    child.flags = used
    return child


def castserve_request(port, ids):
    b, s = ids.shape
    def tensor(name, values):
        return {"name": name, "shape": [b, s], "datatype": "INT64",
                "data": values.reshape(-1).tolist()}
    body = {"inputs": [tensor("input_ids", ids),
                       tensor("attention_mask", np.ones_like(ids)),
                       tensor("token_type_ids", np.zeros_like(ids))],
            "outputs": [{"name": "pooler_output"}]}
    data = json.dumps(body).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v2/models/minilm/infer", data=data,
        headers={"Content-Type": "application/json"})
    start = time.monotonic()
    with urllib.request.urlopen(request, timeout=120) as response:
        out = json.loads(response.read())
    elapsed = time.monotonic() - start
    pooled = np.asarray(out["outputs"][0]["data"], np.float32).reshape(b, -1)
    return elapsed, pooled


def castserve_compute_ns(port):
    """castserve's cumulative compute_infer ns and count (ModelStatistics)."""
    with urllib.request.urlopen(
            f"http://127.0.0.1:{port}/v2/models/minilm/stats", timeout=10) as r:
        stats = json.loads(r.read())["model_stats"][0]["inference_stats"]
    c = stats.get("compute_infer", {})
    return int(c.get("ns", 0)), int(c.get("count", 0))


def run(args, children, workdir):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(args.onnx, options,
                                   providers=["CPUExecutionProvider"])
    cs = start_castserve(args, children, workdir)
    batches = [int(x) for x in args.batches.split(",")]
    seqs = [int(x) for x in args.seqs.split(",")]
    rng = np.random.default_rng(7)

    def ort_run(ids):
        start = time.monotonic()
        out = session.run(["pooler_output"], {
            "input_ids": ids, "attention_mask": np.ones_like(ids),
            "token_type_ids": np.zeros_like(ids)})
        return time.monotonic() - start, out[0]

    result = {"subcommand": "ort", "args": common.args_dict(args),
              "environment": {
                  "threads": args.threads, "cpus": os.cpu_count(),
                  "onnxruntime": ort.__version__,
                  "castserve": common.castserve_version(args.castserve),
                  "castserve_flags": cs.flags,
                  "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                  "loadavg_start": os.getloadavg()},
              "rounds": []}
    with common.bench_lock(not args.no_lock):
        for r in range(args.rounds):
            row = {}
            foreign = common.ForeignCpu(children)
            with foreign:
                for b in batches:
                    for s in seqs:
                        ids = rng.integers(1000, 20000, (b, s), dtype=np.int64)
                        sides = {"ort": ort_run,
                                 "castserve": lambda x: castserve_request(
                                     cs.http_port, x)}
                        order = list(sides) if r % 2 == 0 else list(sides)[::-1]
                        cell = {}
                        for name in order:
                            for _ in range(args.warmup):
                                sides[name](ids)
                            if name == "castserve":
                                ns0, n0 = castserve_compute_ns(cs.http_port)
                            times = []
                            cpu0 = (common.proc_cpu_seconds(cs.pid)
                                    if name == "castserve" else
                                    time.process_time())
                            for _ in range(args.iters):
                                t, out = sides[name](ids)
                                times.append(t)
                            cpu1 = (common.proc_cpu_seconds(cs.pid)
                                    if name == "castserve" else
                                    time.process_time())
                            cell[name] = statistics.median(times)
                            # Process CPU per request: does each side keep
                            # to its threads? (ORT's is this driver's.)
                            cell[name + "_cpu"] = (cpu1 - cpu0) / args.iters
                            cell[name + "_out"] = out
                            if name == "castserve":
                                ns1, n1 = castserve_compute_ns(cs.http_port)
                                cell["castserve_compute"] = (
                                    (ns1 - ns0) / max(n1 - n0, 1) / 1e9)
                        diff = float(np.abs(cell.pop("ort_out") -
                                            cell.pop("castserve_out")).max())
                        cell["max_abs_diff_pooler"] = diff
                        row[f"{b}x{s}"] = cell
            row["foreign_cpu_share"] = foreign.share
            result["rounds"].append(row)
            print(f"round {r}: " + "; ".join(
                f"{k} ort {v['ort'] * 1e3:.1f} ms castserve "
                f"{v['castserve'] * 1e3:.1f} ms" for k, v in row.items()
                if isinstance(v, dict)) + f"; others' CPU {foreign.share:.0%}",
                flush=True)
    result["memory"] = {"castserve": common.proc_memory(cs.pid)}
    report(result, batches, seqs)
    common.write_json(args.out, result)


def report(result, batches, seqs):
    rows = []
    rounds = result["rounds"]
    for b in batches:
        for s in seqs:
            k = f"{b}x{s}"
            get = lambda f: common.summary([r[k][f] for r in rounds])  # noqa
            ratio = common.summary([r[k]["ort"] / r[k]["castserve"]
                                    for r in rounds])
            ratio_compute = common.summary(
                [r[k]["ort"] / r[k]["castserve_compute"] for r in rounds
                 if r[k]["castserve_compute"] > 0])
            ort_ms = get("ort")
            rows.append([k, common.fmt_summary(ort_ms, 2, 1e3),
                         common.fmt_summary(get("castserve"), 2, 1e3),
                         common.fmt_summary(get("castserve_compute"), 2, 1e3),
                         f"{b / ort_ms['median']:.0f}",
                         common.fmt_summary(ratio, 2),
                         common.fmt_summary(ratio_compute, 2),
                         f"{max(r[k]['max_abs_diff_pooler'] for r in rounds):.1e}",
                         common.fmt_summary(get("ort_cpu"), 1, 1e3)
                         if "ort_cpu" in rounds[0][k] else "-",
                         common.fmt_summary(get("castserve_cpu"), 1, 1e3)
                         if "castserve_cpu" in rounds[0][k] else "-"])
    common.print_table(
        f"{os.path.basename(os.path.normpath(result['args']['model']))}, "
        f"{result['environment']['threads']} thread(s): "
        "latency ms, median (min-max) over rounds; speed ratio castserve/ORT "
        "(>1 castserve faster)",
        ["batch x seq", "ORT in-process", "castserve REST",
         "castserve compute", "ORT sent/s", "speed served", "speed compute",
         "max |diff|", "CPU ms ORT", "CPU ms castserve"], rows)
