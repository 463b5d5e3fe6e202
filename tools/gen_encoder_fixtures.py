#!/usr/bin/env python3
"""Builds the encoder fixtures of the architectures on the shared encoder
blocks (models/encoders/, models/architectures/): an XLM-RoBERTa
sentence-transformers folder and two cross-encoders (rerankers).

Each is a small, randomly initialised transformers 5 model (fixed seed) saved
with save_pretrained (sentence-transformers' save for the pipeline) into
models/testdata/<name>/, with a small tokenizer.json written by `tokenizers`
(a WordPiece vocabulary over the texts below; XLM-RoBERTa's special tokens
and RobertaProcessing for the XLM-R folders, BERT's and a TemplateProcessing
pair template for the BERT one), and reference.safetensors:

  xlm_roberta           XLMRobertaModel (pooler) + Pooling(mean) + Normalize
    input.<name>          the tokenizer's batch (right-padded with <pad>)
    output.<name>         last_hidden_state, pooler_output of the f32 model
    output.sentence_embedding
                          SentenceTransformer.encode of the texts
    roundtrip.F8_E4M3FN:per_row.output.<name>
                          the model whose castable weights went through
                          F8_E4M3FN with per-row scales and back
  xlm_roberta_reranker  XLMRobertaForSequenceClassification, num_labels 1
  bert_reranker         BertForSequenceClassification, 3 labels (id2label)
  qwen3_embedding       Qwen3Model (Qwen3-Embedding's layout: no lm_head, keys
                        without "model.") + Pooling(lasttoken) + Normalize;
                        the tokenizer appends <|endoftext|> and pads on the
                        left, as Qwen3-Embedding's does
    input.<name>          the texts right-padded (what castserve's text input
                          makes)
    output.last_hidden_state  Qwen3Model on those inputs
    output.sentence_embedding SentenceTransformer.encode (left padding)
    input.<name>          tokenizer(queries, documents): the pair template
    output.scores         the model's logits, f32 [pairs, labels]
    output.cross_encoder  CrossEncoder.predict(pairs, activation_fn=Identity)
    roundtrip.F8_E4M3FN:per_row.output.scores
    truncated.input.*     tokenizer(queries, documents, truncation=True,
                          max_length=TRUNCATE_AT): longest_first
  and pair_reference.json: the `tokenizers` library's pair encodings

The rotary encoders (modernbert, nomic_bert) have their own section below.

The metadata holds the texts ("texts", or "queries" and "documents", JSON).

Run with the reference venv (tools/setup_reference_venv.sh):
  .venv-ref/bin/python tools/gen_encoder_fixtures.py [--only NAME ...]
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_model_fixtures as fixtures  # noqa: E402

OUT = os.path.join(fixtures.REPO_ROOT, "models", "testdata")
SEEDS = {"xlm_roberta": 1011, "xlm_roberta_reranker": 1012, "bert_reranker": 1013,
         "qwen3_embedding": 1014}
CAST_FORMAT = "F8_E4M3FN:per_row"
TRUNCATE_AT = 12
HEAD_GAIN = 100.0

TEXTS = [
    "the quick brown fox jumps over the lazy dog",
    "a reranker scores how well a document answers a query",
    "paris is the capital of france",
    "short",
]
QUERIES = [
    "what is the capital of france",
    "what is the capital of france",
    "how do rerankers score documents",
    "fox",
]
DOCUMENTS = [
    "paris is the capital of france",
    "the quick brown fox jumps over the lazy dog and runs far away from the farm",
    "a reranker scores how well a document answers a query",
    "the lazy dog",
]


def make_tokenizer(kind):
    """A WordPiece tokenizer over the texts: XLM-R's special ids (<s> 0,
    <pad> 1, </s> 2, <unk> 3) with RobertaProcessing, or BERT's with a
    TemplateProcessing pair template."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    words = sorted({w for t in TEXTS + QUERIES + DOCUMENTS for w in t.split()})
    if kind == "qwen":
        specials = ["<|endoftext|>", "<unk>"]
        unk = "<unk>"
    elif kind == "xlm":
        specials = ["<s>", "<pad>", "</s>", "<unk>"]
        unk = "<unk>"
    else:
        specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
        unk = "[UNK]"
    # Some words only as pieces, so WordPiece splits them ("##" continuations).
    vocab = specials + [w for w in words if len(w) <= 6] + ["far", "##m", "##s", "##er", "##t"]
    vocab += [c for c in "abcdefghijklmnopqrstuvwxyz" if c not in vocab]
    vocab += ["##" + c for c in "abcdefghijklmnopqrstuvwxyz" if "##" + c not in vocab]
    tok = Tokenizer(models.WordPiece({t: i for i, t in enumerate(vocab)}, unk_token=unk))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    ids = {t: i for i, t in enumerate(vocab)}
    if kind == "qwen":
        tok.post_processor = processors.TemplateProcessing(
            single="$A <|endoftext|>", pair="$A <|endoftext|> $B:1 <|endoftext|>:1",
            special_tokens=[("<|endoftext|>", ids["<|endoftext|>"])])
    elif kind == "xlm":
        tok.post_processor = processors.RobertaProcessing(("</s>", ids["</s>"]), ("<s>", ids["<s>"]))
    else:
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
            special_tokens=[("[CLS]", ids["[CLS]"]), ("[SEP]", ids["[SEP]"])])
    tok.add_special_tokens(specials)
    return tok, len(vocab)


