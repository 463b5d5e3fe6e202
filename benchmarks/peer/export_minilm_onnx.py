#!/usr/bin/env python3
"""Exports all-MiniLM-L6-v2 (a Hugging Face BertModel folder) to ONNX for the
ONNX Runtime peer, and checks the export against transformers before it is
used.

torch.onnx's current exporter (dynamo=True) with dynamic batch and
sequence; inputs input_ids, attention_mask, token_type_ids (int64 [b, s]),
outputs last_hidden_state [b, s, 384] and pooler_output [b, 384] (castserve's
`bert` signature). The check runs transformers (f32, eager) and
onnxruntime (CPU) on seeded random ids with padding at batch 1, 4, 32 and
sequence 16, 128, and writes the largest absolute differences to
export_check.json; past --tolerance it fails. (Under torch 2.11 the legacy
exporter, dynamo=False, wrote a graph wrong by 1-3 in absolute value; the
current one matched within 1e-5.)
"""

import argparse
import json
import os
import sys

import numpy as np
import torch


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--tolerance", type=float, default=1e-4)
    args = parser.parse_args()
    os.environ["HF_HUB_OFFLINE"] = "1"
    import onnxruntime as ort
    import transformers

    torch.manual_seed(0)
    model = transformers.AutoModel.from_pretrained(
        args.model, dtype=torch.float32, attn_implementation="eager").eval()

    class Wrapped(torch.nn.Module):
        def __init__(self, bert):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask, token_type_ids):
            out = self.bert(input_ids=input_ids, attention_mask=attention_mask,
                            token_type_ids=token_type_ids)
            return out.last_hidden_state, out.pooler_output

    wrapped = Wrapped(model).eval()
    ids = torch.randint(1000, 20000, (2, 16))
    mask = torch.ones_like(ids)
    types = torch.zeros_like(ids)
    batch = torch.export.Dim("batch", min=1, max=1024)
    seq = torch.export.Dim("seq", min=2, max=512)
    shapes = {"input_ids": {0: batch, 1: seq},
              "attention_mask": {0: batch, 1: seq},
              "token_type_ids": {0: batch, 1: seq}}
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "model.onnx")
    with torch.inference_mode(False), torch.no_grad():
        program = torch.onnx.export(
            wrapped, (ids, mask, types), dynamo=True, dynamic_shapes=shapes,
            input_names=["input_ids", "attention_mask", "token_type_ids"],
            output_names=["last_hidden_state", "pooler_output"],
            external_data=False)
        program.save(path)

    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    checks = []
    worst = 0.0
    for b in (1, 4, 32):
        for s in (16, 128):
            ids = rng.integers(1000, 20000, (b, s), dtype=np.int64)
            mask = np.ones((b, s), np.int64)
            if b > 1:
                mask[-1, s // 2:] = 0  # one padded sequence
            types = np.zeros((b, s), np.int64)
            with torch.no_grad():
                ref = wrapped(torch.from_numpy(ids), torch.from_numpy(mask),
                              torch.from_numpy(types))
            got = session.run(None, {"input_ids": ids, "attention_mask": mask,
                                     "token_type_ids": types})
            d_hidden = float(np.abs(got[0] - ref[0].numpy()).max())
            d_pool = float(np.abs(got[1] - ref[1].numpy()).max())
            worst = max(worst, d_hidden, d_pool)
            checks.append({"batch": b, "seq": s,
                           "max_abs_last_hidden_state": d_hidden,
                           "max_abs_pooler_output": d_pool})
    result = {"exporter": "torch.onnx.export(dynamo=True)",
              "torch": torch.__version__,
              "transformers": transformers.__version__,
              "onnxruntime": ort.__version__, "checks": checks,
              "max_abs": worst, "tolerance": args.tolerance}
    with open(os.path.join(args.out, "export_check.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result, indent=1))
    if not worst <= args.tolerance:
        os.remove(path)
        sys.exit(f"export differs from transformers by {worst} > "
                 f"{args.tolerance}: removed {path}")


if __name__ == "__main__":
    main()
