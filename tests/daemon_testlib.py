"""Helpers shared by the daemon's end-to-end tests.

A castserve process started on free ports (read back from its 'ready' log
line), running commands, and a small safetensors reader (8-byte little-endian
header length, JSON header, raw little-endian data) over numpy, so that the
tests need nothing beyond Debian's python3-grpcio and python3-numpy.
"""

import json
import os
import re
import shutil
import struct
import subprocess
import tempfile
import time
import unittest

START_TIMEOUT_SECONDS = 60

# A config.pbtxt `weights` block: layerwise casting to fp8 e4m3fn with
# per-row scales, resident and made at load, transient f32 compute copies.
FP8_CASTING_WEIGHTS = """
weights {
  residency: RESIDENCY_RESIDENT
  materialization: MATERIALIZATION_EAGER
  compute_copy: COMPUTE_COPY_TRANSIENT
  casting {
    storage_dtype: STORAGE_DTYPE_F8_E4M3FN
    compute_dtype: COMPUTE_DTYPE_F32
    scaling: SCALING_PER_ROW
  }
}
"""


def write_file(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


class Daemon:
    """A castserve process whose ports are read from its 'ready' log line."""

    def __init__(self, castserve, *args):
        self.log_path = tempfile.mktemp(prefix="castserve-", suffix=".log")
        self.log = open(self.log_path, "w+")
        self.process = subprocess.Popen([castserve, *args], stdout=self.log,
                                        stderr=subprocess.STDOUT)

    def output(self):
        with open(self.log_path) as f:
            return f.read()

    def wait_ready(self):
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            match = re.search(r'msg="castserve ready" grpc_port=(\d+) '
                              r'metrics_port=(\d+)(?: http_port=(\d+))?',
                              self.output())
            if match:
                self.grpc_port = int(match.group(1))
                self.metrics_port = int(match.group(2))
                # None with --http-port=off.
                self.http_port = (int(match.group(3)) if match.group(3)
                                  else None)
                return self
            if self.process.poll() is not None:
                raise AssertionError("daemon exited early:\n" + self.output())
            time.sleep(0.05)
        raise AssertionError("daemon not ready in time:\n" + self.output())

    def stop(self, sig=None, timeout=5):
        import signal
        self.process.send_signal(sig or signal.SIGTERM)
        return self.process.wait(timeout=timeout)

    def kill(self):
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.log.close()


def run(*args, timeout=30):
    return subprocess.run(list(args), capture_output=True, text=True,
                          timeout=timeout)


_SAFETENSORS_DTYPES = {"F32": "<f4", "F16": "<f2", "F64": "<f8", "I64": "<i8",
                       "I32": "<i4", "I16": "<i2", "I8": "i1", "U8": "u1",
                       "BOOL": "?"}


def read_safetensors(path):
    """{name: numpy array} of a .safetensors file (BF16/F8 not supported)."""
    import numpy as np
    with open(path, "rb") as f:
        (header_bytes,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(header_bytes))
        data = f.read()
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        dtype = np.dtype(_SAFETENSORS_DTYPES[entry["dtype"]])
        tensors[name] = np.frombuffer(data[begin:end], dtype=dtype).reshape(
            entry["shape"])
    return tensors


def write_safetensors(path, arrays):
    """A minimal .safetensors writer (int64 and float32 arrays); returns the
    size of the data section."""
    import numpy as np
    header, offset, blobs = {}, 0, []
    for name, array in sorted(arrays.items()):
        dtype = {"int64": "I64", "float32": "F32"}[array.dtype.name]
        blob = np.ascontiguousarray(array).astype(
            array.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": dtype, "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    header_bytes = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header_bytes)))
        f.write(header_bytes)
        for blob in blobs:
            f.write(blob)
    return offset


