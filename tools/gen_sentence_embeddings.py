#!/usr/bin/env python3
"""Reference sentence embeddings of all-MiniLM-L6-v2 for castserve's tests.

Reads the committed sentences (models/testdata/minilm/sentences.json: a JSON
list of {"text", "source"}; 123 written for castserve in several languages,
the empty string, and prose taken from text that Debian packages ship under
/usr/share/doc and /usr/share/common-licenses, each with its file named) and
writes what sentence-transformers computes for them with the model folder
that tools/fetch_minilm.sh fills (weights, tokenizer, modules.json,
1_Pooling/config.json, sentence_bert_config.json):

  models/testdata/minilm/sentence_embeddings.safetensors
    sentence_embedding  F16 [sentences, 384]  SentenceTransformer.encode()
                        (mean pooling, L2 normalisation, max_seq_length 256)
    token_count         I64 [sentences]       word pieces after truncation,
                        special tokens included

F16 keeps the file small: its rounding moves a cosine by about 1e-7, far
below the tests' margins (>= 0.9999 in f32).

CI does not run this (it compares with the committed file). To regenerate,
in a virtual environment of your own with PyPI's sentence-transformers
(torch comes with it):

  python3 -m venv .venv-emb && .venv-emb/bin/pip install sentence-transformers
  tools/fetch_minilm.sh
  .venv-emb/bin/python tools/gen_sentence_embeddings.py
"""

import argparse
import json
import os

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURE = os.path.join(ROOT, "models", "testdata", "minilm")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", default=os.path.join(FIXTURE, "weights"),
                        help="the all-MiniLM-L6-v2 folder (tools/fetch_minilm.sh)")
    parser.add_argument("--sentences", default=os.path.join(FIXTURE, "sentences.json"))
    parser.add_argument("--out", default=os.path.join(FIXTURE, "sentence_embeddings.safetensors"))
    args = parser.parse_args()

    import safetensors.numpy
    import sentence_transformers
    import torch

    with open(args.sentences, encoding="utf-8") as f:
        texts = [row["text"] for row in json.load(f)]
    model = sentence_transformers.SentenceTransformer(args.model_dir, device="cpu")
    with torch.inference_mode():
        embeddings = model.encode(texts, batch_size=16, convert_to_numpy=True)
    tokenizer = model.tokenizer
    counts = [len(tokenizer(t, truncation=True, max_length=model.max_seq_length)["input_ids"])
              for t in texts]
    norms = np.linalg.norm(embeddings, axis=1)
    assert np.allclose(norms, 1, atol=1e-4), "the pipeline should L2-normalise"
    metadata = {
        "generator": "tools/gen_sentence_embeddings.py",
        "sentence_transformers": sentence_transformers.__version__,
        "torch": torch.__version__,
        "max_seq_length": str(model.max_seq_length),
        "modules": ", ".join(type(m).__name__ for m in model),
    }
    safetensors.numpy.save_file(
        {"sentence_embedding": embeddings.astype(np.float16),
         "token_count": np.asarray(counts, dtype=np.int64)},
        args.out, metadata=metadata)
    print(f"{len(texts)} sentences, {embeddings.shape[1]} dims, longest "
          f"{max(counts)} tokens, {sum(c == model.max_seq_length for c in counts)} "
          f"truncated -> {args.out}")
    print(json.dumps(metadata, indent=1))


if __name__ == "__main__":
    main()