def fast_tokenizer(tok, kind):
    from transformers import PreTrainedTokenizerFast

    if kind == "qwen":
        return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>",
                                       pad_token="<|endoftext|>", unk_token="<unk>",
                                       padding_side="left", model_max_length=64)
    if kind == "xlm":
        return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                       sep_token="</s>", cls_token="<s>", pad_token="<pad>",
                                       unk_token="<unk>", model_max_length=64)
    # BERT's tokenizers give token_type_ids (the pair template's types).
    return PreTrainedTokenizerFast(tokenizer_object=tok, cls_token="[CLS]", sep_token="[SEP]",
                                   pad_token="[PAD]", unk_token="[UNK]", model_max_length=64,
                                   model_input_names=["input_ids", "token_type_ids",
                                                      "attention_mask"])


def build(name, vocab_size):
    import torch
    import transformers as tf

    seed = SEEDS[name]
    torch.manual_seed(seed)
    common = dict(attn_implementation="eager", vocab_size=vocab_size, hidden_size=32,
                  num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                  hidden_act="gelu")
    if name == "xlm_roberta":
        config = tf.XLMRobertaConfig(max_position_embeddings=66, type_vocab_size=1,
                                     layer_norm_eps=1e-5, pad_token_id=1, bos_token_id=0,
                                     eos_token_id=2, **common)
        model = tf.XLMRobertaModel(config, add_pooling_layer=True)
    elif name == "qwen3_embedding":
        config = tf.Qwen3Config(
            attn_implementation="eager", vocab_size=vocab_size, hidden_size=32,
            intermediate_size=80, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, max_position_embeddings=128,
            rms_norm_eps=1e-6, rope_theta=1000000.0, hidden_act="silu",
            tie_word_embeddings=True, pad_token_id=0, eos_token_id=0)
        model = tf.Qwen3Model(config)
    elif name == "xlm_roberta_reranker":
        config = tf.XLMRobertaConfig(max_position_embeddings=66, type_vocab_size=1,
                                     layer_norm_eps=1e-5, pad_token_id=1, bos_token_id=0,
                                     eos_token_id=2, num_labels=1, **common)
        model = tf.XLMRobertaForSequenceClassification(config)
    elif name == "bert_reranker":
        labels = ["contradiction", "entailment", "neutral"]
        config = tf.BertConfig(max_position_embeddings=64, type_vocab_size=2, pad_token_id=0,
                               id2label=dict(enumerate(labels)),
                               label2id={l: i for i, l in enumerate(labels)}, **common)
        model = tf.BertForSequenceClassification(config)
    else:
        raise ValueError(name)
    fixtures.reinit_(model, seed)
    if name.endswith("_reranker"):
        # Random heads give scores within ~1e-3 of each other; a larger last
        # layer spreads them, so that a pair scored wrong shows.
        head = model.classifier if name == "bert_reranker" else model.classifier.out_proj
        with torch.no_grad():
            head.weight.mul_(HEAD_GAIN)
    model.eval()
    return model


