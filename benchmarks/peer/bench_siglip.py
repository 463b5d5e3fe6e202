"""`run_peer.py siglip`: SigLIP-base vision tower forward latency, castserve
(ModelInfer round trips to the daemon, one client) against transformers'
SiglipVisionModel in-process, in the same dtypes, at batch 1 and 8.

Checkpoint: a SigLIP-base-shaped folder with seeded random weights
(google/siglip-base-patch16-224's vision config: hidden 768, 12 layers, 12
heads, MLP 3072, patch 16, image 224, attention-pooling head), written once
with transformers (SiglipVisionConfig + SiglipVisionModel, save_pretrained,
safetensors) unless it exists.

Configurations (castserve config.pbtxt | Python):
  f32       resident f32, eager                 | from_pretrained in f32
  bf16      resident bf16 storage = bf16 compute | model.to(torch.bfloat16)
  fp8_f32   resident fp8 e4m3 (scaling from --fp8-scaling), transient f32
            compute copies, prefetch, buffer reuse
                                                 | f32 model + diffusers
            apply_layerwise_casting(float8_e4m3fn -> float32)
  fp8_bf16  the same with bf16 compute            | bf16 model + diffusers
            apply_layerwise_casting(float8_e4m3fn -> bfloat16)

castserve serves all four from one daemon (max_batch_size 8, no dynamic
batching: each request runs alone); Python holds all four models. Each round
runs every (batch, configuration) once on each side, sides alternating which
goes first; after `--warmup` untimed forwards per pair, figures are the
median over rounds. castserve's time is the client's round trip (request
encoding and the 1x768 pooler_output reply included); the Python time is the
bare forward.
"""

import json
import os
import shutil
import time

import numpy as np

import common

SIGLIP_BASE = dict(hidden_size=768, intermediate_size=3072,
                   num_hidden_layers=12, num_attention_heads=12,
                   num_channels=3, image_size=224, patch_size=16,
                   hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-6)
CONFIGS = ("f32", "bf16", "fp8_f32", "fp8_bf16")
TARGETS = {"f32": 1.0, "bf16": 1.0, "fp8_f32": 1.1, "fp8_bf16": 1.1}
# nn.MultiheadAttention (the pooling head's attention) reads out_proj.weight
# directly instead of calling out_proj, so diffusers' hooks never upcast it
# and the forward fails on an fp8 weight. Both sides leave it uncast (0.6 M of
# 93 M parameters), so that they cast the same set of weights.
EXTRA_SKIP = "head.attention.out_proj"
SCALING = {"none": "SCALING_NONE", "per_tensor": "SCALING_PER_TENSOR",
           "per_row": "SCALING_PER_ROW"}


def add_arguments(parser):
    parser.add_argument("--checkpoint",
                        default=os.path.join(common.BENCH_DIR, "siglip-base"),
                        help="SigLIP-base-shaped folder; made if missing")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-sizes", default="1,8")
    parser.add_argument("--configs", default=",".join(CONFIGS),
                        help="subset of " + ",".join(CONFIGS))
    parser.add_argument("--warmup", type=int, default=2,
                        help="untimed forwards per side, configuration, batch")
    parser.add_argument("--fp8-scaling", choices=sorted(SCALING),
                        default="per_row",
                        help="castserve fp8 scaling (default: per_row, as "
                             "the shipped minilm config; diffusers has none)")


def ensure_checkpoint(path, seed):
    """Writes the seeded random SigLIP-base-shaped folder unless present."""
    if os.path.exists(os.path.join(path, "config.json")) and \
            os.path.exists(os.path.join(path, "model.safetensors")):
        return False
    import torch
    from transformers import SiglipVisionConfig, SiglipVisionModel
    torch.manual_seed(seed)
    config = SiglipVisionConfig(**SIGLIP_BASE)
    config.architectures = ["SiglipVisionModel"]
    model = SiglipVisionModel(config).eval()
    tmp = path + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    add_vision_model_prefix(os.path.join(tmp, "model.safetensors"))
    os.replace(tmp, path)
    return True


