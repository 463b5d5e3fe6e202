#!/usr/bin/env python3
r"""Writes //text's Unigram (SentencePiece-converted) tokenizer fixtures and
the `tokenizers` library's encodings of them.

SentencePiece (PyPI sentencepiece==0.2.1) trains two small unigram models on
a seeded multilingual text (Latin with accents, Cyrillic, Greek, CJK, kana,
Hangul, Arabic, Devanagari, emoji, full-width and compatibility characters),
and transformers 5 converts them to tokenizer.json files, under
text/testdata/unigram/:
  xlmr/tokenizer.json            XLMRobertaTokenizer.from_pretrained on the
                                 model (unk 0, bos 1, eos 2, nmt_nfkc), as
                                 bge-m3 / multilingual-e5 folders are
                                 converted today: Precompiled normalizer,
                                 WhitespaceSplit + Metaspace, <s> A </s>
                                 </s> B </s> template, Metaspace decoder
  xlmr-converter/tokenizer.json  the same model through the classic
                                 SpmConverter path (XLMRobertaConverter:
                                 Precompiled, Strip, Replace; Metaspace
                                 alone), with RobertaProcessing instead of
                                 the template, as older hub files have
  byte-fallback/tokenizer.json   a byte_fallback model (nmt_nfkc_cf) made by
                                 SpmConverter.build_tokenizer_from_spm_proto
                                 (Replace normalizers with \A and \z,
                                 Metaspace without split, Replace /
                                 ByteFallback / Fuse / Strip decoders)
  extra_corpus.txt               texts beyond references/corpus.txt that
                                 exercise the charsmap, graphemes and
                                 unknown characters (escaped as there)
  <name>.ids                     per text (references/corpus.txt, then
                                 extra_corpus.txt), the ids of encode(text)
  <name>.decoded.txt             decode(ids, skip_special_tokens=True)
  <name>.truncated.txt           "first second max_length<TAB>ids<TAB>type
                                 ids" for seeded pairs and singles (second
                                 -1) with longest_first truncation
                                 (max_length 0: none; else at least 4)

and, to serve end to end, with gen_encoder_fixtures.py's builders:
  xlm_roberta_model/             a random XLMRobertaModel (its seed, shape
                                 and sentence-transformers pipeline: mean
                                 pooling, Normalize) over xlmr's 3,002 ids,
                                 saved by sentence-transformers with that
                                 tokenizer; reference.safetensors holds
                                 input.input_ids / input.attention_mask (the
                                 tokenizer's batch of SERVED_TEXTS) and
                                 output.sentence_embedding, SERVED_TEXTS in
                                 its metadata "texts"
  xlm_roberta_reranker/          a random XLMRobertaForSequenceClassification
                                 (gen_encoder_fixtures' reranker) over the
                                 same tokenizer; reference.safetensors as
                                 gen_encoder_fixtures writes a reranker's:
                                 input.* (the pair batch), output.scores
                                 (logits), output.cross_encoder
                                 (CrossEncoder.predict) and the fp8 per-row
                                 round trip's scores; metadata "queries",
                                 "documents" (SERVED_QUERIES / _DOCUMENTS)

  /work/main/.venv-ref/bin/python tools/gen_unigram_fixtures.py
"""
import io
import json
import os
import random
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_tokenizer_references as corpus_source  # noqa: E402

SENTENCEPIECE_VERSION = "0.2.1"
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "text", "testdata")
OUT = os.path.join(ROOT, "unigram")
SEED = 20261202