def to_numpy(batch):
    return {k: np.ascontiguousarray(v.numpy().astype(np.int64)) for k, v in batch.items()
            if k in ("input_ids", "attention_mask", "token_type_ids")}


def forward(model, inputs, names):
    import torch

    with torch.no_grad():
        out = model(**{k: torch.from_numpy(v) for k, v in inputs.items()})
    return {k: getattr(out, "logits" if k == "scores" else k).float().numpy() for k in names}


def save(path, tensors, metadata):
    from safetensors.numpy import save_file

    save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, path,
              metadata={k: v if isinstance(v, str) else json.dumps(v)
                        for k, v in metadata.items()})
    fixtures.canonicalize_safetensors_header(path)


def write_classic_pipeline(folder, pooling="mean"):
    """sentence-transformers 6 saves its own layout (module types under
    sentence_transformers.base..., "pooling_mode"); the hub's models (bge-m3,
    multilingual-e5) ship the classic one, which castserve reads and
    sentence-transformers 6 still loads: the folder gets that."""
    def dump(rel, value):
        os.makedirs(os.path.dirname(os.path.join(folder, rel)), exist_ok=True)
        with open(os.path.join(folder, rel), "w") as f:
            json.dump(value, f, indent=2)
            f.write("\n")

    dump("modules.json", [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize",
         "type": "sentence_transformers.models.Normalize"}])
    dump("1_Pooling/config.json", {
        "word_embedding_dimension": 32, "pooling_mode_cls_token": False,
        "pooling_mode_mean_tokens": pooling == "mean", "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False, "pooling_mode_weightedmean_tokens": False,
        "pooling_mode_lasttoken": pooling == "lasttoken", "include_prompt": True})
    dump("2_Normalize/config.json", {})
    dump("sentence_bert_config.json", {"max_seq_length": 64, "do_lower_case": False})


def make_sentence_fixture(name, folder):
    import torch
    from sentence_transformers import SentenceTransformer, models as st_models

    tok, vocab_size = make_tokenizer("xlm")
    model = build(name, vocab_size)
    fixtures.fresh_dir(folder)
    staging = folder + ".hf"
    fixtures.fresh_dir(staging)
    model.save_pretrained(staging, safe_serialization=True)
    fast_tokenizer(tok, "xlm").save_pretrained(staging)
    transformer = st_models.Transformer(staging, max_seq_length=64)
    pooling = st_models.Pooling(32, pooling_mode="mean")
    st = SentenceTransformer(modules=[transformer, pooling, st_models.Normalize()], device="cpu")
    st.save(folder)
    fixtures.shutil.rmtree(staging)
    os.remove(os.path.join(folder, "README.md"))  # the generated model card
    write_classic_pipeline(folder)
    st = SentenceTransformer(folder, device="cpu")
    embeddings = st.encode(TEXTS, convert_to_numpy=True, batch_size=len(TEXTS))
    batch = to_numpy(st.preprocess(TEXTS))
    batch.pop("token_type_ids", None)
    names = ["last_hidden_state", "pooler_output"]
    tensors = {f"input.{k}": v for k, v in batch.items()}
    for k, v in forward(model, batch, names).items():
        tensors[f"output.{k}"] = v
    tensors["output.sentence_embedding"] = embeddings.astype(np.float32)
    for k, v in forward(fixtures.round_tripped_model(model, CAST_FORMAT), batch, names).items():
        tensors[f"roundtrip.{CAST_FORMAT}.output.{k}"] = v
    with torch.no_grad():  # the reference's own check: the pipeline is the model's
        hidden = torch.from_numpy(tensors["output.last_hidden_state"])
        mask = torch.from_numpy(batch["attention_mask"]).unsqueeze(-1).float()
        mean = (hidden * mask).sum(1) / mask.sum(1)
        mean = torch.nn.functional.normalize(mean, dim=-1).numpy()
    assert np.allclose(mean, embeddings, atol=1e-5), "pipeline differs from mean + normalize"
    return model, tensors, {"texts": TEXTS}


