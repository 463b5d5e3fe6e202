#!/usr/bin/env python3
"""Converts the Llama benchmark checkpoint (benchmarks/drivers/
gen_llama_checkpoint.py) to GGUF with llama.cpp's own convert_hf_to_gguf.py.

The benchmark checkpoint has weights and config.json only; the converter
insists on a tokenizer. This script gives it one in a staging folder beside
the output (symlinks to the checkpoint's files + a byte-level BPE
tokenizer.json of the 256 byte symbols and one merge, built with
`tokenizers`), and names its pre-tokenizer "default": the converter
recognises pre-tokenizers by hashing how known vocabularies tokenize a test
string, and this one is none of them. The vocabulary is padded to the
config's vocab_size by the converter ([PAD<i>] tokens). The benchmark sends
token ids, never text, so the tokenizer only has to load.

  python convert_llama_gguf.py --convert .../convert_hf_to_gguf.py \\
      --checkpoint /tmp/castserve-bench/llama-1b --outtype bf16 --outfile X.gguf
"""

import argparse
import json
import os
import runpy
import shutil
import sys


def write_tokenizer(folder):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from tokenizers.pre_tokenizers import ByteLevel

    alphabet = sorted(ByteLevel.alphabet())
    vocab = {symbol: i for i, symbol in enumerate(alphabet)}
    # One merge: llama.cpp's loader refuses a BPE vocabulary without any
    # ("cannot find tokenizer merges in model file").
    first, second = "\u0120", "t"  # " t" in the byte-level alphabet
    vocab[first + second] = len(vocab)
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[(first, second)]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.save(os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast",
                   "model_max_length": 131072}, f)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--convert", required=True,
                        help="llama.cpp's convert_hf_to_gguf.py")
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--outtype", required=True, choices=["f32", "bf16", "f16", "q8_0"])
    parser.add_argument("--outfile", required=True)
    args = parser.parse_args()

    staging = args.outfile + ".staging"
    shutil.rmtree(staging, ignore_errors=True)
    os.makedirs(staging)
    for name in os.listdir(args.checkpoint):
        if name.endswith((".safetensors", ".json")) and not name.startswith("tokenizer"):
            os.symlink(os.path.abspath(os.path.join(args.checkpoint, name)),
                       os.path.join(staging, name))
    write_tokenizer(staging)

    tree = os.path.dirname(os.path.abspath(args.convert))
    sys.path.insert(0, tree)
    from conversion import base  # the converter's own package

    base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "default"
    sys.argv = [args.convert, staging, "--outtype", args.outtype,
                "--outfile", args.outfile]
    try:
        runpy.run_path(args.convert, run_name="__main__")
    finally:
        shutil.rmtree(staging, ignore_errors=True)


if __name__ == "__main__":
    main()
