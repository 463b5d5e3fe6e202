// libFuzzer target: Tokenizer::Encode of untrusted text over the MiniLM
// (WordPiece), the Llama 3-style byte-level BPE and the XLM-R Unigram
// (Precompiled charsmap) tokenizers of text/testdata. Checks: invalid UTF-8
// is InvalidArgument and nothing else fails; ids are in the vocabulary (a
// Unigram pair too, and its decoding succeeds); byte-level BPE decodes back
// to the text
// (the lossless property; "<L>" swallows spaces, so texts with it are
// skipped). Built by tools/run_fuzzers.sh; run from the repository root.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string_view>

#include "absl/status/status.h"
#include "text/tokenizer.h"

namespace {

using castserve::text::Encoding;
using castserve::text::Tokenizer;

std::unique_ptr<Tokenizer> Load(const char* folder) {
  auto tokenizer = castserve::text::LoadTokenizer(folder);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "%s: %s (run from the repository root)\n", folder,
                 tokenizer.status().ToString().c_str());
    __builtin_trap();
  }
  return *std::move(tokenizer);
}

void TrapUnless(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "invariant broken: %s\n", what);
    __builtin_trap();
  }
}

void CheckIds(const Tokenizer& tokenizer, const Encoding& encoding) {
  TrapUnless(encoding.ids.size() == encoding.type_ids.size(),
             "ids and type ids align");
  for (int64_t id : encoding.ids) {
    TrapUnless(id >= 0 && id < tokenizer.vocab_size(),
               "ids are in the vocabulary");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::unique_ptr<Tokenizer> minilm_tokenizer =
      Load("text/testdata/all-MiniLM-L6-v2");
  static const std::unique_ptr<Tokenizer> bpe_tokenizer =
      Load("text/testdata/bpe-llama3");
  static const std::unique_ptr<Tokenizer> unigram_tokenizer =
      Load("text/testdata/unigram/xlmr");
  const Tokenizer& minilm = *minilm_tokenizer;
  const Tokenizer& bpe = *bpe_tokenizer;
  const Tokenizer& unigram = *unigram_tokenizer;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  castserve::text::EncodeOptions options;
  options.max_length = size % 3 == 0 ? 0 : static_cast<int64_t>(size % 64);
  const absl::StatusOr<Encoding> word_pieces = minilm.Encode(text, options);
  if (!word_pieces.ok()) {
    TrapUnless(absl::IsInvalidArgument(word_pieces.status()),
               "only InvalidArgument");
    TrapUnless(!bpe.Encode(text, options).ok(), "all refuse invalid UTF-8");
    TrapUnless(!unigram.Encode(text, options).ok(), "all refuse invalid UTF-8");
    return 0;
  }
  CheckIds(minilm, *word_pieces);
  const absl::StatusOr<Encoding> pieces = unigram.Encode(text, options);
  TrapUnless(pieces.ok(), "Unigram encodes what WordPiece accepts");
  CheckIds(unigram, *pieces);
  TrapUnless(unigram.Decode(pieces->ids, true).ok(), "Unigram ids decode");
  const size_t half = text.size() / 2;
  const absl::StatusOr<Encoding> pair =
      unigram.EncodePair(text.substr(0, half), text.substr(half), options);
  // A cut inside a character makes both halves invalid UTF-8.
  TrapUnless(pair.ok() || absl::IsInvalidArgument(pair.status()),
             "a Unigram pair encodes or is InvalidArgument");
  if (pair.ok()) CheckIds(unigram, *pair);
  options.add_special_tokens = false;
  options.max_length = 0;
  const absl::StatusOr<Encoding> bytes = bpe.Encode(text, options);
  TrapUnless(bytes.ok(), "BPE encodes what WordPiece accepts");
  CheckIds(bpe, *bytes);
  if (text.find("<L>") == std::string_view::npos) {
    const absl::StatusOr<std::string> decoded = bpe.Decode(bytes->ids, false);
    TrapUnless(decoded.ok() && *decoded == text, "byte-level BPE round-trips");
  }
  return 0;
}