def write_pair_reference(folder):
    """pair_reference.json: the `tokenizers` library's encoding of each
    (query, document) pair by the folder's tokenizer.json, whole and
    truncated (longest_first) to a few lengths, for text/'s tests."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    cases = []
    for max_length in (0, TRUNCATE_AT, 7):
        if max_length:
            tok.enable_truncation(max_length, strategy="longest_first")
        else:
            tok.no_truncation()
        for query, document in zip(QUERIES + ["a b c d e f g h"], DOCUMENTS + ["x"]):
            e = tok.encode(query, document)
            cases.append({"first": query, "second": document, "max_length": max_length,
                          "ids": e.ids, "type_ids": e.type_ids})
    with open(os.path.join(folder, "pair_reference.json"), "w") as f:
        json.dump({"generator": "tools/gen_encoder_fixtures.py", "cases": cases}, f, indent=1)
        f.write("\n")


def make_qwen3_embedding_fixture(name, folder):
    import torch
    from sentence_transformers import SentenceTransformer, models as st_models

    tok, vocab_size = make_tokenizer("qwen")
    model = build(name, vocab_size)
    fixtures.fresh_dir(folder)
    model.save_pretrained(folder, safe_serialization=True)
    fast = fast_tokenizer(tok, "qwen")
    fast.save_pretrained(folder)
    write_classic_pipeline(folder, pooling="lasttoken")
    st = SentenceTransformer(folder, device="cpu")
    assert st.tokenizer.padding_side == "left", st.tokenizer.padding_side
    embeddings = st.encode(TEXTS, convert_to_numpy=True, batch_size=len(TEXTS))
    fast.padding_side = "right"
    batch = to_numpy(fast(TEXTS, padding=True, return_tensors="pt"))
    batch.pop("token_type_ids", None)
    tensors = {f"input.{k}": v for k, v in batch.items()}
    hidden = forward(model, batch, ["last_hidden_state"])["last_hidden_state"]
    tensors["output.last_hidden_state"] = hidden
    tensors["output.sentence_embedding"] = embeddings.astype(np.float32)
    rt = fixtures.round_tripped_model(model, CAST_FORMAT)
    tensors[f"roundtrip.{CAST_FORMAT}.output.last_hidden_state"] = forward(
        rt, batch, ["last_hidden_state"])["last_hidden_state"]
    # The pipeline's own check: the last real token of the right-padded
    # batch, normalized, is the left-padded pipeline's embedding.
    last = batch["attention_mask"].sum(1) - 1
    pooled = torch.from_numpy(hidden[np.arange(len(TEXTS)), last])
    pooled = torch.nn.functional.normalize(pooled, dim=-1).numpy()
    assert np.allclose(pooled, embeddings, atol=1e-5), "padding side changed the embedding"
    return model, tensors, {"texts": TEXTS}


def make_reranker_fixture(name, folder):
    import torch
    from sentence_transformers import CrossEncoder

    kind = "xlm" if name.startswith("xlm") else "bert"
    tok, vocab_size = make_tokenizer(kind)
    model = build(name, vocab_size)
    fixtures.fresh_dir(folder)
    model.save_pretrained(folder, safe_serialization=True)
    fast = fast_tokenizer(tok, kind)
    fast.save_pretrained(folder)
    batch = to_numpy(fast(QUERIES, DOCUMENTS, padding=True, return_tensors="pt"))
    if kind == "xlm":
        batch.pop("token_type_ids", None)
    tensors = {f"input.{k}": v for k, v in batch.items()}
    tensors["output.scores"] = forward(model, batch, ["scores"])["scores"]
    rt = fixtures.round_tripped_model(model, CAST_FORMAT)
    tensors[f"roundtrip.{CAST_FORMAT}.output.scores"] = forward(rt, batch, ["scores"])["scores"]
    cross = CrossEncoder(folder, device="cpu")
    predicted = cross.predict(list(zip(QUERIES, DOCUMENTS)), activation_fn=torch.nn.Identity(),
                              convert_to_numpy=True, batch_size=len(QUERIES))
    tensors["output.cross_encoder"] = np.asarray(predicted, np.float32).reshape(len(QUERIES), -1)
    truncated = to_numpy(fast(QUERIES, DOCUMENTS, padding=True, truncation=True,
                              max_length=TRUNCATE_AT, return_tensors="pt"))
    for k, v in truncated.items():
        tensors[f"truncated.input.{k}"] = v
    write_pair_reference(folder)
    labels = [model.config.id2label[i] for i in range(model.config.num_labels)]
    return model, tensors, {"queries": QUERIES, "documents": DOCUMENTS,
                            "truncate_at": str(TRUNCATE_AT), "labels": labels}


def make(name, report):
    import torch
    import transformers as tf

    folder = os.path.join(OUT, name)
    maker = {"xlm_roberta": make_sentence_fixture,
             "qwen3_embedding": make_qwen3_embedding_fixture,
             **ROTARY_MAKERS}.get(name, make_reranker_fixture)
    model, tensors, metadata = maker(name, folder)
    metadata.update({"fixture": name, "model_class": type(model).__name__,
                     "model_type": model.config.model_type, "seed": str(SEEDS[name]),
                     "cast_format": CAST_FORMAT, "transformers": tf.__version__,
                     "torch": torch.__version__,
                     "generator": "tools/gen_encoder_fixtures.py"})
    save(os.path.join(folder, "reference.safetensors"), tensors, metadata)
    report[name] = {"model_class": type(model).__name__, "files": fixtures.dir_files(folder)}


# ----------------------------------------------------------------------------
# Rotary encoders (ModernBERT, NomicBERT): sentence-transformers folders.
#
#   modernbert   ModernBertModel (3 layers: global, local, global; a band of
#                local_attention / 2 = 2 tokens each side) + Pooling(cls) +
#                Normalize, the pipeline in the classic layout (as the hub's
#                gte-modernbert ships it)
#   nomic_bert   NomicBertModel as transformers 5 saves it (q/k/v_proj,
#                gate/up/down_proj) + Pooling(mean) + Normalize, the pipeline
#                in sentence-transformers 6's own layout (its save())
#     fused/     the same weights in the hub's layout (attn.Wqkv, mlp.fc11
#                up, mlp.fc12 gate, mlp.fc2, norm1/norm2, emb_ln, under
#                encoder.layers) with the hub's GPT-2-style config keys; the
#                generator checks that transformers 5 loads it to the same
#                outputs
#   reference.safetensors: input.*, output.last_hidden_state,
#   output.sentence_embedding (SentenceTransformer.encode), and
#   roundtrip.F8_E4M3FN:per_row.output.last_hidden_state
# ----------------------------------------------------------------------------

ROTARY_SEEDS = {"modernbert": 1021, "nomic_bert": 1022}
SEEDS.update(ROTARY_SEEDS)


def rotary_tokenizer(token_types):
    """The BERT-kind WordPiece tokenizer; ModernBERT's takes no token types."""
    from transformers import PreTrainedTokenizerFast

    tok, vocab_size = make_tokenizer("bert")
    names = ["input_ids", "attention_mask"] + (["token_type_ids"] if token_types else [])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, cls_token="[CLS]", sep_token="[SEP]",
                                   pad_token="[PAD]", unk_token="[UNK]", model_max_length=64,
                                   model_input_names=names)
    return fast, vocab_size


