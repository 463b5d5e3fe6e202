#!/usr/bin/env python3
"""Times transformers loading a Llama-shaped folder and two forwards, one
process per measurement, for BENCHMARKS.md's FP8 entry beside
//benchmarks:lazy_load_benchmark:

    .venv-ref/bin/python benchmarks/drivers/transformers_forward.py DIR \\
        [--dtype=bfloat16] [--tokens=16] [--threads=2]

An FP8 folder (quantization_config quant_method "fp8") is dequantized by
transformers itself on a machine without a GPU (its quantizer switches to
dequantize=True): the weights become `--dtype` tensors at load. Prints one
line "result {json}": init seconds (from_pretrained), first and second
forward seconds (batch 1, `--tokens` seeded ids below 32000, as the C++
benchmark draws them), VmHWM and VmRSS after the forwards.
"""

import argparse
import json
import time

import torch
import transformers as tf


def status_bytes(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    model = tf.AutoModelForCausalLM.from_pretrained(
        args.model, dtype=getattr(torch, args.dtype)).eval()
    init = time.perf_counter() - start
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    torch.manual_seed(0)
    ids = torch.randint(0, 32000, (1, args.tokens))
    forwards = []
    with torch.inference_mode():
        for _ in range(2):
            start = time.perf_counter()
            model(input_ids=ids)
            forwards.append(time.perf_counter() - start)
    print("result " + json.dumps({
        "model": args.model, "dtype": args.dtype, "init_seconds": init,
        "forward_seconds": forwards, "parameter_bytes": weight_bytes,
        "vm_hwm_bytes": status_bytes("VmHWM"), "vm_rss_bytes": status_bytes("VmRSS"),
        "transformers": tf.__version__, "torch": torch.__version__}))


if __name__ == "__main__":
    main()
