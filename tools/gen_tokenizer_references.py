#!/usr/bin/env python3
r"""Generates //text's parity references with the Python libraries.

Writes, under text/testdata/ (all seeded, so a rerun gives the same files):
  references/corpus.txt        the corpus, one text per line, escaped:
                               backslash as \\, other bytes below 0x20
                               and 0x7f as \xHH (so \n is \x0a)
  references/<name>.ids        per corpus line, the ids the Python library
                               gives (add_special_tokens=True), space-separated
  references/minilm.decoded.txt   MiniLM's decode(ids, skip_special_tokens),
                               escaped the same way; bpe-llama2.decoded.txt
                               has "index decoded" only where decode(ids)
                               differs from the text
  references/bert_characters.txt    per code point where BertNormalizer
                               (clean_text, lowercase, strip_accents) or
                               BertPreTokenizer changes or splits it alone
and, with --train, first (re)trains and writes the small tokenizers:
  bpe-llama3/tokenizer.json    byte-level BPE, Llama 3's pre-tokenizer regex,
                               ignore_merges, <|begin_of_text|> template
  bpe-qwen2/tokenizer.json     byte-level BPE, NFC + Qwen2's regex
  bpe-llama2/tokenizer.json    BPE as Llama 2 declares it (byte_fallback,
                               Prepend/Replace normalizers, fuse_unk)
  sentencepiece/tokenizer.model  a small unigram SentencePiece model

Needs `tokenizers` and `sentencepiece` (pip); CI does not run this: the
C++ tests compare with the committed files.

  python3 tools/gen_tokenizer_references.py [--train] [--benchmark]
"""
import argparse
import json
import os
import random
import sys
import time
import unicodedata

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models
from tokenizers import normalizers, pre_tokenizers, processors, trainers

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "text", "testdata")
REFS = os.path.join(ROOT, "references")
SEED = 20261201

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

WORDS = ("the of and to in is was that for it with as his on be at by had are but from or "
         "have an they which one you were all we her she there would their will when who him "
         "been has more if no out do so can what up said about other into than its time only "
         "could new them man some these then two first may any like now my such make over our "
         "even most me state after also made many did must before back see through way where "
         "get much go well your know should down work year because come people just say each "
         "those take day good how long Mr own too little use US very great still men here life "
         "both between old under last never place same another think house while high right "
         "might came off find states since used give against three himself look few general "
         "hand school part small American home during number again Mrs around thought went "
         "without however govern don't world less tokenizer embeddings transformer serving "
         "GPU latency throughput quantization safetensors Kubernetes gRPC HTTP unaffable "
         "antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis").split()
ACCENTED = ("café naïve résumé façade über Straße Ärger Öl Ünal crème brûlée jalapeño "
            "São Paulo Kraków Dvořák Ångström Þór Ørsted Łódź Việt Nam tiếng Việt "
            "İstanbul ıspanak ΣΊΣΥΦΟΣ Ὀδυσσεύς ﬁnance ﬂour Ａｂｃ １２３ Å Å é é ǅ ǈ "
            "ΜΆΙΟΣ ΌΣΟΣ ꞵ ᾈ ﬀ ǰ ŉ ẞ ß").split()
SCRIPTS = {
    "arabic": "مرحبا بالعالم هذا نص عربي للاختبار ١٢٣ ٤٥٦ والتشكيل مُحَمَّد",
    "hebrew": "שלום עולם זהו טקסט בעברית",
    "hindi": "नमस्ते दुनिया यह हिंदी पाठ है क्षत्रिय १२३",
    "bengali": "আমি বাংলায় গান গাই",
    "tamil": "வணக்கம் உலகம்",
    "cyrillic": "Привет мир Это русский текст Ёжик ЁЛКА Україна",
    "greek": "Γειά σου Κόσμε ΟΔΟΣ λόγος",
    "thai": "สวัสดีชาวโลก ภาษาไทยไม่มีช่องว่าง",
    "korean": "안녕하세요 세계 한국어 텍스트 ᄀᄁ",
    "japanese": "こんにちは世界 カタカナ ﾊﾝｶｸ 日本語のテキストです",
    "chinese": "你好世界 这是中文文本 繁體中文 𠀀𠀁 㐀",
    "georgian": "გამარჯობა მსოფლიო",
    "armenian": "Բարեւ աշխարհ",
    "ethiopic": "ሰላም ለዓለም",
    "devanagari_marks": "क़ ख़ ग़ ज़",
}
EMOJI = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🇺🇸", "🇯🇵", "❤️", "🏳️‍🌈", "🤖", "🧑🏿‍💻", "✅", "☕", "🥺",
         "🫠", "1️⃣", "©", "™", "🔥🔥🔥", "🙏", "🎉"]
