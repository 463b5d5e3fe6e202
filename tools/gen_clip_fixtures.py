#!/usr/bin/env python3
"""Builds the fixtures of the full contrastive image-text models
(models/architectures/clip.cc, siglip.cc): a CLIPModel and a SiglipModel
folder, both towers in one checkpoint, as transformers 5 saves them.

Each is a small, randomly initialised model (fixed seed, the weights made
non-trivial by gen_model_fixtures.reinit_) saved with save_pretrained into
models/testdata/<name>/ with a small tokenizer.json written by `tokenizers`
(a WordPiece vocabulary over the texts below), and reference.safetensors:

  clip     CLIPModel: text 24 wide, vision 32 wide, projection_dim 16.
           The tokenizer wraps a text in <|startoftext|> (id 0) ...
           <|endoftext|> (id 1) and pads with <|endoftext|>, as CLIP's does;
           text_config.eos_token_id is 1, so transformers 5 pools the first
           <|endoftext|> (not the legacy argmax of the ids, which it keeps for
           eos_token_id == 2; legacy.output.text_embeds is that rule's
           result on the same weights).
    input.input_ids, input.attention_mask   tokenizer(texts, padding=True)
  siglip   SiglipModel: both towers 32 wide (text_embeds and image_embeds
           share a space), the vision tower with its attention-pooling head.
           The tokenizer appends </s> (id 1), which is also the pad token, as
           SigLIP's does; text max_position_embeddings 16.
    input.input_ids          tokenizer(texts, padding="max_length"): how
                             SigLIP is meant to be run (no attention_mask)
    unpadded.input.input_ids, unpadded.input.attention_mask
                             tokenizer(texts, padding=True)
  both:
    input.pixel_values       f32 [3, 3, 32, 32]
    output.image_embeds      get_image_features(pixel_values).pooler_output
    output.text_embeds       get_text_features(**input).pooler_output
    roundtrip.F8_E4M3FN:per_row.output.*
                             the same from the model whose castable weights
                             went through F8_E4M3FN with per-row scales and
                             back (gen_model_fixtures.round_tripped_model)

  long.output.text_embeds  get_text_features of LONG_TEXT, truncated to
                           the position table (its end token kept)

The metadata holds the texts ("texts", JSON) and "long_text".

Run with the reference venv (tools/setup_reference_venv.sh):
  .venv-ref/bin/python tools/gen_clip_fixtures.py [--only NAME ...]
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_model_fixtures as fixtures  # noqa: E402

OUT = os.path.join(fixtures.REPO_ROOT, "models", "testdata")
SEEDS = {"clip": 1031, "siglip": 1032}
CAST_FORMAT = "F8_E4M3FN:per_row"
TEXT_POSITIONS = 16
IMAGES = 3

TEXTS = [
    "a photo of a cat",
    "two dogs playing in the snow",
    "castserve",
]
# More tokens than the text position table: truncated, its end token kept.
LONG_TEXT = "a photo of two dogs and a cat playing in the snow near a red house"


def make_tokenizer(kind):
    """A WordPiece tokenizer over the texts with CLIP's or SigLIP's special
    tokens and post-processing; returns the transformers tokenizer."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    if kind == "clip":
        specials = ["<|startoftext|>", "<|endoftext|>", "<unk>"]
    else:
        specials = ["<unk>", "</s>"]
    words = sorted({w for t in TEXTS for w in t.split()})
    # Some words only as pieces, so WordPiece splits them.
    vocab = specials + [w for w in words if len(w) <= 6] + ["cast", "##serve", "##s"]
    vocab += [c for c in "abcdefghijklmnopqrstuvwxyz" if c not in vocab]
    vocab += ["##" + c for c in "abcdefghijklmnopqrstuvwxyz" if "##" + c not in vocab]
    ids = {t: i for i, t in enumerate(vocab)}
    tok = Tokenizer(models.WordPiece(ids, unk_token="<unk>"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    if kind == "clip":
        tok.post_processor = processors.TemplateProcessing(
            single="<|startoftext|> $A <|endoftext|>",
            special_tokens=[("<|startoftext|>", 0), ("<|endoftext|>", 1)])
        fast = PreTrainedTokenizerFast(
            tokenizer_object=tok, bos_token="<|startoftext|>", eos_token="<|endoftext|>",
            pad_token="<|endoftext|>", unk_token="<unk>", model_max_length=TEXT_POSITIONS,
            model_input_names=["input_ids", "attention_mask"])
    else:
        tok.post_processor = processors.TemplateProcessing(
            single="$A </s>", special_tokens=[("</s>", 1)])
        # SigLIP's tokenizer gives input_ids only: the model was trained on
        # texts padded to 64 without a mask.
        fast = PreTrainedTokenizerFast(
            tokenizer_object=tok, eos_token="</s>", pad_token="</s>", unk_token="<unk>",
            model_max_length=TEXT_POSITIONS, model_input_names=["input_ids"])
    tok.add_special_tokens(specials)
    return fast, len(vocab)


def build(name, vocab_size):
    import torch
    import transformers as tf

    seed = SEEDS[name]
    torch.manual_seed(seed)
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_channels=3, image_size=32, patch_size=8)
    text = dict(vocab_size=vocab_size, intermediate_size=48, num_hidden_layers=2,
                num_attention_heads=4, max_position_embeddings=TEXT_POSITIONS)
    if name == "clip":
        config = tf.CLIPConfig(
            text_config=dict(hidden_size=24, bos_token_id=0, eos_token_id=1, pad_token_id=1,
                             **text),
            vision_config=vision, projection_dim=16)
        config._attn_implementation = "eager"
        model = tf.CLIPModel(config)
    else:
        config = tf.SiglipConfig(
            text_config=dict(hidden_size=32, eos_token_id=1, pad_token_id=1, **text),
            vision_config=vision)
        config._attn_implementation = "eager"
        model = tf.SiglipModel(config)
    fixtures.reinit_(model, seed)
    model.eval()
    return model


def features(model, pixel_values, text_inputs):
    import torch

    with torch.no_grad():
        image = model.get_image_features(pixel_values=torch.from_numpy(pixel_values))
        text = model.get_text_features(
            **{k: torch.from_numpy(v) for k, v in text_inputs.items()})
    return {"image_embeds": image.pooler_output.float().numpy(),
            "text_embeds": text.pooler_output.float().numpy()}


def tokens(fast, **kwargs):
    batch = fast(TEXTS, return_tensors="np", **kwargs)
    return {k: np.ascontiguousarray(batch[k].astype(np.int64)) for k in fast.model_input_names}


def make(name, report):
    import torch
    import transformers as tf

    folder = os.path.join(OUT, name)
    fast, vocab_size = make_tokenizer(name)
    model = build(name, vocab_size)
    fixtures.fresh_dir(folder)
    model.save_pretrained(folder, safe_serialization=True)
    fast.save_pretrained(folder)
    rng = np.random.default_rng(SEEDS[name])
    pixels = rng.standard_normal((IMAGES, 3, 32, 32)).astype(np.float32)
    text_inputs = tokens(fast, padding="max_length" if name == "siglip" else True)
    tensors = {"input.pixel_values": pixels}
    tensors.update({f"input.{k}": v for k, v in text_inputs.items()})
    reference = features(model, pixels, text_inputs)
    tensors.update({f"output.{k}": v for k, v in reference.items()})
    rt = fixtures.round_tripped_model(model, CAST_FORMAT)
    for k, v in features(rt, pixels, text_inputs).items():
        tensors[f"roundtrip.{CAST_FORMAT}.output.{k}"] = v
    truncated = {k: v for k, v in tokens(fast, padding="max_length" if name == "siglip"
                                         else True, truncation=True).items()}
    long_inputs = {k: np.ascontiguousarray(v.astype(np.int64)) for k, v in fast(
        [LONG_TEXT], truncation=True, return_tensors="np",
        padding="max_length" if name == "siglip" else False).items()
        if k in fast.model_input_names}
    assert long_inputs["input_ids"].shape[1] == TEXT_POSITIONS
    assert long_inputs["input_ids"][0, -1] == 1, "truncation dropped the end token"
    assert all(np.array_equal(truncated[k], text_inputs[k]) for k in truncated)
    tensors["long.output.text_embeds"] = features(model, pixels[:1], long_inputs)["text_embeds"]
    if name == "clip":
        model.text_model.eos_token_id = 2  # what a config with eos 2 selects
        legacy = features(model, pixels, text_inputs)["text_embeds"]
        model.text_model.eos_token_id = 1
        assert not np.allclose(legacy, reference["text_embeds"]), "the two rules agree"
        tensors["legacy.output.text_embeds"] = legacy
    else:
        unpadded = tokens(fast, padding=True, return_attention_mask=True)
        unpadded["attention_mask"] = np.ascontiguousarray(
            fast(TEXTS, padding=True, return_attention_mask=True,
                 return_tensors="np")["attention_mask"].astype(np.int64))
        for k, v in unpadded.items():
            tensors[f"unpadded.input.{k}"] = v
        assert unpadded["input_ids"].shape[1] < TEXT_POSITIONS
        # What castserve's SigLIP does with a mask: the real tokens, then the
        # pad id up to max_position_embeddings, are the max_length ids.
        relaid = np.full_like(text_inputs["input_ids"], fast.pad_token_id)
        for row, (ids, mask) in enumerate(zip(unpadded["input_ids"],
                                              unpadded["attention_mask"])):
            real = ids[mask == 1]
            relaid[row, :len(real)] = real
        assert np.array_equal(relaid, text_inputs["input_ids"]), "padding is not as assumed"
    metadata = {"fixture": name, "model_class": type(model).__name__,
                "model_type": model.config.model_type, "seed": str(SEEDS[name]),
                "cast_format": CAST_FORMAT, "texts": json.dumps(TEXTS),
                "long_text": LONG_TEXT,
                "transformers": tf.__version__, "torch": torch.__version__,
                "generator": "tools/gen_clip_fixtures.py"}
    path = os.path.join(folder, "reference.safetensors")
    from safetensors.numpy import save_file
    save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, path, metadata=metadata)
    fixtures.canonicalize_safetensors_header(path)
    fixtures.canonicalize_safetensors_header(os.path.join(folder, "model.safetensors"))
    report[name] = {"model_class": type(model).__name__, "files": fixtures.dir_files(folder)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="*", default=None, help="fixtures to build")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    report = {}
    for name in args.only or list(SEEDS):
        print("building", name, flush=True)
        make(name, report)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