SYLLABLES = {
    "latin": ("ba be bi bo bu ca ce ci co cu da de di do du fa fe fi fo ga ge gi go la le "
              "li lo lu ma me mi mo mu na ne ni no nu pa pe pi po pu ra re ri ro ru sa se si "
              "so su ta te ti to tu va ve vi vo za ze zi zo str tion ment ness able ing er ed "
              "an on en in un re pre").split(),
    "cyrillic": ("ба бе би бо бу ва ве ви во да де ди до жа за зе зи ка ке ки ко ла ле ли ло "
                 "ма ме ми мо на не ни но па пе пи по ра ре ри ро са се си со та те ти то ть "
                 "ый ой ий ая ое ство ение").split(),
    "greek": "κα κε κι λα λε λο μα με μο να νε πα πε πο ρα ρε σα σε τα τε το ος ης ων".split(),
    "cjk": list("的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会"
                "自着去之过家学对可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开"
                "手十用主行方又如前所本见经头面公同三已老从动两长知民样现分将外但身些与高意进"
                "把法此实回二理美点月明其种声全工己话儿者向情部正名定女问力机给等几很业最间新"
                "什打便位因重被走电四第门相次东政海口使教西再平真听世气信北少关并内加化由却代"
                "军产入先山五太水万市眼体别处总才场师书比住员九笑性通目华报立马命张活难神数件"),
    "hiragana": list("あいうえおかきくけこさしすせそたちつてとなにぬねのはひふへほまみむめもやゆよ"
                     "らりるれろわをんがぎぐげござじずぜぞだでどばびぶべぼぱぴぷぺぽ"),
    "katakana": list("アイウエオカキクケコサシスセソタチツテトナニヌネノハヒフヘホマミムメモヤユヨ"
                     "ラリルレロワヲンガギグゲゴザジズゼゾダデドバビブベボパピプペポー"),
    "hangul": list("가나다라마바사아자차카타파하고노도로모보소오조초코토포호구누두루무부수우주추"
                   "쿠투푸후기니디리미비시이지치키티피히한국어대학교"),
    "arabic": "با بي تا تي سا سي لا لي ما مي نا ني را ري كا كي وا ال ون ين ات".split(),
    "hindi": "क का कि की कु के को ग गा त ता ति न ना नि म मा मि र रा रि स सा सि ह हा है में से ने".split(),
}
ACCENTED = "é è ê à â ç ô û ü ö ä ß ñ ã õ ø å ł ś ż ć ř č š ž ő ű ě".split()
EMOJI = "😀 😂 🥰 😎 🤔 👍 👍🏽 ❤️ 🎉 🚀 🌍 🇫🇷 🇯🇵 👨‍👩‍👧 🏳️‍🌈 ✨ 🔥 🍕 ☕ ✅".split()
# What nmt_nfkc rewrites: full-width forms, compatibility characters,
# ligatures, circled and squared forms, half-width katakana, odd spaces.
COMPAT = ("Ａ Ｂ Ｃ ａ ｂ ｃ ０ １ ２ ３ ！ ？ （ ） ＃ ＠ ﬁ ﬂ ﬀ ﬃ ① ② ③ ⑴ ⒈ Ⅻ ⅷ ℌ ℍ ℕ ™ ℃ ㎏ ㎡ ㍿ "
          "㌀ ｶﾀｶﾅ ｶﾞ ﾊﾟ ｱｲｳ ㈱ ㊙ ¼ ½ ² ³ ſ µ Ǆ ǆ ｰ 〜 ～ … ‥ ′ ″").split()
ODD_SPACES = ["\u3000", "\u00a0", "\u2009", "\u200b", "\t", "\n", "\r\n", "  ", "   "]


def word(rng, script):
    syllables = SYLLABLES[script]
    wide = script in ("cjk", "hiragana", "katakana", "hangul")
    text = "".join(rng.choice(syllables) for _ in range(rng.randint(1, 3 if wide else 4)))
    if script == "latin" and rng.random() < 0.3:
        text += rng.choice(ACCENTED) + rng.choice(syllables)
    if script == "latin" and rng.random() < 0.1:
        text = text.capitalize()
    return text


def generated_line(rng):
    script = rng.choice(list(SYLLABLES))
    joiner = "" if script in ("cjk", "hiragana", "katakana") else " "
    words = [word(rng, script) for _ in range(rng.randint(3, 15))]
    for extra, chance in ((EMOJI, 0.2), (COMPAT, 0.2)):
        if rng.random() < chance:
            words.insert(rng.randrange(len(words)), rng.choice(extra))
    if rng.random() < 0.1:
        words.append(str(rng.randint(0, 100000)))
    return joiner.join(words) + rng.choice([".", "!", "?", ",", "", "。"])


def training_lines():
    rng = random.Random(SEED)
    lines = corpus_source.training_texts()[:10000]
    lines += [generated_line(rng) for _ in range(30000)]
    return [line.replace("\n", " ") for line in lines]


