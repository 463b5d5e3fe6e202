#!/usr/bin/env python3
"""The Python side of `run_peer.py llama`, one measurement per process:
import torch + transformers, `AutoModelForCausalLM.from_pretrained(DIR,
dtype=torch.float32)` (eager load of the bf16 checkpoint, upcast to f32),
then two forwards of the same tokens without a KV cache. Writes its timings
(and the last position's logits, for the driver to compare with castserve's)
and exits.

Usage: llama_python.py --checkpoint DIR --tokens 5,17,... --spawned EPOCH
                       --out JSON [--logits NPY] [--threads 1]
"""

import argparse
import json
import time


def vm_hwm():
    """Peak RSS of this process so far, bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--tokens", required=True,
                        help="comma-separated input token ids")
    parser.add_argument("--spawned", type=float, required=True,
                        help="time.time() when the driver spawned us")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", required=True)
    parser.add_argument("--logits", default=None)
    args = parser.parse_args()

    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM
    torch.set_num_threads(args.threads)
    record = {"startup_s": time.time() - args.spawned,
              "threads": torch.get_num_threads()}

    t0 = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(args.checkpoint,
                                                 dtype=torch.float32).eval()
    record["load_s"] = time.perf_counter() - t0
    record["vm_hwm_after_load_bytes"] = vm_hwm()

    ids = torch.tensor([[int(t) for t in args.tokens.split(",")]])
    for name in ("first_forward_s", "second_forward_s"):
        cpu0, t0 = time.process_time(), time.perf_counter()
        with torch.inference_mode():
            logits = model(input_ids=ids, use_cache=False).logits
        record[name] = time.perf_counter() - t0
        record[name.replace("_s", "_cpu_s")] = time.process_time() - cpu0
    record["vm_hwm_bytes"] = vm_hwm()
    if args.logits:
        np.save(args.logits, logits[0, -1].float().numpy())
    with open(args.out, "w") as f:
        json.dump(record, f)


if __name__ == "__main__":
    main()
