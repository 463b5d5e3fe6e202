"""Drives a running castserve's REST port with the unmodified
tritonclient[http] package.

  python tritonclient_http_check.py HOST:PORT MODEL BERT_FIXTURE_DIR

Run by rest_integration_test.py with an interpreter that has
tritonclient[http] (PyPI) installed; exits non-zero with the failing check
printed.
"""

import json
import os
import sys

import numpy as np
import tritonclient.http as triton
from tritonclient.utils import InferenceServerException

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from daemon_testlib import read_safetensors  # noqa: E402

TOLERANCE = 1e-4


def infer_pooled(client, model, metadata, reference, binary):
    """pooler_output for the reference inputs, tensors sent and received as
    binary data or as JSON."""
    inputs = []
    for tensor in metadata["inputs"]:
        array = reference["input." + tensor["name"]]
        infer_input = triton.InferInput(tensor["name"], list(array.shape),
                                        tensor["datatype"])
        infer_input.set_data_from_numpy(array, binary_data=binary)
        inputs.append(infer_input)
    outputs = [triton.InferRequestedOutput("pooler_output",
                                           binary_data=binary)]
    result = client.infer(model, inputs, outputs=outputs,
                          request_id=f"http-{binary}")
    assert result.get_response()["id"] == f"http-{binary}", \
        result.get_response()
    assert result.as_numpy("last_hidden_state") is None
    return result.as_numpy("pooler_output")


def check_infer(client, model, metadata, fixture_dir):
    reference = read_safetensors(os.path.join(fixture_dir,
                                              "reference.safetensors"))
    expected = reference["output.pooler_output"]
    for binary in (False, True):
        pooled = infer_pooled(client, model, metadata, reference, binary)
        assert pooled.shape == expected.shape, (pooled.shape, expected.shape)
        difference = float(np.max(np.abs(pooled - expected)))
        assert difference <= TOLERANCE, (binary, difference)


def check_error(client, model):
    """A request the model refuses: 400 with the model's message."""
    bad = triton.InferInput("input_ids", [1, 3], "FP32")
    bad.set_data_from_numpy(np.zeros((1, 3), dtype=np.float32),
                            binary_data=False)
    try:
        client.infer(model, [bad])
    except InferenceServerException as error:
        assert error.status() == "400", (error.status(), error.message())
        assert "input_ids" in error.message(), error.message()
    else:
        raise AssertionError("a FP32 input_ids was accepted")
    try:
        client.get_model_metadata("no_such_model")
    except InferenceServerException as error:
        assert error.status() == "404", error.status()
    else:
        raise AssertionError("an unknown model has metadata")


def check_repository(client, model):
    statistics = client.get_inference_statistics(model)
    assert statistics["model_stats"][0]["inference_count"] > 0, statistics
    index = client.get_model_repository_index()
    assert any(m["name"] == model and m["state"] == "READY"
               for m in index), index
    client.unload_model(model)
    assert not client.is_model_ready(model)
    client.load_model(model)
    assert client.is_model_ready(model)
    # The whole config, instead of the folder's config.pbtxt.
    client.load_model(model, config=json.dumps({"max_batch_size": 2}))
    assert client.get_model_config(model)["max_batch_size"] == 2
    client.load_model(model)
    assert client.get_model_config(model)["max_batch_size"] == 4


def main(url, model, fixture_dir):
    client = triton.InferenceServerClient(url=url)
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready(model)
    server = client.get_server_metadata()
    assert server["name"] == "castserve", server
    assert "binary_tensor_data" in server["extensions"], server
    metadata = client.get_model_metadata(model)
    config = client.get_model_config(model)
    assert config["max_batch_size"] > 0, config
    assert all(isinstance(dim, int) for dim in metadata["inputs"][0]["shape"])
    check_infer(client, model, metadata, fixture_dir)
    check_error(client, model)
    check_repository(client, model)
    client.close()


if __name__ == "__main__":
    main(*sys.argv[1:])
    print("tritonclient.http: all checks passed")
