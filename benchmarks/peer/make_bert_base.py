#!/usr/bin/env python3
"""Writes a BERT-base-shaped BertModel folder for the ONNX Runtime peer
(issue 26: "all-MiniLM-L6-v2 and a BERT-base shape").

No model hub here, so the weights are transformers' own initialisation
(seeded), not a trained checkpoint: the shape, not the values, decides the
time. The shape is bert-base-uncased's (12 layers, hidden 768, 12 heads,
intermediate 3072, GELU, 512 positions, the 30,522-token vocabulary of
--tokenizer-from, whose tokenizer files are copied beside the weights).
Saved with save_pretrained as one f32 model.safetensors (about 440 MB).

Usage: make_bert_base.py --tokenizer-from MINILM_FOLDER --out FOLDER
"""

import argparse
import os
import shutil

import torch

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt",
                   "special_tokens_map.json")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokenizer-from", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    os.environ["HF_HUB_OFFLINE"] = "1"
    import transformers

    config = transformers.BertConfig(
        vocab_size=30522, hidden_size=768, num_hidden_layers=12,
        num_attention_heads=12, intermediate_size=3072, hidden_act="gelu",
        max_position_embeddings=512, type_vocab_size=2,
        layer_norm_eps=1e-12)
    torch.manual_seed(args.seed)
    model = transformers.BertModel(config).eval()
    os.makedirs(args.out, exist_ok=True)
    model.save_pretrained(args.out, safe_serialization=True)
    for name in TOKENIZER_FILES:
        source = os.path.join(args.tokenizer_from, name)
        if os.path.exists(source):
            shutil.copy(source, os.path.join(args.out, name))
    count = sum(p.numel() for p in model.parameters())
    print(f"{args.out}: BertModel, {count:,} parameters")


if __name__ == "__main__":
    main()