def add_vision_model_prefix(safetensors_path):
    """Renames every tensor to `vision_model.<name>`: the layout of the
    published google/siglip-* checkpoints, which castserve requires.
    transformers 5's SiglipVisionModel saves without the prefix (its module
    tree is flat) and loads either layout."""
    from safetensors.torch import load_file, save_file
    tensors = load_file(safetensors_path)
    renamed = {(k if k.startswith("vision_model.") else "vision_model." + k):
               v.contiguous() for k, v in tensors.items()}
    save_file(renamed, safetensors_path, metadata={"format": "pt"})


def castserve_config(config, fp8_scaling, max_batch):
    """config.pbtxt for one configuration."""
    head = (f'max_batch_size: {max_batch}\n'
            f'checkpoint {{ path: "hf" }}\n'
            f'architecture: "siglip_vision_model"\n'
            f'load_policy: LOAD_POLICY_STARTUP\n'
            f'instance_group {{ kind: KIND_CPU count: 1 }}\n')
    resident = ("  residency: RESIDENCY_RESIDENT\n"
                "  materialization: MATERIALIZATION_EAGER\n")
    if config == "f32":
        body = resident
    elif config == "bf16":
        body = resident + ("  compute_copy: COMPUTE_COPY_CACHED\n"
                           "  casting {\n"
                           "    storage_dtype: STORAGE_DTYPE_BF16\n"
                           "    compute_dtype: COMPUTE_DTYPE_BF16\n  }\n")
    else:
        compute = "COMPUTE_DTYPE_F32" if config == "fp8_f32" else \
            "COMPUTE_DTYPE_BF16"
        body = resident + ("  compute_copy: COMPUTE_COPY_TRANSIENT\n"
                           "  prefetch: true\n"
                           "  reuse_transient_buffers: true\n"
                           "  casting {\n"
                           "    storage_dtype: STORAGE_DTYPE_F8_E4M3FN\n"
                           f"    compute_dtype: {compute}\n"
                           f"    scaling: {SCALING[fp8_scaling]}\n"
                           f'    skip_modules_pattern: "{EXTRA_SKIP}"\n  }}\n')
    return head + "weights {\n" + body + "}\n"


def python_model(checkpoint, config):
    """The transformers model for one configuration, as a user would set it
    up."""
    import torch
    from transformers import SiglipVisionModel
    model = SiglipVisionModel.from_pretrained(checkpoint,
                                              dtype=torch.float32).eval()
    compute = torch.bfloat16 if config in ("bf16", "fp8_bf16") else \
        torch.float32
    if compute != torch.float32:
        model = model.to(compute)
    if config.startswith("fp8"):
        from diffusers.hooks import apply_layerwise_casting
        from diffusers.hooks.layerwise_casting import \
            DEFAULT_SKIP_MODULES_PATTERN
        apply_layerwise_casting(
            model, storage_dtype=torch.float8_e4m3fn, compute_dtype=compute,
            skip_modules_pattern=DEFAULT_SKIP_MODULES_PATTERN + (EXTRA_SKIP,))
    return model, compute


def python_forward(model, compute, pixels):
    """One forward; returns (seconds, process CPU seconds, pooler_output)."""
    import torch
    x = torch.from_numpy(pixels).to(compute)
    cpu0, t0 = time.process_time(), time.perf_counter()
    with torch.inference_mode():
        out = model(pixel_values=x).pooler_output
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    return elapsed, cpu, out.float().numpy()


def castserve_forward(client, child, model, pixels):
    """One ModelInfer round trip; returns (seconds, daemon CPU seconds,
    pooler_output)."""
    import tritonclient.grpc as grpcclient
    tensor = grpcclient.InferInput("pixel_values", list(pixels.shape), "FP32")
    tensor.set_data_from_numpy(pixels)
    outputs = [grpcclient.InferRequestedOutput("pooler_output")]
    cpu0, t0 = common.proc_cpu_seconds(child.pid), time.perf_counter()
    result = client.infer(model, [tensor], outputs=outputs, client_timeout=600)
    elapsed = time.perf_counter() - t0
    cpu = common.proc_cpu_seconds(child.pid) - cpu0
    return elapsed, cpu, result.as_numpy("pooler_output")


