"""llamacpp: castserve's generation against llama.cpp's server, side by side.

Both servers run at once, one pair at a time (castserve f32 resident against
llama.cpp F32, castserve bf16 storage against BF16, castserve fp8 e4m3
per-row storage against Q8_0; bf16c and fp8c: that storage computed in
bf16), with the same threads and the same KV
capacity in tokens (--kv-tokens: castserve's kv_cache_bytes holds that many
f32 tokens, llama.cpp's -c that many f16 tokens over --streams slots).
Requests go through both HTTP APIs (castserve's REST generate_stream,
llama.cpp's /completion with "stream": true), greedy, token ids in, a fixed
number of new tokens (ignore_eos), llama.cpp's prompt cache off. In each
round the two sides alternate which goes first, and every prompt is new
(seeded random ids), so nothing is served from a cache.

Per round and side:
  prefill     one request of --prefill-tokens prompt tokens and 1 new token:
              prompt tokens / time to the first token
  decode      one request of --prompt-tokens and --new-tokens: (new - 1) /
              (last token - first token); the server's CPU-seconds per new
              token beside it
  aggregate   --streams such requests at once: all new tokens / wall time,
              and CPU-seconds per token
Peak RSS: each server's VmHWM after the pair's rounds (the whole life of the
process: load, warm-up and every request), and castserve's bytes by kind
from /metrics (weights by storage dtype, KV pool).

Ratios are castserve / llama.cpp within each round (speed: higher is
better for castserve; CPU and RSS: lower), medians over rounds.
"""

import contextlib
import json
import os
import random
import re
import socket
import threading
import time
import urllib.error
import urllib.request

import common

PEER_HOME = os.environ.get("PEER_HOME",
                           os.path.expanduser("~/.cache/castserve/peer"))
# (name, castserve weights block, llama.cpp GGUF type). castserve's
# checkpoint is the bf16 benchmark folder; its f32 config makes a resident
# f32 copy at load (storage = compute, as llama.cpp's F32 file).
PAIRS = {
    "f32": ("""weights {
  residency: RESIDENCY_RESIDENT
  materialization: MATERIALIZATION_EAGER
  casting { storage_dtype: STORAGE_DTYPE_F32 compute_dtype: COMPUTE_DTYPE_F32 }
}""", "f32"),
    "bf16": ("""weights {
  residency: RESIDENCY_MAPPED
  compute_copy: COMPUTE_COPY_TRANSIENT
  prefetch: true
  reuse_transient_buffers: true
  casting { storage_dtype: STORAGE_DTYPE_BF16 compute_dtype: COMPUTE_DTYPE_F32 }
}""", "bf16"),
    # The same storage computed in bf16, as llama.cpp's BF16 products are
    # (activations rounded to bf16, vdpbf16ps).
    "bf16c": ("""weights {
  residency: RESIDENCY_MAPPED
  compute_copy: COMPUTE_COPY_TRANSIENT
  casting { storage_dtype: STORAGE_DTYPE_BF16 compute_dtype: COMPUTE_DTYPE_BF16 }
}""", "bf16"),
    "fp8": ("""weights {
  residency: RESIDENCY_RESIDENT
  materialization: MATERIALIZATION_EAGER
  compute_copy: COMPUTE_COPY_TRANSIENT
  prefetch: true
  reuse_transient_buffers: true
  casting { storage_dtype: STORAGE_DTYPE_F8_E4M3FN compute_dtype: COMPUTE_DTYPE_F32 scaling: SCALING_PER_ROW }
}""", "q8_0"),
    # The same fp8 storage computed in bf16: one vdpbf16ps per 32 weights
    # and row, where f32 compute takes one FMA per 16.
    "fp8c": ("""weights {
  residency: RESIDENCY_RESIDENT
  materialization: MATERIALIZATION_EAGER
  compute_copy: COMPUTE_COPY_TRANSIENT
  reuse_transient_buffers: true
  casting { storage_dtype: STORAGE_DTYPE_F8_E4M3FN compute_dtype: COMPUTE_DTYPE_BF16 scaling: SCALING_PER_ROW }
}""", "q8_0"),
}
HTTP_RE = re.compile(r"http_port=(\d+)")