def extra_corpus():
    """Texts aimed at the charsmap (per grapheme), the Viterbi search and
    unknown characters, beyond the shared corpus."""
    rng = random.Random(SEED + 1)
    texts = ["", " ", "``quoted''", "a  b   c", "  leading", "trailing  ", " \u3000 ",
             "Ａ\u0301", "A\u0301", "e\u0301\u0302", "ｶﾞｷﾞ", "ﾊﾟﾋﾟ", "\r\n", "a\r\nb", "x\u20dd",
             "1\ufe0f\u20e3", "👍🏽👍🏽", "🇫🇷🇯🇵", "👨‍👩‍👧", "\u200d", "\ufeffbom", "a\u00adb",
             "\u0000nul", "tab\tnew\nline", "㍻㍼㍽", "ｈｅｌｌｏ　ｗｏｒｌｄ", "ℌℑℜℨ", "ǅǈǋ",
             "ﬁﬂﬀﬃﬄ", "①②③⑩⑳", "\u1100\u1161\u11a8", "각", "\u0e01\u0e33", "ༀ༁", "ᚠᚡᚢ",
             "𝐀𝐁𝐂", "𝔸𝔹", "\U0001F9EC\U0001FAE0", "<s>", "</s> <pad>", "<unk> <mask>",
             "a<mask>b", "▁", "▁▁x", "<0x41>"]
    texts += [generated_line(rng) for _ in range(200)]
    pool = COMPAT + EMOJI + ACCENTED + ODD_SPACES + ["\u0301", "\u0308", "\u200d", "\ufe0f"]
    texts += ["".join(rng.choice(pool) for _ in range(rng.randint(1, 12))) for _ in range(150)]
    texts += [corpus_source.random_assigned_char(rng) * rng.randint(1, 3) + " " +
              word(rng, rng.choice(list(SYLLABLES))) for _ in range(100)]
    return texts


def train(rule, byte_fallback, vocab_size):
    cache = os.environ.get("UNIGRAM_CACHE")
    if cache:
        path = os.path.join(cache, "%s-%d-%d.model" % (rule, byte_fallback, vocab_size))
        if os.path.exists(path):
            return open(path, "rb").read()
    import sentencepiece as spm
    assert spm.__version__ == SENTENCEPIECE_VERSION, spm.__version__
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(training_lines()), model_writer=model, vocab_size=vocab_size,
        model_type="unigram", character_coverage=0.9995, normalization_rule_name=rule,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, byte_fallback=byte_fallback,
        num_threads=1, seed_sentencepiece_size=100000, minloglevel=2)
    if cache:
        with open(path, "wb") as f:
            f.write(model.getvalue())
    return model.getvalue()