def check_signature(client, model):
    """castserve's siglip signature as ModelMetadata reports it."""
    meta = client.get_model_metadata(model, as_json=True)
    return {"inputs": meta["inputs"], "outputs": meta["outputs"]}


def run(args, children, workdir):
    import torch
    import tritonclient.grpc as grpcclient

    common.wait_for_file(args.castserve, what="castserve binary")
    torch.set_num_threads(args.threads)
    configs = [c for c in args.configs.split(",") if c]
    batches = [int(b) for b in args.batch_sizes.split(",")]
    if ensure_checkpoint(args.checkpoint, args.seed):
        print(f"wrote {args.checkpoint}")
    result = {"subcommand": "siglip", "args": common.args_dict(args),
              "environment": common.environment(args.castserve, args.threads)}
    repo = os.path.join(workdir, "repo")
    for config in configs:
        model_dir = os.path.join(repo, "siglip_" + config)
        os.makedirs(model_dir)
        with open(os.path.join(model_dir, "config.pbtxt"), "w") as f:
            f.write(castserve_config(config, args.fp8_scaling,
                                     max(batches)))
        os.symlink(os.path.abspath(args.checkpoint),
                   os.path.join(model_dir, "hf"))
    child, port, startup, flags = common.start_castserve(
        children, args.castserve, repo, args.castserve_flag, args.threads,
        os.path.join(workdir, "castserve.log"))
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
    for config in configs:
        common.wait_model_ready(client, "siglip_" + config, child)
    result["castserve_startup_s"] = time.monotonic() - child.spawned
    result["castserve_flags"] = flags
    result["castserve_signature"] = check_signature(client,
                                                    "siglip_" + configs[0])
    print(f"castserve ready ({startup:.2f} s to 'ready', all "
          f"{len(configs)} models loaded); signature "
          f"{json.dumps(result['castserve_signature'])}")

    print("loading the Python models")
    python = {c: python_model(args.checkpoint, c) for c in configs}
    rng = np.random.default_rng(args.seed)
    pixels = {b: rng.standard_normal((b, 3, 224, 224), dtype=np.float32)
              for b in batches}

    with common.bench_lock(not args.no_lock):
        errors = warmup(args, configs, batches, python, client, child,
                        pixels)
        result["pooler_rel_err"] = errors
        samples = timed_rounds(args, configs, batches, python, client,
                               child, pixels, children)
    result["castserve_vm_hwm_bytes"] = common.proc_memory(
        child.pid).get("VmHWM")
    result["python_vm_hwm_bytes"] = common.proc_memory(
        os.getpid()).get("VmHWM")
    result["samples"] = samples
    result["summary"], result["ratios"] = report(samples, configs,
                                                 batches, errors)
    common.write_json(args.out, result)


def warmup(args, configs, batches, python, client, child, pixels):
    """Untimed forwards; returns pooler_output relative errors (batch of the
    first size) of each side against Python f32, and castserve against
    Python in the same configuration."""
    outputs = {}
    for b in batches:
        for config in configs:
            for _ in range(max(args.warmup, 1)):
                outputs[("castserve", config, b)] = castserve_forward(
                    client, child, "siglip_" + config, pixels[b])[2]
                outputs[("python", config, b)] = python_forward(
                    *python[config], pixels[b])[2]
    b = batches[0]
    errors = {}
    reference = outputs.get(("python", "f32", b))
    for config in configs:
        cs, py = outputs[("castserve", config, b)], outputs[("python", config, b)]
        errors[config] = {"castserve_vs_python_same_config": common.rel_l2(cs, py)}
        if reference is not None:
            errors[config]["castserve_vs_python_f32"] = common.rel_l2(cs, reference)
            errors[config]["python_vs_python_f32"] = common.rel_l2(py, reference)
    return errors