def add_model(repository, name, fixture_dir, config):
    """A copy of a fixture model (less its reference.safetensors) under
    repository/name, with config.pbtxt `config`; returns its directory."""
    model_dir = os.path.join(repository, name)
    os.makedirs(model_dir)
    for file in os.listdir(fixture_dir):
        if file != "reference.safetensors":
            shutil.copy(os.path.join(fixture_dir, file), model_dir)
    write_file(os.path.join(model_dir, "config.pbtxt"), config)
    return model_dir


def references(fixture_dir, output_prefix="output."):
    """(inputs, outputs) of a fixture's reference.safetensors: the input.*
    tensors and the `output_prefix`* ones, by name less the prefix."""
    tensors = read_safetensors(os.path.join(fixture_dir,
                                            "reference.safetensors"))
    inputs = {k[len("input."):]: v for k, v in tensors.items()
              if k.startswith("input.")}
    outputs = {k[len(output_prefix):]: v for k, v in tensors.items()
               if k.startswith(output_prefix)}
    assert outputs, "no " + output_prefix + " outputs in " + fixture_dir
    return inputs, outputs


def raw_request(model, inputs, outputs=(), request_id=""):
    """A ModelInferRequest with every array of `inputs` (int64 or float32) as
    raw contents, asking for `outputs` (all when empty)."""
    import numpy as np
    from proto import inference_pb2
    request = inference_pb2.ModelInferRequest(model_name=model, id=request_id)
    for name, array in inputs.items():
        datatype = {np.dtype("int64"): "INT64",
                    np.dtype("float32"): "FP32"}[array.dtype]
        request.inputs.add(name=name, datatype=datatype, shape=array.shape)
        request.raw_input_contents.append(
            np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<"))
            .tobytes())
    for name in outputs:
        request.outputs.add(name=name)
    return request


def response_arrays(response):
    """{name: numpy array} of a ModelInferResponse's FP32 raw outputs."""
    import numpy as np
    arrays = {}
    for output, raw in zip(response.outputs, response.raw_output_contents):
        assert output.datatype == "FP32", output.datatype
        arrays[output.name] = np.frombuffer(raw, dtype="<f4").reshape(
            output.shape)
    return arrays


def write_zero_bert(directory, hidden, layers, intermediate, heads,
                    max_positions, vocab=128):
    """A BERT checkpoint folder (config.json + model.safetensors) of the
    given size whose weights are all zero: the data section is a hole in a
    sparse file, so a large model costs no disk and no time to write. Its
    forwards cost what a real model's of that size cost."""
    os.makedirs(directory, exist_ok=True)
    config = {"architectures": ["BertModel"], "model_type": "bert",
              "hidden_act": "gelu", "hidden_size": hidden,
              "intermediate_size": intermediate, "layer_norm_eps": 1e-12,
              "max_position_embeddings": max_positions,
              "num_attention_heads": heads, "num_hidden_layers": layers,
              "pad_token_id": 0, "position_embedding_type": "absolute",
              "type_vocab_size": 2, "vocab_size": vocab}
    write_file(os.path.join(directory, "config.json"), json.dumps(config))
    shapes = {"embeddings.word_embeddings.weight": [vocab, hidden],
              "embeddings.position_embeddings.weight": [max_positions, hidden],
              "embeddings.token_type_embeddings.weight": [2, hidden],
              "embeddings.LayerNorm.weight": [hidden],
              "embeddings.LayerNorm.bias": [hidden],
              "pooler.dense.weight": [hidden, hidden],
              "pooler.dense.bias": [hidden]}
    for i in range(layers):
        prefix = f"encoder.layer.{i}."
        for linear, (rows, cols) in {
                "attention.self.query": (hidden, hidden),
                "attention.self.key": (hidden, hidden),
                "attention.self.value": (hidden, hidden),
                "attention.output.dense": (hidden, hidden),
                "intermediate.dense": (intermediate, hidden),
                "output.dense": (hidden, intermediate)}.items():
            shapes[prefix + linear + ".weight"] = [rows, cols]
            shapes[prefix + linear + ".bias"] = [rows]
        for norm in ("attention.output.LayerNorm", "output.LayerNorm"):
            shapes[prefix + norm + ".weight"] = [hidden]
            shapes[prefix + norm + ".bias"] = [hidden]
    header, offset = {}, 0
    for name, shape in sorted(shapes.items()):
        size = 4
        for dim in shape:
            size *= dim
        header[name] = {"dtype": "F32", "shape": shape,
                        "data_offsets": [offset, offset + size]}
        offset += size
    header_bytes = json.dumps(header).encode()
    with open(os.path.join(directory, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(header_bytes)))
        f.write(header_bytes)
        f.truncate(8 + len(header_bytes) + offset)