SPACES = [" ", "  ", "   ", "\t", "\n", "\r\n", "\r", "\n\n", " \n ", "\u00a0", "\u3000",
          "\u2009", "\u2028", "\u2029", "\u200b", "\u202f", "\u205f", "\x0b", "\x0c", "\x85",
          "\u1680", "\t\t  ", "    \n    "]
CONTROLS = ["\x00", "\x01", "\x07", "\x1b", "\x7f", "\x9f", "\u200d", "\u200c", "\u2060",
            "\ufeff", "\ue000", "\U000f0000", "\ufffd", "\u061c", "\u00ad", "\u0890",
            "\U0001f3fb", "\u0301", "\u0308", "\U000e0001"]
SPECIALS = ["[CLS]", "[SEP]", "[MASK]", "[PAD]", "[UNK]", "[MAS", "[mask]", "[ MASK ]",
            "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|eot_id", "<s>", "</s>",
            "<L>", " <L> ", "[SW]", "a[SW]b", " [SW] ", "[SW][SW]", "hello world",
            "Hello World", "cafe\u0301", "café", "<unk>", "<pad>", "##ing", "Ġthe"]
CONTRACTIONS = ["it's", "don't", "we're", "I've", "I'm", "you'll", "she'd", "IT'S", "WE'LL",
                "O'Neil", "rock'n'roll", "y'all", "'s", "''", "it\u2019s", "don\u2019t",
                "'S'T'RE'VE'M'LL'D", "can't've"]
PUNCTUATION = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~¡¿«»—–…·•¶§†‡‰′″‹›「」『』【】、。・！？（）"
NUMBERS = ["0", "7", "42", "123", "1234", "12345", "1234567890", "3.14159", "-273.15", "1e-9",
           "1,000,000", "555-0100", "+1 (555) 010-0199", "٣٤٥", "१२३", "１２３", "½", "²",
           "Ⅻ", "2026-12-01T18:20:00Z", "0x7FFF", "v1.2.3", "99%", "$19.99", "€5", "10k"]
SNIPPETS = ["def f(x):\n    return x ** 2\n", "int main() { return 0; }",
            "https://example.com/a/b?c=d&e=f#g", "user@example.org", "C:\\Windows\\System32",
            "<div class=\"x\">Hi</div>", "SELECT * FROM t WHERE a = 'b';", "a_b_c-d.e/f",
            "#hashtag @mention", "snake_case camelCase PascalCase kebab-case SCREAMING_CASE"]


def random_assigned_char(rng):
    while True:
        c = rng.randrange(0x20, 0x30000)
        if 0xD800 <= c <= 0xDFFF:
            continue
        if unicodedata.category(chr(c)) != "Cn":
            return chr(c)


def sentence(rng, n=None):
    n = n or rng.randint(3, 18)
    words = [rng.choice(WORDS) for _ in range(n)]
    if rng.random() < 0.5:
        words[0] = words[0].capitalize()
    text = " ".join(words)
    return text + rng.choice([".", "!", "?", "", ",", "...", " :)"])


