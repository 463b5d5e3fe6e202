"""Helpers shared by the daemon's end-to-end tests.

A castserve process started on free ports (read back from its 'ready' log
line), running commands, and a small safetensors reader (8-byte little-endian
header length, JSON header, raw little-endian data) over numpy, so that the
tests need nothing beyond Debian's python3-grpcio and python3-numpy.
"""

import json
import os
import re
import struct
import subprocess
import tempfile
import time

START_TIMEOUT_SECONDS = 60


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
                              r'metrics_port=(\d+)', self.output())
            if match:
                self.grpc_port, self.metrics_port = map(int, match.groups())
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
