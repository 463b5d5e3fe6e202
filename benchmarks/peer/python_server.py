#!/usr/bin/env python3
"""KServe v2 (gRPC) model server for a BERT-family sentence model: the Python
stack a user would deploy instead of castserve, for the peer benchmark.

It serves one Hugging Face checkpoint folder with `transformers.AutoModel`
under KServe's own Python model server (`kserve.Model` + `kserve.ModelServer`)
and exposes exactly the signature castserve's `bert` architecture reports
through ModelMetadata, so one client drives both servers:

  inputs   input_ids, attention_mask, token_type_ids   INT64 [batch, seq]
  outputs  last_hidden_state FP32 [batch, seq, 384]
           pooler_output     FP32 [batch, 384]

Requests that name outputs get only those (as castserve does); requests that
name none get both.

Modes (--dtype):
  f32  weights resident in float32, the plain `from_pretrained` model.
  fp8  diffusers' layerwise casting (storage float8_e4m3fn, compute float32,
       diffusers' default skip patterns): the Python counterpart of castserve's
       shipped minilm config (which adds per-row scales diffusers lacks).

Forwards run under `torch.inference_mode()` on one worker thread (the
counterpart of castserve's `instance_group { count: 1 }`), so the asyncio
loop keeps decoding and answering requests while a forward runs. KServe's
per-request INFO logging is turned off (castserve logs nothing per request).

Usage (from the peer venv, see setup_peer.sh):
  python_server.py --checkpoint DIR [--name minilm] [--grpc-port 8081]
                   [--http-port 8080] [--threads 1] [--dtype f32|fp8]
"""

import argparse
import asyncio
import concurrent.futures
import contextvars
import logging
import os
import sys
import time

# No model hub: everything is read from the local checkpoint folder.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
OUTPUT_NAMES = ("last_hidden_state", "pooler_output")

# Output names the current gRPC request asked for (empty: all). KServe 0.13
# drops ModelInferRequest.outputs when it builds its InferRequest, so the
# servicer subclass below records them for predict() in the same task.
REQUESTED_OUTPUTS = contextvars.ContextVar("requested_outputs", default=())


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True,
                        help="Hugging Face folder (config.json + weights)")
    parser.add_argument("--name", default="minilm", help="served model name")
    parser.add_argument("--grpc-port", type=int, default=8081)
    parser.add_argument("--http-port", type=int, default=8080,
                        help="KServe always opens its REST port; put it on a "
                             "free port out of the way")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads")
    parser.add_argument("--dtype", choices=("f32", "fp8"), default="f32")
    # parse_known_args: kserve parses sys.argv too, at import time.
    args, _ = parser.parse_known_args(argv)
    return args


def load_model(checkpoint, dtype):
    """The model as a user would load it: AutoModel in f32, eval mode;
    with dtype fp8, diffusers' layerwise casting on top."""
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(checkpoint, dtype=torch.float32)
    model.eval()
    if dtype == "fp8":
        from diffusers.hooks import apply_layerwise_casting
        apply_layerwise_casting(model, storage_dtype=torch.float8_e4m3fn,
                                compute_dtype=torch.float32)
    return model


def make_model_class():
    """Defines the kserve.Model subclass (kserve is imported lazily so that
    --help works without it)."""
    import numpy as np
    import torch
    from kserve import InferOutput, InferResponse, Model

    class SentenceEncoder(Model):
        """A BERT-family encoder behind the KServe v2 protocol."""

        def __init__(self, name, checkpoint, dtype):
            super().__init__(name)
            self.checkpoint = checkpoint
            self.dtype = dtype
            self.model = None
            self.hidden_size = None
            # One forward at a time, off the event loop.
            self.executor = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="forward")

        def load(self):
            self.model = load_model(self.checkpoint, self.dtype)
            self.hidden_size = self.model.config.hidden_size
            self.ready = True
            return self.ready

        def get_input_types(self):
            return [{"name": n, "datatype": "INT64", "shape": [-1, -1]}
                    for n in INPUT_NAMES]

        def get_output_types(self):
            return [{"name": "last_hidden_state", "datatype": "FP32",
                     "shape": [-1, -1, self.hidden_size]},
                    {"name": "pooler_output", "datatype": "FP32",
                     "shape": [-1, self.hidden_size]}]

        def forward(self, tensors):
            """Runs the model on numpy inputs; returns numpy outputs."""
            with torch.inference_mode():
                result = self.model(**{k: torch.from_numpy(v)
                                       for k, v in tensors.items()})
            return {name: result[name].float().contiguous().numpy()
                    for name in OUTPUT_NAMES}

        async def predict(self, payload, headers=None):
            tensors = {}
            for name in INPUT_NAMES:
                tensor = payload.get_input_by_name(name)
                if tensor is not None:
                    # Copy: frombuffer views of the request are read-only.
                    tensors[name] = np.array(tensor.as_numpy(), dtype=np.int64)
            if "input_ids" not in tensors:
                raise ValueError("input_ids is required")
            loop = asyncio.get_running_loop()
            outputs = await loop.run_in_executor(self.executor, self.forward,
                                                 tensors)
            wanted = REQUESTED_OUTPUTS.get() or OUTPUT_NAMES
            infer_outputs = []
            for name in wanted:
                if name not in outputs:
                    raise ValueError(f"unknown output {name}")
                out = InferOutput(name=name, shape=list(outputs[name].shape),
                                  datatype="FP32")
                out.set_data_from_numpy(outputs[name], binary_data=True)
                infer_outputs.append(out)
            return InferResponse(response_id=payload.id, model_name=self.name,
                                 infer_outputs=infer_outputs)

    return SentenceEncoder


def honour_requested_outputs():
    """Makes KServe's gRPC servicer pass ModelInferRequest.outputs on to
    predict() (through REQUESTED_OUTPUTS), by subclassing it where
    kserve.protocol.grpc.server looks it up."""
    from kserve.protocol.grpc import server as grpc_server

    base = grpc_server.InferenceServicer

    class OutputAwareServicer(base):
        async def ModelInfer(self, request, context):  # noqa: N802 (gRPC name)
            REQUESTED_OUTPUTS.set(tuple(o.name for o in request.outputs))
            return await super().ModelInfer(request, context)

    grpc_server.InferenceServicer = OutputAwareServicer


def main():
    args = parse_args()
    import torch
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)

    import kserve

    started = time.monotonic()
    model = make_model_class()(args.name, args.checkpoint, args.dtype)
    model.load()
    print(f"python_server loaded name={args.name} dtype={args.dtype} "
          f"threads={torch.get_num_threads()} "
          f"load_s={time.monotonic() - started:.3f}", file=sys.stderr,
          flush=True)
    honour_requested_outputs()
    server = kserve.ModelServer(http_port=args.http_port,
                                grpc_port=args.grpc_port,
                                enable_latency_logging=False)
    for name in ("kserve", "kserve.trace", "uvicorn", "uvicorn.access"):
        logging.getLogger(name).setLevel(logging.WARNING)
    server.start([model])


if __name__ == "__main__":
    main()