class RepositoryTestCase(unittest.TestCase):
    """One daemon per test class over a fresh repository that holds a good
    model "good" (a copy of `good_dir` with `good_config`) and whatever
    add_models puts beside it. Subclasses set `castserve` and `good_dir`."""

    castserve = None
    good_dir = None
    good_config = "max_batch_size: 4\n"
    call_timeout_seconds = 60

    @classmethod
    def add_models(cls, repository):
        pass

    @classmethod
    def setUpClass(cls):
        import grpc
        from proto import inference_pb2_grpc
        cls.repository = tempfile.mkdtemp(prefix="castserve-repository-")
        add_model(cls.repository, "good", cls.good_dir, cls.good_config)
        cls.add_models(cls.repository)
        cls.daemon = Daemon(cls.castserve,
                            f"--model-repository={cls.repository}",
                            "--grpc-port=0", "--metrics-port=0",
                            "--http-port=0",
                            "--bind-address=127.0.0.1").wait_ready()
        cls.channel = grpc.insecure_channel(
            f"127.0.0.1:{cls.daemon.grpc_port}")
        cls.stub = inference_pb2_grpc.GRPCInferenceServiceStub(cls.channel)
        cls.inputs, _ = references(cls.good_dir)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.daemon.kill()
        shutil.rmtree(cls.repository)

    def index(self):
        """{name: RepositoryIndexResponse.ModelIndex} of the repository."""
        from proto import inference_pb2
        response = self.stub.RepositoryIndex(
            inference_pb2.RepositoryIndexRequest())
        return {model.name: model for model in response.models}

    def infer_good(self):
        """One request to the good model; raises if it fails."""
        return self.stub.ModelInfer(raw_request("good", self.inputs),
                                    timeout=self.call_timeout_seconds)


def openssl(*args):
    result = subprocess.run(["openssl", *args], capture_output=True,
                            text=True, timeout=60)
    if result.returncode != 0:
        raise AssertionError(f"openssl {' '.join(args)}: {result.stderr}")


def make_key_and_certificate(folder, name, subject, issuer=None, san=None):
    """name_key.pem and name_cert.pem in `folder`: self-signed, or signed by
    `issuer` (the name of an earlier pair)."""
    key = os.path.join(folder, f"{name}_key.pem")
    cert = os.path.join(folder, f"{name}_cert.pem")
    openssl("genpkey", "-algorithm", "EC", "-pkeyopt",
            "ec_paramgen_curve:P-256", "-out", key)
    extensions = ["-addext", f"subjectAltName={san}"] if san else []
    if issuer is None:
        openssl("req", "-x509", "-new", "-key", key, "-out", cert, "-days",
                "2", "-subj", subject, *extensions)
    else:
        request = os.path.join(folder, f"{name}.csr")
        openssl("req", "-new", "-key", key, "-out", request, "-subj", subject)
        openssl("x509", "-req", "-in", request, "-out", cert, "-days", "2",
                "-CA", os.path.join(folder, f"{issuer}_cert.pem"),
                "-CAkey", os.path.join(folder, f"{issuer}_key.pem"),
                "-CAcreateserial")
    return cert, key