def timed_rounds(args, configs, batches, python, client, child, pixels,
                 children):
    """Interleaved timed forwards; a list of sample dicts."""
    samples = []
    for r in range(args.rounds):
        for b in batches:
            for config in configs:
                sides = ("castserve", "python") if r % 2 == 0 else \
                    ("python", "castserve")
                for side in sides:
                    with common.ForeignCpu(children) as foreign:
                        if side == "castserve":
                            seconds, cpu, _ = castserve_forward(
                                client, child, "siglip_" + config, pixels[b])
                        else:
                            seconds, cpu, _ = python_forward(*python[config],
                                                             pixels[b])
                    samples.append({"round": r, "batch": b, "config": config,
                                    "side": side, "seconds": seconds,
                                    "cpu_seconds": cpu,
                                    "foreign_cpu_share": foreign.share})
                    print(f"  round {r} batch {b} {config:9s} {side:9s} "
                          f"{seconds * 1e3:9.1f} ms  cpu {cpu * 1e3:9.1f} ms"
                          f"  others' CPU {foreign.share:.0%}", flush=True)
    return samples


def report(samples, configs, batches, errors):
    """Prints the latency and ratio tables; returns (summary, ratios)."""
    summary, ratios, rows, ratio_rows = {}, {}, [], []
    for b in batches:
        for config in configs:
            pick = {side: [s for s in samples if s["batch"] == b and
                           s["config"] == config and s["side"] == side]
                    for side in ("castserve", "python")}
            key = f"{config}@{b}"
            summary[key] = {side: {
                "seconds": common.summary([s["seconds"] for s in pick[side]]),
                "cpu_seconds": common.summary([s["cpu_seconds"]
                                               for s in pick[side]])}
                for side in pick}
            by_round = {}
            for side, items in pick.items():
                for s in items:
                    by_round.setdefault(s["round"], {})[side] = s["seconds"]
            ratios[key] = common.summary(
                [v["castserve"] / v["python"] for v in by_round.values()
                 if "castserve" in v and "python" in v])
            cs, py = summary[key]["castserve"], summary[key]["python"]
            rows.append([b, config, common.fmt_summary(cs["seconds"], 1, 1e3),
                         common.fmt_summary(py["seconds"], 1, 1e3),
                         common.fmt_summary(cs["cpu_seconds"], 0, 1e3),
                         common.fmt_summary(py["cpu_seconds"], 0, 1e3)])
            cpu_ratio = None
            if cs["cpu_seconds"] and py["cpu_seconds"]:
                cpu_ratio = cs["cpu_seconds"]["median"] / \
                    py["cpu_seconds"]["median"]
            ratios[key + ":cpu"] = cpu_ratio
            target = TARGETS[config]
            ratio = ratios[key]
            ratio_rows.append([b, config, common.fmt_summary(ratio, 3),
                               f"<= {target}",
                               common.verdict(ratio and ratio["median"], "<=",
                                              target),
                               f"{cpu_ratio:.3f}" if cpu_ratio else "-"])
    common.print_table("SigLIP-base forward latency, ms: median (min-max) "
                       "over rounds; CPU = process CPU time per forward",
                       ["batch", "config", "castserve ms", "python ms",
                        "castserve CPU ms", "python CPU ms"], rows)
    common.print_table("Ratios castserve / Python latency (per-round median "
                       "(min-max)); CPU: ratio of median process CPU time",
                       ["batch", "config", "ratio", "target", "", "CPU ratio"],
                       ratio_rows)
    common.print_table(
        "pooler_output relative L2 error (first batch size)",
        ["config", "castserve vs python same config", "castserve vs python f32",
         "python vs python f32"],
        [[c, f"{e['castserve_vs_python_same_config']:.2e}",
          f"{e.get('castserve_vs_python_f32', float('nan')):.2e}",
          f"{e.get('python_vs_python_f32', float('nan')):.2e}"]
         for c, e in errors.items()])
    print("\n" + common.foreign_cpu_note(
        [s["foreign_cpu_share"] for s in samples]))
    return summary, ratios