def xlmr_tokenizers(model_bytes, folder):
    """XLMRobertaTokenizer's conversion and the classic converter's."""
    from tokenizers import Tokenizer, processors
    from transformers import XLMRobertaTokenizer
    from transformers.convert_slow_tokenizer import XLMRobertaConverter
    with tempfile.TemporaryDirectory() as spm_folder:
        vocab_file = os.path.join(spm_folder, "sentencepiece.bpe.model")
        with open(vocab_file, "wb") as f:
            f.write(model_bytes)
        tokenizer = XLMRobertaTokenizer.from_pretrained(spm_folder)
        with tempfile.TemporaryDirectory() as saved:
            tokenizer.save_pretrained(saved)
            os.makedirs(os.path.join(OUT, folder), exist_ok=True)
            shutil.copy(os.path.join(saved, "tokenizer.json"),
                        os.path.join(OUT, folder, "tokenizer.json"))

        class Original:  # what the converter reads of a slow tokenizer
            def __init__(self):
                self.vocab_file = vocab_file
                self.add_prefix_space = True
                self.legacy = True

            def convert_tokens_to_ids(self, token):
                return tokenizer.convert_tokens_to_ids(token)
        classic = XLMRobertaConverter(Original()).converted()
    classic.add_special_tokens(["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    classic.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    os.makedirs(os.path.join(OUT, folder + "-converter"), exist_ok=True)
    classic.save(os.path.join(OUT, folder + "-converter", "tokenizer.json"))
    assert isinstance(Tokenizer.from_file(os.path.join(OUT, folder, "tokenizer.json")), Tokenizer)


def byte_fallback_tokenizer(model_bytes, folder):
    from tokenizers import processors
    from transformers.convert_slow_tokenizer import SpmConverter, import_protobuf
    proto = import_protobuf().ModelProto()
    proto.ParseFromString(model_bytes)
    vocab = [(piece.piece, piece.score) for piece in proto.pieces]
    tokenizer = SpmConverter.build_tokenizer_from_spm_proto(proto, vocab)
    tokenizer.add_special_tokens(["<unk>", "<s>", "</s>"])
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s>:1 $B:1", special_tokens=[("<s>", 1)])
    os.makedirs(os.path.join(OUT, folder), exist_ok=True)
    tokenizer.save(os.path.join(OUT, folder, "tokenizer.json"))


# Texts the served fixture embeds: what the charsmap rewrites, unknown
# characters, whitespace runs, several scripts.
SERVED_TEXTS = [
    "Ｈｅｌｌｏ　ｗｏｒｌｄ ﬁne ① ㍿",
    "bonjour  café crème brûlée",
    "你好世界 こんにちは ｶﾞ",
    "Привет мир 😀 👍🏽",
    "tabs\tand\nnewlines \U0001F9EC Ａ\u0301",
]


SERVED_QUERIES = ["ｃａｐｉｔａｌ of France?", "株式会社 ㍿", "bonjour  café", "😀 emoji"]
SERVED_DOCUMENTS = ["Paris est la capitale de la France.", "株式会社とは会社の一種です。",
                    "Привет мир ①②", "tabs\tand\nnewlines \U0001F9EC Ａ\u0301"]


def xlmr_fast_tokenizer(tokenizer_folder):
    from transformers import PreTrainedTokenizerFast
    return PreTrainedTokenizerFast(
        tokenizer_file=os.path.join(tokenizer_folder, "tokenizer.json"), bos_token="<s>",
        eos_token="</s>", unk_token="<unk>", pad_token="<pad>", mask_token="<mask>")


def served_reranker(tokenizer_folder, folder):
    import numpy as np
    import torch
    import gen_encoder_fixtures as encoders
    from sentence_transformers import CrossEncoder

    fixtures = encoders.fixtures
    tokenizer = xlmr_fast_tokenizer(tokenizer_folder)
    model = encoders.build("xlm_roberta_reranker", tokenizer.backend_tokenizer.get_vocab_size())
    fixtures.fresh_dir(folder)
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    batch = encoders.to_numpy(tokenizer(SERVED_QUERIES, SERVED_DOCUMENTS, padding=True,
                                        return_tensors="pt"))
    batch.pop("token_type_ids", None)
    tensors = {"input.%s" % k: v for k, v in batch.items()}
    tensors["output.scores"] = encoders.forward(model, batch, ["scores"])["scores"]
    cast = encoders.CAST_FORMAT
    round_tripped = fixtures.round_tripped_model(model, cast)
    tensors["roundtrip.%s.output.scores" % cast] = encoders.forward(
        round_tripped, batch, ["scores"])["scores"]
    cross = CrossEncoder(folder, device="cpu")
    predicted = cross.predict(list(zip(SERVED_QUERIES, SERVED_DOCUMENTS)),
                              activation_fn=torch.nn.Identity(), convert_to_numpy=True,
                              batch_size=len(SERVED_QUERIES))
    tensors["output.cross_encoder"] = np.asarray(predicted, np.float32).reshape(
        len(SERVED_QUERIES), -1)
    encoders.save(os.path.join(folder, "reference.safetensors"), tensors,
                  {"queries": SERVED_QUERIES, "documents": SERVED_DOCUMENTS})


def served_model(tokenizer_folder, folder):
    import numpy as np
    import gen_encoder_fixtures as encoders
    from sentence_transformers import SentenceTransformer, models as st_models

    fixtures = encoders.fixtures
    tokenizer = xlmr_fast_tokenizer(tokenizer_folder)
    model = encoders.build("xlm_roberta", tokenizer.backend_tokenizer.get_vocab_size())
    fixtures.fresh_dir(folder)
    staging = folder + ".hf"
    fixtures.fresh_dir(staging)
    model.save_pretrained(staging, safe_serialization=True)
    tokenizer.save_pretrained(staging)
    transformer = st_models.Transformer(staging, max_seq_length=64)
    pooling = st_models.Pooling(32, pooling_mode="mean")
    st = SentenceTransformer(modules=[transformer, pooling, st_models.Normalize()], device="cpu")
    st.save(folder)
    shutil.rmtree(staging)
    os.remove(os.path.join(folder, "README.md"))  # the generated model card
    encoders.write_classic_pipeline(folder)
    with open(os.path.join(folder, "tokenizer.json"), encoding="utf-8") as f:
        saved = json.load(f)
    with open(os.path.join(tokenizer_folder, "tokenizer.json"), encoding="utf-8") as f:
        original = json.load(f)
    # serde_json's default float parsing is best effort (within an ulp), so
    # a score read and written again may differ in its last digits.
    assert [t for t, _ in saved["model"]["vocab"]] == [t for t, _ in original["model"]["vocab"]]
    assert all(abs(a[1] - b[1]) < 1e-12
               for a, b in zip(saved["model"]["vocab"], original["model"]["vocab"]))
    st = SentenceTransformer(folder, device="cpu")
    embeddings = st.encode(SERVED_TEXTS, convert_to_numpy=True, batch_size=len(SERVED_TEXTS))
    batch = encoders.to_numpy(st.preprocess(SERVED_TEXTS))
    batch.pop("token_type_ids", None)
    tensors = {"input.%s" % k: v for k, v in batch.items()}
    tensors["output.sentence_embedding"] = embeddings.astype(np.float32)
    encoders.save(os.path.join(folder, "reference.safetensors"), tensors,
                  {"texts": SERVED_TEXTS})


def references(name, texts):
    from tokenizers import Tokenizer
    tokenizer = Tokenizer.from_file(os.path.join(OUT, name, "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    encodings = [tokenizer.encode(text) for text in texts]
    corpus_source.write_lines(os.path.join(OUT, name + ".ids"),
                              [" ".join(map(str, e.ids)) for e in encodings])
    corpus_source.write_lines(
        os.path.join(OUT, name + ".decoded.txt"),
        [corpus_source.escape(tokenizer.decode(e.ids, skip_special_tokens=True))
         for e in encodings])
    rng = random.Random(SEED + 2)
    lines = []
    for case in range(600):
        first = rng.randrange(len(texts))
        second = rng.randrange(len(texts)) if case % 3 else -1
        # At least the special tokens a pair adds (4): below that the
        # library's max_length - added wraps around and nothing is cut.
        max_length = rng.choice([0, 4, 5, 8, 12, 20, 40])
        if max_length:
            tokenizer.enable_truncation(max_length, strategy="longest_first")
        else:
            tokenizer.no_truncation()
        encoding = (tokenizer.encode(texts[first]) if second < 0
                    else tokenizer.encode(texts[first], texts[second]))
        lines.append("%d %d %d\t%s\t%s" % (first, second, max_length,
                                           " ".join(map(str, encoding.ids)),
                                           " ".join(map(str, encoding.type_ids))))
    corpus_source.write_lines(os.path.join(OUT, name + ".truncated.txt"), lines)


def main():
    os.makedirs(OUT, exist_ok=True)
    xlmr_tokenizers(train("nmt_nfkc", False, 3000), "xlmr")
    byte_fallback_tokenizer(train("nmt_nfkc_cf", True, 2000), "byte-fallback")
    shared = corpus_source.corpus()
    with open(os.path.join(ROOT, "references", "corpus.txt"), encoding="utf-8") as f:
        committed = f.read().split("\n")[:-1]
    assert committed == [corpus_source.escape(t) for t in shared], "corpus.txt is stale"
    extra = extra_corpus()
    corpus_source.write_lines(os.path.join(OUT, "extra_corpus.txt"),
                              [corpus_source.escape(t) for t in extra])
    for name in ("xlmr", "xlmr-converter", "byte-fallback"):
        references(name, shared + extra)
    served_model(os.path.join(OUT, "xlmr"), os.path.join(OUT, "xlm_roberta_model"))
    served_reranker(os.path.join(OUT, "xlmr"), os.path.join(OUT, "xlm_roberta_reranker"))
    print("gen_unigram_fixtures: wrote", OUT)


if __name__ == "__main__":
    main()