def add_arguments(parser):
    parser.add_argument("--checkpoint",
                        default=os.path.join(common.BENCH_DIR, "llama-1b"),
                        help="castserve's checkpoint folder (default: "
                             "%(default)s)")
    parser.add_argument("--gguf-dir",
                        default=os.path.join(common.BENCH_DIR, "llama-1b-gguf"),
                        help="llama-1b-{f32,bf16,q8_0}.gguf (setup_llamacpp.sh)")
    parser.add_argument("--llama-server",
                        default=os.path.join(PEER_HOME, "bin", "llama-server"))
    parser.add_argument("--pairs", default="f32,bf16,fp8",
                        help="comma-separated subset of " + ",".join(PAIRS))
    parser.add_argument("--prefill-tokens", type=int, default=128)
    parser.add_argument("--prompt-tokens", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--streams", type=int, default=16)
    parser.add_argument("--stream-new-tokens", type=int, default=16,
                        help="new tokens of each aggregate stream")
    parser.add_argument("--kv-tokens", type=int, default=4096,
                        help="KV capacity of both servers, in tokens")
    parser.add_argument("--sides", default="castserve,llama.cpp",
                        help="which servers to run (one alone prints no "
                             "ratios)")


# ---------------------------------------------------------------------------
# The two servers
# ---------------------------------------------------------------------------


def kv_bytes_per_token_f32(checkpoint):
    with open(os.path.join(checkpoint, "config.json")) as f:
        c = json.load(f)
    head_dim = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    kv_heads = c.get("num_key_value_heads", c["num_attention_heads"])
    return c["num_hidden_layers"] * 2 * kv_heads * head_dim * 4


def start_castserve(args, children, workdir, pair):
    repo = os.path.join(workdir, f"repo-{pair}")
    model = os.path.join(repo, "llama")
    os.makedirs(model, exist_ok=True)
    link = os.path.join(model, "hf")
    if not os.path.lexists(link):
        os.symlink(os.path.abspath(args.checkpoint), link)
    kv_bytes = args.kv_tokens * kv_bytes_per_token_f32(args.checkpoint)
    with open(os.path.join(model, "config.pbtxt"), "w") as f:
        f.write(f"""checkpoint {{ path: "hf" }}
load_policy: LOAD_POLICY_STARTUP
generation {{
  kv_cache_bytes: {kv_bytes}
  max_sequences: {args.streams}
  max_waiting: {4 * args.streams}
}}
{PAIRS[pair][0]}
""")
    flags = [f for f in args.castserve_flag if not f.startswith("--http-port")]
    flags.append("--http-port=0")
    child, _, startup, used = common.start_castserve(
        children, args.castserve, repo, flags, args.threads,
        os.path.join(workdir, f"castserve-{pair}.log"), name=f"castserve-{pair}",
        timeout=900)
    match = HTTP_RE.search(child.log_text())
    if not match:
        raise RuntimeError(f"no http_port in {child.log_path}")
    child.http_port = int(match.group(1))
    child.kv_bytes = kv_bytes
    child.flags = used
    return child


def start_llama(args, children, workdir, pair):
    gguf = os.path.join(args.gguf_dir, f"llama-1b-{PAIRS[pair][1]}.gguf")
    port = common.free_port()
    argv = [args.llama_server, "-m", gguf, "--host", "127.0.0.1",
            "--port", str(port), "-t", str(args.threads), "-tb",
            str(args.threads), "-c", str(args.kv_tokens), "-np",
            str(args.streams), "--cache-ram", "0", "--no-webui"]
    child = children.spawn(f"llama-{pair}", argv,
                           common.thread_env(args.threads),
                           os.path.join(workdir, f"llama-{pair}.log"))
    child.http_port = port
    child.argv = argv
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        if not child.alive():
            raise RuntimeError(f"llama-server exited:\n{child.log_text()[-3000:]}")
        with contextlib.suppress(OSError):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health",
                                        timeout=2) as r:
                if r.status == 200:
                    return child
        time.sleep(0.2)
    raise RuntimeError("llama-server not ready in 900 s")


# ---------------------------------------------------------------------------
# One streamed request
# ---------------------------------------------------------------------------


