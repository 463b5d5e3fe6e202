"""Generates with a running castserve through the unmodified tritonclient[grpc]
package: the decoupled stream API (start_stream / async_stream_infer), unary
infer, cancelling a stream (stop_stream(cancel_requests=True)) and bad
parameters.

  python tritonclient_generate_check.py HOST:PORT METRICS_URL MODEL REFERENCE

REFERENCE is tests/testdata/tiny_llama_greedy.json (transformers' greedy
tokens). Run by generation_integration_test.py with an interpreter that has
tritonclient (PyPI); exits non-zero with the failing check printed.
"""

import json
import queue
import re
import sys
import time
import urllib.request

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

RESPONSE_TIMEOUT_SECONDS = 60


# --- The README's streaming example ("Generating text"), verbatim. ---
def stream_generate(url, prompt, max_tokens):
    """Yields (text piece, token id, finish reason or None) per token."""
    responses = queue.Queue()
    client = grpcclient.InferenceServerClient(url)
    client.start_stream(callback=lambda result, error:
                        responses.put((result, error)))
    text = grpcclient.InferInput("text_input", [1], "BYTES")
    text.set_data_from_numpy(np.array([prompt.encode()], dtype=np.object_))
    client.async_stream_infer("tiny_llama", [text],
                              parameters={"max_tokens": max_tokens})
    try:
        while True:
            result, error = responses.get(timeout=60)
            if error is not None:
                raise error
            parameters = result.get_response().parameters
            final = parameters["triton_final_response"].bool_param
            yield (result.as_numpy("text_output")[0].decode(),
                   int(result.as_numpy("output_ids")[0]),
                   parameters["finish_reason"].string_param if final else None)
            if final:
                return
    finally:
        client.stop_stream()
# --- End of the README's example. ---


def text_input(prompt):
    text = grpcclient.InferInput("text_input", [1], "BYTES")
    text.set_data_from_numpy(np.array([prompt.encode()], dtype=np.object_))
    return text


def kv_cache_bytes(metrics_url, model):
    with urllib.request.urlopen(metrics_url, timeout=10) as response:
        text = response.read().decode()
    match = re.search(r'^castserve_kv_cache_bytes\{[^}]*model="%s"[^}]*\} (\S+)$'
                      % re.escape(model), text, re.MULTILINE)
    assert match, "no castserve_kv_cache_bytes for " + model
    return float(match.group(1))


def check_stream(url, reference):
    pieces = list(stream_generate(url, reference["prompt"],
                                  reference["max_tokens"]))
    ids = [token for _, token, _ in pieces]
    assert ids == reference["output_ids"], (ids, reference["output_ids"])
    reasons = [reason for _, _, reason in pieces]
    assert reasons == [None] * (len(ids) - 1) + ["length"], reasons
    text = "".join(piece for piece, _, _ in pieces)
    assert text == reference["text_output"], (text, reference["text_output"])
    print(f"stream: {len(pieces)} responses, one per token, equal to "
          "transformers' greedy tokens and their text; the last final with "
          "finish_reason length")
    return text


def check_unary(url, reference, streamed_text):
    client = grpcclient.InferenceServerClient(url)
    result = client.infer("tiny_llama", [text_input(reference["prompt"])],
                          parameters={"max_tokens": reference["max_tokens"]})
    ids = [int(t) for t in result.as_numpy("output_ids")]
    assert ids == reference["output_ids"], ids
    text = result.as_numpy("text_output")[0].decode()
    assert text == streamed_text, (text, streamed_text)
    reason = result.get_response().parameters["finish_reason"].string_param
    assert reason == "length", reason
    print("unary: the same ids and text in one response")


def check_cancel(url, metrics_url):
    responses = queue.Queue()
    client = grpcclient.InferenceServerClient(url)
    client.start_stream(callback=lambda result, error:
                        responses.put((result, error)))
    client.async_stream_infer("tiny_llama", [text_input("Once upon a time")],
                              parameters={"max_tokens": 200,
                                          "ignore_eos": True})
    for _ in range(3):
        result, error = responses.get(timeout=RESPONSE_TIMEOUT_SECONDS)
        assert error is None, error
    held = kv_cache_bytes(metrics_url, "tiny_llama")
    assert held > 0, "no KV-cache bytes in use while the stream runs"
    client.stop_stream(cancel_requests=True)
    deadline = time.monotonic() + 30
    while kv_cache_bytes(metrics_url, "tiny_llama") != 0:
        assert time.monotonic() < deadline, "the KV cache was not freed"
        time.sleep(0.05)
    print(f"cancel: {held:.0f} KV-cache bytes in use mid-stream, 0 after "
          "stop_stream(cancel_requests=True)")


def check_bad_parameters(url):
    client = grpcclient.InferenceServerClient(url)
    for parameters, named in (({"top_k": "many"}, "parameter 'top_k'"),
                              ({"max_tokens": 0}, "max_tokens"),
                              ({"temperature": -1.0}, "temperature")):
        try:
            client.infer("tiny_llama", [text_input("x")], parameters=parameters)
        except InferenceServerException as e:
            assert e.status() == "StatusCode.INVALID_ARGUMENT", e.status()
            assert named in e.message(), e.message()
        else:
            raise AssertionError(f"{parameters} was accepted")
    errors = queue.Queue()
    client.start_stream(callback=lambda result, error: errors.put(error))
    client.async_stream_infer("tiny_llama", [text_input("x")],
                              parameters={"max_tokens": "32"})
    error = errors.get(timeout=RESPONSE_TIMEOUT_SECONDS)
    client.stop_stream()
    assert error is not None and "max_tokens" in str(error), error
    print("bad parameters: INVALID_ARGUMENT naming the parameter (unary), an "
          "error on the stream (streaming)")


def main(url, metrics_url, model, reference_path):
    assert model == "tiny_llama", "the README's example names tiny_llama"
    with open(reference_path, encoding="utf-8") as f:
        reference = json.load(f)
    streamed_text = check_stream(url, reference)
    check_unary(url, reference, streamed_text)
    check_cancel(url, metrics_url)
    check_bad_parameters(url)


if __name__ == "__main__":
    main(*sys.argv[1:])