def fragment(rng):
    kind = rng.randrange(12)
    if kind == 0:
        return sentence(rng, rng.randint(1, 6))
    if kind == 1:
        return rng.choice(ACCENTED)
    if kind == 2:
        words = rng.choice(list(SCRIPTS.values())).split()
        return " ".join(rng.sample(words, rng.randint(1, len(words))))
    if kind == 3:
        return "".join(rng.choice(EMOJI) for _ in range(rng.randint(1, 3)))
    if kind == 4:
        return rng.choice(SPACES)
    if kind == 5:
        return rng.choice(CONTROLS)
    if kind == 6:
        return rng.choice(SPECIALS)
    if kind == 7:
        return rng.choice(CONTRACTIONS)
    if kind == 8:
        return "".join(rng.choice(PUNCTUATION) for _ in range(rng.randint(1, 6)))
    if kind == 9:
        return rng.choice(NUMBERS)
    if kind == 10:
        return rng.choice(SNIPPETS)
    return "".join(random_assigned_char(rng) for _ in range(rng.randint(1, 4)))


def long_word(rng):
    kind = rng.randrange(5)
    length = rng.choice([99, 100, 101, 150, 200, 300, 500])
    if kind == 0:
        return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(length))
    if kind == 1:
        return rng.choice("aé中😀1!") * length
    if kind == 2:
        return "".join(rng.choice("0123456789") for _ in range(length))
    if kind == 3:
        return "un" + "believ" * (length // 6) + "able"
    return "".join(rng.choice(list(SCRIPTS["hindi"] + SCRIPTS["arabic"]).copy()) for _ in range(length))


def corpus():
    rng = random.Random(SEED)
    texts = ["", " ", "  ", "\n", "\t", "\r\n", "\u00a0", "\u3000"]
    texts += SPECIALS + CONTRACTIONS + NUMBERS + SNIPPETS + ACCENTED + EMOJI + CONTROLS
    texts += list(SCRIPTS.values()) + list(PUNCTUATION) + SPACES
    texts += [sentence(rng) for _ in range(1200)]
    for _ in range(3000):
        pieces = [fragment(rng) for _ in range(rng.randint(1, 6))]
        joiner = rng.choice(["", " ", " ", "  ", "\n", "\t", rng.choice(SPACES)])
        texts.append(joiner.join(pieces))
    texts += [long_word(rng) for _ in range(60)]
    texts += [rng.choice(SPACES) * rng.randint(1, 40) + fragment(rng) for _ in range(300)]
    texts += [fragment(rng) + rng.choice(SPACES) * rng.randint(1, 20) for _ in range(300)]
    texts += ["".join(rng.choice(PUNCTUATION) for _ in range(rng.randint(5, 60)))
              for _ in range(100)]
    texts += ["".join(random_assigned_char(rng) for _ in range(rng.randint(1, 30)))
              for _ in range(400)]
    texts += [sentence(rng).upper() for _ in range(100)]
    return texts


def training_texts():
    rng = random.Random(SEED + 1)
    texts = [sentence(rng, rng.randint(5, 30)) for _ in range(20000)]
    texts += [" ".join(fragment(rng) for _ in range(8)) for _ in range(5000)]
    texts += list(SCRIPTS.values()) * 50
    return texts


def train_bpe(pattern, nfc, vocab_size):
    tokenizer = Tokenizer(models.BPE(ignore_merges=True))
    if nfc:
        tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<|begin_of_text|>", "<|end_of_text|>"])
    tokenizer.train_from_iterator(training_texts(), trainer)
    bos = tokenizer.token_to_id("<|begin_of_text|>")
    tokenizer.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(
            single="<|begin_of_text|> $A",
            pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
            special_tokens=[("<|begin_of_text|>", bos)]),
    ])
    tokenizer.add_special_tokens([
        AddedToken("<|eot_id|>", special=True, normalized=False),
        AddedToken("<L>", special=True, lstrip=True, rstrip=True, normalized=False),
    ])
    tokenizer.add_tokens([
        AddedToken("[SW]", single_word=True, normalized=False),
        AddedToken("hello world", normalized=True),
        AddedToken("cafe\u0301", normalized=True),
    ])
    spec = json.loads(tokenizer.to_str())
    spec["model"]["ignore_merges"] = True  # the trainer may reset it
    return json.dumps(spec, ensure_ascii=False, indent=None)