def stream_request(side, child, prompt, new_tokens):
    """Sends one streaming greedy request; returns (times of each token's
    event since the send, tokens seen)."""
    if side == "castserve":
        path = "/v2/models/llama/generate_stream"
        body = {"input_ids": prompt, "max_tokens": new_tokens,
                "ignore_eos": True, "temperature": 0}
    else:
        path = "/completion"
        body = {"prompt": prompt, "n_predict": new_tokens, "stream": True,
                "ignore_eos": True, "temperature": 0, "top_k": 1,
                "cache_prompt": False, "return_tokens": True}
    data = json.dumps(body).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{child.http_port}{path}", data=data,
        headers={"Content-Type": "application/json"})
    start = time.monotonic()
    times = []
    try:
        response = urllib.request.urlopen(request, timeout=600)
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"{side}: HTTP {e.code} for {len(prompt)} prompt "
                           f"tokens: {e.read().decode(errors='replace')}")
    with response:
        for raw in response:
            line = raw.decode().strip()
            if not line.startswith("data:"):
                continue
            payload = line[5:].strip()
            if payload == "[DONE]":
                break
            event = json.loads(payload)
            if "error" in event:
                raise RuntimeError(f"{side}: {event['error']}")
            now = time.monotonic() - start
            key = "output_ids" if side == "castserve" else "tokens"
            times.extend([now] * len(event.get(key) or []))
            # llama.cpp holds back a token whose text is an incomplete UTF-8
            # sequence (byte tokens) and may end the stream without sending
            # it; its last event counts every token it generated.
            predicted = event.get("tokens_predicted") if event.get("stop") else None
            if predicted is not None and predicted > len(times):
                times.extend([now] * (predicted - len(times)))
    return times


def prompt_ids(rng, n, vocab):
    # Ids from the middle of the vocabulary: no special tokens.
    return [rng.randrange(1000, vocab - 1000) for _ in range(n)]


# ---------------------------------------------------------------------------
# Measurements
# ---------------------------------------------------------------------------