def build_rotary(name, vocab_size):
    import torch
    import transformers as tf

    seed = ROTARY_SEEDS[name]
    torch.manual_seed(seed)
    if name == "modernbert":
        config = tf.ModernBertConfig(
            attn_implementation="eager", vocab_size=vocab_size, hidden_size=32,
            intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
            global_attn_every_n_layers=2, local_attention=4, max_position_embeddings=64,
            global_rope_theta=160000.0, local_rope_theta=10000.0, norm_eps=1e-5,
            hidden_activation="gelu", pad_token_id=0, cls_token_id=2, sep_token_id=3,
            bos_token_id=2, eos_token_id=3)
        model = tf.ModernBertModel(config)
    else:
        config = tf.NomicBertConfig(
            attn_implementation="eager", vocab_size=vocab_size, hidden_size=32,
            intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
            max_position_embeddings=64, type_vocab_size=2, layer_norm_eps=1e-12,
            hidden_act="silu", rope_parameters={"rope_type": "default", "rope_theta": 1000.0},
            pad_token_id=0)
        model = tf.NomicBertModel(config)
    fixtures.reinit_(model, seed)
    model.eval()
    return model


def write_pooling(folder, mode):
    """The classic pipeline files (as the hub's models ship them) with `mode`."""
    write_classic_pipeline(folder)
    path = os.path.join(folder, "1_Pooling", "config.json")
    with open(path) as f:
        pooling = json.load(f)
    pooling["pooling_mode_mean_tokens"] = mode == "mean"
    pooling["pooling_mode_cls_token"] = mode == "cls"
    with open(path, "w") as f:
        json.dump(pooling, f, indent=2)
        f.write("\n")