def train_llama2_style(vocab_size):
    """BPE as Llama 2's tokenizer.json declares it: Prepend/Replace "\u2581"
    normalizers, no pre-tokenizer, byte_fallback with <0xXX> tokens, fuse_unk,
    and the Replace/ByteFallback/Fuse/Strip decoders."""
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    tokenizer.normalizer = normalizers.Sequence([
        normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tokenizer.decoder = decoders.Sequence([
        decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
        decoders.Strip(" ", 1, 0)])
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False, limit_alphabet=150,
                                  special_tokens=["<unk>", "<s>", "</s>"])
    tokenizer.train_from_iterator(training_texts(), trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", tokenizer.token_to_id("<s>"))])
    spec = json.loads(tokenizer.to_str())
    vocab = spec["model"]["vocab"]
    for byte in range(256):  # in the model's vocabulary, as in Llama 2's file
        vocab.setdefault("<0x%02X>" % byte, len(vocab))
    return json.dumps(spec, ensure_ascii=False, indent=None)


def train_sentencepiece(path):
    import sentencepiece as spm
    text_path = path + ".train.txt"
    with open(text_path, "w", encoding="utf-8") as f:
        for line in training_texts()[:20000]:
            f.write(line.replace("\n", " ") + "\n")
    spm.SentencePieceTrainer.train(
        input=text_path, model_prefix=path[:-len(".model")], vocab_size=600,
        hard_vocab_limit=False,
        model_type="unigram", character_coverage=0.9995, seed_sentencepiece_size=100000,
        bos_id=1, eos_id=2, unk_id=0, pad_id=3, byte_fallback=True, num_threads=1,
        minloglevel=2)
    os.remove(text_path)
    os.remove(path[:-len(".model")] + ".vocab")


def escape(text):
    out = []
    for ch in text:
        if ch == "\\":
            out.append("\\\\")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append("\\x%02x" % ord(ch))
        else:
            out.append(ch)
    return "".join(out)


def write_lines(path, lines):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for line in lines:
            f.write(line + "\n")


def bert_characters():
    """Lines "first last kind normalized" (hex code points) for the runs of
    code points that BertNormalizer (MiniLM's settings) changes or
    BertPreTokenizer splits when alone. kind: word, space, punct, other;
    normalized: "-" (removed), "c" (the character between two spaces, as
    handle_chinese_chars does), "=" (unchanged) or the code points of the
    result joined by ",". Code points in no run are unchanged words."""
    normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                            strip_accents=None, lowercase=True)
    pre = pre_tokenizers.BertPreTokenizer()
    runs = []
    for c in range(0x110000):
        if 0xD800 <= c <= 0xDFFF:
            continue
        ch = chr(c)
        normalized = normalizer.normalize_str(ch)
        words = [w for w, _ in pre.pre_tokenize_str("a" + ch + "a")]
        kind = "word" if words == ["a" + ch + "a"] else (
            "space" if words == ["a", "a"] else ("punct" if words == ["a", ch, "a"] else "other"))
        if normalized == ch:
            result = "="
        elif normalized == "":
            result = "-"
        elif normalized == " " + ch + " ":
            result = "c"
        else:
            result = ",".join("%x" % ord(x) for x in normalized)
        if result == "=" and kind == "word":
            continue
        if (runs and runs[-1][1] == c - 1 and runs[-1][2:] == [kind, result]
                and result in ("=", "-", "c")):
            runs[-1][1] = c
        else:
            runs.append([c, c, kind, result])
    return ["%x %x %s %s" % tuple(run) for run in runs]


def references(texts, name, tokenizer_path):
    tokenizer = Tokenizer.from_file(tokenizer_path)
    tokenizer.no_truncation()
    tokenizer.no_padding()
    encodings = [tokenizer.encode(t) for t in texts]
    write_lines(os.path.join(REFS, name + ".ids"),
                [" ".join(map(str, e.ids)) for e in encodings])
    return tokenizer, encodings


def benchmark(texts, tokenizer, name):
    """Single-thread encoding speed: per string from Python, and in one
    encode_batch call with the library's parallelism off."""
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    start = time.perf_counter()
    tokens = sum(len(tokenizer.encode(t).ids) for t in texts)
    seconds = time.perf_counter() - start
    print("python tokenizers %s: %.0f tokens/s (encode per string, %d tokens in %.3f s)"
          % (name, tokens / seconds, tokens, seconds))
    start = time.perf_counter()
    rounds = 0
    while rounds < 3 or time.perf_counter() - start < 2.0:
        tokens = sum(len(e.ids) for e in tokenizer.encode_batch(texts))
        rounds += 1
    seconds = time.perf_counter() - start
    print("python tokenizers %s: %.0f tokens/s (encode_batch, one thread, %d rounds)"
          % (name, tokens * rounds / seconds, rounds))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--train", action="store_true")
    parser.add_argument("--benchmark", action="store_true")
    args = parser.parse_args()
    os.makedirs(REFS, exist_ok=True)
    if args.train:
        for name, pattern, nfc, size in [("bpe-llama3", LLAMA3_PATTERN, False, 3000),
                                         ("bpe-qwen2", QWEN2_PATTERN, True, 2000)]:
            os.makedirs(os.path.join(ROOT, name), exist_ok=True)
            with open(os.path.join(ROOT, name, "tokenizer.json"), "w", encoding="utf-8") as f:
                f.write(train_bpe(pattern, nfc, size))
        os.makedirs(os.path.join(ROOT, "bpe-llama2"), exist_ok=True)
        with open(os.path.join(ROOT, "bpe-llama2", "tokenizer.json"), "w", encoding="utf-8") as f:
            f.write(train_llama2_style(1500))
        os.makedirs(os.path.join(ROOT, "sentencepiece"), exist_ok=True)
        train_sentencepiece(os.path.join(ROOT, "sentencepiece", "tokenizer.model"))
    texts = corpus()
    write_lines(os.path.join(REFS, "corpus.txt"), [escape(t) for t in texts])
    minilm, encodings = references(texts, "minilm",
                                   os.path.join(ROOT, "all-MiniLM-L6-v2", "tokenizer.json"))
    write_lines(os.path.join(REFS, "minilm.decoded.txt"),
                [escape(minilm.decode(e.ids, skip_special_tokens=True)) for e in encodings])
    bpe, bpe_encodings = references(texts, "bpe-llama3",
                                    os.path.join(ROOT, "bpe-llama3", "tokenizer.json"))
    lossy = sum(bpe.decode(e.ids, skip_special_tokens=False) != "<|begin_of_text|>" + t
                for e, t in zip(bpe_encodings, texts))
    print("bpe-llama3: %d of %d texts do not decode to themselves" % (lossy, len(texts)))
    references(texts, "bpe-qwen2", os.path.join(ROOT, "bpe-qwen2", "tokenizer.json"))
    llama2, llama2_encodings = references(
        texts, "bpe-llama2", os.path.join(ROOT, "bpe-llama2", "tokenizer.json"))
    decoded = [llama2.decode(e.ids, skip_special_tokens=True) for e in llama2_encodings]
    write_lines(os.path.join(REFS, "bpe-llama2.decoded.txt"),
                ["%d %s" % (i, escape(d)) for i, (d, t) in enumerate(zip(decoded, texts))
                 if d != t])
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(
        model_file=os.path.join(ROOT, "sentencepiece", "tokenizer.model"))
    write_lines(os.path.join(REFS, "sentencepiece.ids"),
                [" ".join(map(str, sp.encode(t))) for t in texts])
    write_lines(os.path.join(REFS, "bert_characters.txt"), bert_characters())
    print("%d texts" % len(texts))
    if args.benchmark:
        benchmark(texts, minilm, "minilm")
        benchmark(texts, bpe, "bpe-llama3")


if __name__ == "__main__":
    sys.exit(main())