def measure(side, child, rng, args, vocab):
    out = {}
    times = stream_request(side, child,
                           prompt_ids(rng, args.prefill_tokens, vocab), 1)
    out["prefill_tok_s"] = args.prefill_tokens / times[0]
    out["ttft_prefill_s"] = times[0]

    cpu0 = common.proc_cpu_seconds(child.pid)
    times = stream_request(side, child,
                           prompt_ids(rng, args.prompt_tokens, vocab),
                           args.new_tokens)
    cpu = common.proc_cpu_seconds(child.pid) - cpu0
    if len(times) != args.new_tokens:
        raise RuntimeError(f"{side}: {len(times)} tokens, asked "
                           f"{args.new_tokens}")
    out["ttft_s"] = times[0]
    out["decode_tok_s"] = (len(times) - 1) / (times[-1] - times[0])
    out["decode_cpu_s_per_token"] = cpu / len(times)

    prompts = [prompt_ids(rng, args.prompt_tokens, vocab)
               for _ in range(args.streams)]
    results, errors = [None] * args.streams, []

    def one(i):
        try:
            results[i] = stream_request(side, child, prompts[i],
                                        args.stream_new_tokens)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=one, args=(i,))
               for i in range(args.streams)]
    cpu0 = common.proc_cpu_seconds(child.pid)
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - start
    cpu = common.proc_cpu_seconds(child.pid) - cpu0
    if errors:
        raise RuntimeError(f"{side} aggregate: {errors[0]}")
    tokens = sum(len(r) for r in results)
    out["aggregate_tok_s"] = tokens / wall
    out["aggregate_cpu_s_per_token"] = cpu / tokens
    out["aggregate_ttft_median_s"] = sorted(r[0] for r in results)[
        len(results) // 2]
    return out


def castserve_breakdown(child):
    """castserve's bytes by kind from /metrics (model gauges)."""
    samples = common.scrape_metrics(child.metrics_port,
                                    prefixes=("castserve_model_",
                                              "castserve_kv_",
                                              "castserve_generation_",
                                              "castserve_process_"))
    return {k: v for k, v in samples.items() if "bytes" in k}


SPEED = ("prefill_tok_s", "decode_tok_s", "aggregate_tok_s")
COST = ("decode_cpu_s_per_token", "aggregate_cpu_s_per_token", "ttft_s")


def run(args, children, workdir):
    with open(os.path.join(args.checkpoint, "config.json")) as f:
        vocab = json.load(f)["vocab_size"]
    pairs = [p.strip() for p in args.pairs.split(",") if p.strip()]
    for p in pairs:
        if p not in PAIRS:
            raise SystemExit(f"unknown pair '{p}' (known: {', '.join(PAIRS)})")
    env = {"threads": args.threads, "cpus": os.cpu_count(),
           "loadavg_start": os.getloadavg(),
           "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "castserve": common.castserve_version(args.castserve),
           "llama_server": args.llama_server}
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as f:
            env["cpu_model"] = next((l.split(":", 1)[1].strip() for l in f
                                     if l.startswith("model name")), None)
    result = {"subcommand": "llamacpp", "args": common.args_dict(args),
              "environment": env, "pairs": {}}
    rng = random.Random(1234)
    for pair in pairs:
        print(f"\n== pair {pair}: castserve {pair} vs llama.cpp "
              f"{PAIRS[pair][1].upper()}, {args.threads} thread(s)", flush=True)
        wanted = [x.strip() for x in args.sides.split(",")]
        sides = {}
        if "castserve" in wanted:
            sides["castserve"] = start_castserve(args, children, workdir, pair)
        if "llama.cpp" in wanted:
            sides["llama.cpp"] = start_llama(args, children, workdir, pair)
        cs, ll = sides.get("castserve"), sides.get("llama.cpp")
        # Untimed warm-up on both (first-request lazy work, prefetch order).
        for name, child in sides.items():
            stream_request(name, child, prompt_ids(rng, args.prompt_tokens,
                                                   vocab), 4)
        rounds = []
        with common.bench_lock(not args.no_lock):
            for r in range(args.rounds):
                order = list(sides) if r % 2 == 0 else list(sides)[::-1]
                foreign = common.ForeignCpu(children)
                with foreign:
                    row = {name: measure(name, sides[name], rng, args, vocab)
                           for name in order}
                row["foreign_cpu_share"] = foreign.share
                rounds.append(row)
                print(f"  round {r}: " + "; ".join(
                    f"{n} prefill {row[n]['prefill_tok_s']:.1f} decode "
                    f"{row[n]['decode_tok_s']:.2f} agg "
                    f"{row[n]['aggregate_tok_s']:.2f} tok/s" for n in sides) +
                    f"; others' CPU {foreign.share:.0%}", flush=True)
        memory = {name: common.proc_memory(child.pid)
                  for name, child in sides.items()}
        result["pairs"][pair] = {
            "llama_gguf": PAIRS[pair][1], "rounds": rounds, "memory": memory,
            "castserve_bytes": castserve_breakdown(cs) if cs else {},
            "castserve_kv_bytes": cs.kv_bytes if cs else None,
            "castserve_flags": cs.flags if cs else None,
            "llama_argv": ll.argv if ll else None}
        for child in sides.values():
            children.stop(child)
    report(result)
    common.write_json(args.out, result)


def report(result):
    rows = []
    for pair, data in result["pairs"].items():
        rounds = data["rounds"]
        for side in [s for s in ("castserve", "llama.cpp") if s in rounds[0]]:
            s = lambda k: common.summary([r[side][k] for r in rounds])  # noqa
            rows.append([
                f"{side} {pair if side == 'castserve' else data['llama_gguf'].upper()}",
                common.fmt_summary(s("prefill_tok_s"), 1),
                common.fmt_summary(s("decode_tok_s"), 2),
                common.fmt_summary(s("decode_cpu_s_per_token"), 3),
                common.fmt_summary(s("aggregate_tok_s"), 2),
                common.fmt_summary(s("aggregate_cpu_s_per_token"), 3),
                f"{common.mib(data['memory'][side].get('VmHWM')):.0f}"])
    common.print_table(
        f"Generation, {result['environment']['threads']} thread(s) "
        "(median (min-max) over rounds)",
        ["server", "prefill tok/s", "decode tok/s", "CPU s/token",
         "agg tok/s", "agg CPU s/token", "peak RSS MiB"], rows)
    ratio_rows = []
    for pair, data in result["pairs"].items():
        rounds = data["rounds"]
        if not all(s in rounds[0] for s in ("castserve", "llama.cpp")):
            continue
        med = lambda k: common.summary(  # noqa: E731
            [r["castserve"][k] / r["llama.cpp"][k] for r in rounds])
        rss = (data["memory"]["castserve"].get("VmHWM", 0) /
               max(data["memory"]["llama.cpp"].get("VmHWM", 1), 1))
        foreign = max(r["foreign_cpu_share"] for r in rounds)
        ratio_rows.append([
            f"{pair} / {data['llama_gguf'].upper()}",
            *(common.fmt_summary(med(k), 2) for k in SPEED),
            *(common.fmt_summary(med(k), 2) for k in COST[:2]),
            f"{rss:.2f}", f"{foreign:.0%}"])
    common.print_table(
        "castserve / llama.cpp, same round (speed: >1 castserve faster; "
        "CPU/token and RSS: <1 castserve leaner)",
        ["pair", "prefill", "decode", "aggregate", "CPU/token decode",
         "CPU/token agg", "peak RSS", "others' CPU max"], ratio_rows)
    for pair, data in result["pairs"].items():
        if data["castserve_bytes"]:
            print(f"\ncastserve {pair} bytes (/metrics):")
            for k, v in sorted(data["castserve_bytes"].items()):
                if v:
                    print(f"  {k} {common.mib(v):.1f} MiB")