def save_sentence_transformers6(model, fast, folder, mode):
    """The pipeline as sentence-transformers 6 saves it (its own layout)."""
    from sentence_transformers import SentenceTransformer, models as st_models

    staging = folder + ".hf"
    fixtures.fresh_dir(staging)
    model.save_pretrained(staging, safe_serialization=True)
    fast.save_pretrained(staging)
    modules = [st_models.Transformer(staging),
               st_models.Pooling(model.config.hidden_size, pooling_mode=mode),
               st_models.Normalize()]
    fixtures.fresh_dir(folder)
    SentenceTransformer(modules=modules, device="cpu").save(folder)
    fixtures.shutil.rmtree(staging)
    os.remove(os.path.join(folder, "README.md"))  # the generated model card


def write_nomic_hub_layout(model, folder):
    """The model's weights under the hub's NomicBERT names and config keys."""
    import torch
    from safetensors.torch import save_file

    c = model.config
    hub = {}
    for key, value in model.state_dict().items():
        if key.startswith("embeddings.LayerNorm."):
            hub[key.replace("embeddings.LayerNorm.", "emb_ln.")] = value
        elif key.startswith("layers."):
            hub["encoder." + key] = value
        else:
            hub[key] = value
    renames = {"self_attn.o_proj": "attn.out_proj", "mlp.up_proj": "mlp.fc11",
               "mlp.gate_proj": "mlp.fc12", "mlp.down_proj": "mlp.fc2",
               "post_attention_layernorm": "norm1", "post_mlp_layernorm": "norm2"}
    out = {}
    for key, value in hub.items():
        for old, new in renames.items():
            key = key.replace(old, new)
        out[key] = value.contiguous()
    for i in range(c.num_hidden_layers):
        p = f"encoder.layers.{i}.self_attn."
        out[f"encoder.layers.{i}.attn.Wqkv.weight"] = torch.cat(
            [out.pop(p + "q_proj.weight"), out.pop(p + "k_proj.weight"),
             out.pop(p + "v_proj.weight")]).contiguous()
    fixtures.fresh_dir(folder)
    save_file(out, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    fixtures.canonicalize_safetensors_header(os.path.join(folder, "model.safetensors"))
    config = {"architectures": ["NomicBertModel"], "model_type": "nomic_bert",
              "activation_function": "swiglu", "n_embd": c.hidden_size, "n_head":
              c.num_attention_heads, "n_inner": c.intermediate_size, "n_layer":
              c.num_hidden_layers, "n_positions": c.max_position_embeddings,
              "vocab_size": c.vocab_size, "type_vocab_size": c.type_vocab_size,
              "layer_norm_epsilon": c.layer_norm_eps, "rotary_emb_base":
              c.rope_parameters["rope_theta"], "rotary_emb_fraction": 1.0,
              "rotary_emb_interleaved": False, "rotary_emb_scale_base": None,
              "rotary_scaling_factor": None, "prenorm": False, "qkv_proj_bias": False,
              "mlp_fc1_bias": False, "mlp_fc2_bias": False, "causal": False,
              "pad_token_id": c.pad_token_id}
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")
    return out


def check_hub_layout_loads(model, folder, batch):
    """transformers 5 loads the hub layout (its conversion mapping) to the
    same outputs; the hub config's GPT-2 keys it does not read, so the
    sizes come from the saved model's config."""
    import transformers as tf

    loaded = tf.NomicBertModel.from_pretrained(folder, config=model.config)
    loaded.eval()
    a = forward(model, batch, ["last_hidden_state"])["last_hidden_state"]
    b = forward(loaded, batch, ["last_hidden_state"])["last_hidden_state"]
    assert np.array_equal(a, b), "transformers reads the hub layout differently"


def make_rotary_fixture(name, folder):
    import torch
    from sentence_transformers import SentenceTransformer

    token_types = name == "nomic_bert"
    fast, vocab_size = rotary_tokenizer(token_types)
    model = build_rotary(name, vocab_size)
    mode = "cls" if name == "modernbert" else "mean"
    if name == "modernbert":
        fixtures.fresh_dir(folder)
        model.save_pretrained(folder, safe_serialization=True)
        fast.save_pretrained(folder)
        write_pooling(folder, mode)
    else:
        save_sentence_transformers6(model, fast, folder, mode)
    st = SentenceTransformer(folder, device="cpu")
    embeddings = st.encode(TEXTS, convert_to_numpy=True, batch_size=len(TEXTS))
    batch = to_numpy(fast(TEXTS, padding=True, return_tensors="pt"))
    tensors = {f"input.{k}": v for k, v in batch.items()}
    hidden = forward(model, batch, ["last_hidden_state"])["last_hidden_state"]
    tensors["output.last_hidden_state"] = hidden
    tensors["output.sentence_embedding"] = embeddings.astype(np.float32)
    rt = fixtures.round_tripped_model(model, CAST_FORMAT)
    tensors[f"roundtrip.{CAST_FORMAT}.output.last_hidden_state"] = forward(
        rt, batch, ["last_hidden_state"])["last_hidden_state"]
    with torch.no_grad():  # the pipeline is the model's pooling, normalized
        h = torch.from_numpy(hidden)
        mask = torch.from_numpy(batch["attention_mask"]).unsqueeze(-1).float()
        pooled = h[:, 0] if mode == "cls" else (h * mask).sum(1) / mask.sum(1)
        pooled = torch.nn.functional.normalize(pooled, dim=-1).numpy()
    assert np.allclose(pooled, embeddings, atol=1e-5), "pipeline differs from the model's"
    if name == "nomic_bert":
        write_nomic_hub_layout(model, os.path.join(folder, "fused"))
        check_hub_layout_loads(model, os.path.join(folder, "fused"), batch)
    return model, tensors, {"texts": TEXTS, "pooling": mode}


ROTARY_MAKERS = {name: make_rotary_fixture for name in ROTARY_SEEDS}


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
