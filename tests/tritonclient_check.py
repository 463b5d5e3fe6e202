"""Drives a running castserve with the unmodified tritonclient[grpc] package.

  python tritonclient_check.py HOST:PORT MODEL BERT_FIXTURE_DIR

Run by model_serving_integration_test.py with an interpreter that has
tritonclient (PyPI) installed; exits non-zero with the failing check printed.
"""

import os
import sys

import numpy as np
import tritonclient.grpc as triton

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from daemon_testlib import read_safetensors  # noqa: E402

TOLERANCE = 1e-4


def main(url, model, fixture_dir):
    client = triton.InferenceServerClient(url=url)
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready(model)
    server = client.get_server_metadata()
    assert server.name == "castserve", server
    metadata = client.get_model_metadata(model)
    config = client.get_model_config(model).config
    assert config.max_batch_size > 0, config
    names = [tensor.name for tensor in metadata.inputs]

    reference = read_safetensors(os.path.join(fixture_dir,
                                              "reference.safetensors"))
    inputs = []
    for tensor in metadata.inputs:
        array = reference["input." + tensor.name]
        infer_input = triton.InferInput(tensor.name, list(array.shape),
                                        tensor.datatype)
        infer_input.set_data_from_numpy(array)
        inputs.append(infer_input)
    outputs = [triton.InferRequestedOutput("pooler_output")]
    result = client.infer(model, inputs, outputs=outputs, request_id="tc-1")
    pooled = result.as_numpy("pooler_output")
    expected = reference["output.pooler_output"]
    assert pooled.shape == expected.shape, (pooled.shape, expected.shape)
    difference = float(np.max(np.abs(pooled - expected)))
    assert difference <= TOLERANCE, difference
    assert result.get_response().id == "tc-1"
    assert result.as_numpy("last_hidden_state") is None

    statistics = client.get_inference_statistics(model)
    assert statistics.model_stats[0].inference_count > 0, statistics
    index = client.get_model_repository_index()
    assert any(m.name == model and m.state == "READY"
               for m in index.models), index
    # castserve adds the memory tier (ModelIndex field 100, "hot" for a
    # model that never moved): tritonclient's protos do not know it, parse
    # the known fields as before and keep it as an unknown field.
    ready = next(m for m in index.models if m.name == model)
    tier_field = bytes([0xA2, 0x06, 3]) + b"hot"  # field 100, length 3
    assert tier_field in ready.SerializeToString(), ready
    client.unload_model(model)
    assert not client.is_model_ready(model)
    client.load_model(model)
    assert client.is_model_ready(model)
    try:
        client.infer("no_such_model", inputs)
        raise AssertionError("unknown model accepted")
    except triton.InferenceServerException as error:
        assert "NOT_FOUND" in str(error.status()), error.status()
    print("tritonclient: all checks passed for", names)


if __name__ == "__main__":
    main(*sys.argv[1:])
