// Encoding speed, single thread: the parity corpus through the MiniLM, the
// byte-level BPE and the XLM-R Unigram tokenizers (tokens/s), and 1 MiB and
// 2 MiB texts of one repeated character (the time must double, not
// quadruple). Folders named after the root (a real model's, say) are
// loaded (the time printed) and measured on the corpus too. Run from the
// repository root:
//   bazel run -c opt //text:tokenizer_benchmark -- $PWD [FOLDER...]
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "text/test_util/reference_corpus.h"
#include "text/tokenizer.h"

namespace castserve::text {
namespace {

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

void MeasureCorpus(const char* name, const Tokenizer& tokenizer,
                   const std::vector<std::string>& texts) {
  const auto start = std::chrono::steady_clock::now();
  int64_t tokens = 0;
  int rounds = 0;
  while (rounds < 3 || Seconds(start) < 2.0) {
    for (const std::string& text : texts)
      tokens += tokenizer.Encode(text, {})->ids.size();
    ++rounds;
  }
  const double seconds = Seconds(start);
  std::printf(
      "%s: %lld tokens in %.3f s (%d rounds over %zu texts): %.0f tokens/s\n",
      name, static_cast<long long>(tokens), seconds, rounds, texts.size(),
      tokens / seconds);
}

void MeasureRepeated(const char* name, const Tokenizer& tokenizer) {
  for (const std::string unit :
       {"a", " ", "\n", "é", "中", "😀", "!", "1", "'", "[MASK]"}) {
    double seconds[2];
    size_t ids = 0;
    for (int doubling = 0; doubling < 2; ++doubling) {
      std::string text;
      while (text.size() < (size_t{1} << (20 + doubling))) text += unit;
      const auto start = std::chrono::steady_clock::now();
      ids = tokenizer.Encode(text, {})->ids.size();
      seconds[doubling] = Seconds(start);
    }
    std::printf("%s: 1 MiB of \"%s\": %.3f s, 2 MiB: %.3f s (x%.2f), %zu ids\n",
                name, unit == "\n" ? "\\n" : unit.c_str(), seconds[0],
                seconds[1], seconds[1] / seconds[0], ids);
  }
}

}  // namespace
}  // namespace castserve::text

int main(int argc, char** argv) {
  using namespace castserve::text;
  if (argc > 1 && chdir(argv[1]) != 0) return 1;
  const std::vector<std::string> texts = ReadCorpus();
  auto minilm = LoadTokenizer("text/testdata/all-MiniLM-L6-v2");
  auto bpe = LoadTokenizer("text/testdata/bpe-llama3");
  auto unigram = LoadTokenizer("text/testdata/unigram/xlmr");
  if (texts.empty() || !minilm.ok() || !bpe.ok() || !unigram.ok()) {
    std::fprintf(stderr, "run from the repository root (or pass it)\n");
    return 1;
  }
  MeasureCorpus("minilm", **minilm, texts);
  MeasureCorpus("bpe-llama3", **bpe, texts);
  MeasureCorpus("unigram-xlmr", **unigram, texts);
  MeasureRepeated("minilm", **minilm);
  MeasureRepeated("bpe-llama3", **bpe);
  MeasureRepeated("unigram-xlmr", **unigram);
  for (int i = 2; i < argc; ++i) {
    const auto start = std::chrono::steady_clock::now();
    auto tokenizer = LoadTokenizer(argv[i]);
    const double seconds = Seconds(start);
    if (!tokenizer.ok()) {
      std::fprintf(stderr, "%s: %s\n", argv[i],
                   tokenizer.status().ToString().c_str());
      return 1;
    }
    std::printf("%s: loaded in %.3f s, %lld ids\n", argv[i], seconds,
                static_cast<long long>((*tokenizer)->vocab_size()));
    MeasureCorpus(argv[i], **tokenizer, texts);
  }
  return 0;
}
