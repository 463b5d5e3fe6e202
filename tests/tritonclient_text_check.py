"""Sends text to a running castserve with the unmodified tritonclient[grpc]
package and compares the sentence_embedding it answers with
sentence-transformers' (the committed references).

  python tritonclient_text_check.py HOST:PORT MODEL MINILM_FIXTURE_DIR MIN_COSINE

Run by sentence_embedding_integration_test.py with an interpreter that has
tritonclient (PyPI) installed; exits non-zero with the failing check printed.
"""

import json
import os
import sys

import numpy as np
import tritonclient.grpc as triton

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from daemon_testlib import read_safetensors  # noqa: E402

# Sentences per request (the deploy config's max_batch_size is 8).
BATCH = 8
# Every other sentence written for castserve (English short and long, other
# languages, the empty string at 123), every tenth taken from Debian's
# documentation, and the long texts at the end (truncated at 256 tokens).
PICKS = list(range(0, 124, 2)) + [123] + list(range(124, 273, 10)) + \
    list(range(-5, 0))


def main(url, model, fixture_dir, min_cosine):
    client = triton.InferenceServerClient(url=url)
    assert client.is_model_ready(model)
    metadata = client.get_model_metadata(model)
    text = [t for t in metadata.inputs if t.name == "text"]
    assert text and text[0].datatype == "BYTES", metadata
    assert list(text[0].shape) == [-1, 1], text[0]
    outputs = {t.name: t for t in metadata.outputs}
    assert outputs["sentence_embedding"].datatype == "FP32", metadata
    assert list(outputs["sentence_embedding"].shape) == [-1, 384], metadata

    with open(os.path.join(fixture_dir, "sentences.json"), encoding="utf-8") as f:
        sentences = [row["text"] for row in json.load(f)]
    expected = read_safetensors(os.path.join(
        fixture_dir, "sentence_embeddings.safetensors"))["sentence_embedding"]
    picks = [p % len(sentences) for p in PICKS]
    cosines = []
    for start in range(0, len(picks), BATCH):
        chunk = picks[start:start + BATCH]
        data = np.array([[sentences[i].encode("utf-8")] for i in chunk],
                        dtype=np.object_)
        infer_input = triton.InferInput("text", list(data.shape), "BYTES")
        infer_input.set_data_from_numpy(data)
        result = client.infer(
            model, [infer_input],
            outputs=[triton.InferRequestedOutput("sentence_embedding")])
        embeddings = result.as_numpy("sentence_embedding")
        assert embeddings.shape == (len(chunk), 384), embeddings.shape
        for row, i in zip(embeddings, chunk):
            reference = expected[i].astype(np.float64)
            cosines.append(float(np.dot(row, reference) /
                                 (np.linalg.norm(row) * np.linalg.norm(reference))))
    worst = int(np.argmin(cosines))
    print(f"tritonclient text -> sentence_embedding: min cosine "
          f"{cosines[worst]:.6f} (sentence {picks[worst]}), mean "
          f"{np.mean(cosines):.6f} over {len(cosines)} sentences")
    assert cosines[worst] >= min_cosine, sentences[picks[worst]]

    # Text and token inputs together are refused, naming both.
    ids = triton.InferInput("input_ids", [1, 2], "INT64")
    ids.set_data_from_numpy(np.array([[101, 102]], dtype=np.int64))
    one = triton.InferInput("text", [1, 1], "BYTES")
    one.set_data_from_numpy(np.array([[b"hello"]], dtype=np.object_))
    try:
        client.infer(model, [one, ids])
        raise AssertionError("text beside input_ids accepted")
    except triton.InferenceServerException as error:
        assert "INVALID_ARGUMENT" in str(error.status()), error
        assert "either text or the token inputs" in error.message(), error
    print("tritonclient text: all checks passed")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]))
