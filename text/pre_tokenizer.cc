#include "text/pre_tokenizer.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "text/byte_level.h"
#include "text/unicode.h"

namespace castserve::text {
namespace {

using Behavior = PreTokenizerSpec::Behavior;
using Span = SplitPattern::Span;
using Type = PreTokenizerSpec::Type;

// GPT-2's pattern, which ByteLevel uses when use_regex is set.
constexpr absl::string_view kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|"
    "\\s+(?!\\S)|\\s+";
// The Whitespace pre-tokenizer keeps the matches of this.
constexpr absl::string_view kWhitespacePattern = "\\w+|[^\\w\\s]+";

// Cuts `text` at characters for which `classify` says kRemove (dropped) or
// kIsolate (a word of their own); the rest accumulate into words.
enum class CharRole { kKeep, kRemove, kIsolate };
template <typename Classify>
void SplitOnCharacters(absl::string_view text, Classify classify,
                       std::vector<std::string>* out) {
  size_t word_begin = 0;
  for (size_t i = 0; i < text.size();) {
    const size_t begin = i;
    const CharRole role = classify(NextCodePoint(text, &i));
    if (role == CharRole::kKeep) continue;
    if (begin > word_begin)
      out->emplace_back(text.substr(word_begin, begin - word_begin));
    if (role == CharRole::kIsolate)
      out->emplace_back(text.substr(begin, i - begin));
    word_begin = i;
  }
  if (text.size() > word_begin) out->emplace_back(text.substr(word_begin));
}

}  // namespace

std::vector<Span> ApplySplitBehavior(
    const std::vector<std::pair<Span, bool>>& parts, Behavior behavior,
    bool invert) {
  std::vector<Span> spans;
  bool previous_match = false;
  auto push = [&](Span span) { spans.push_back(span); };
  switch (behavior) {
    case Behavior::kRemoved:
      for (const auto& [span, match] : parts) {
        if (match == invert) push(span);
      }
      break;
    case Behavior::kIsolated:
      for (const auto& [span, match] : parts) push(span);
      break;
    case Behavior::kContiguous:
      for (const auto& [span, raw_match] : parts) {
        const bool match = raw_match != invert;
        if (match && previous_match && !spans.empty()) {
          spans.back().second = span.second;
        } else {
          push(span);
        }
        previous_match = match;
      }
      break;
    case Behavior::kMergedWithPrevious:
      for (const auto& [span, raw_match] : parts) {
        const bool match = raw_match != invert;
        if (match && !previous_match && !spans.empty()) {
          spans.back().second = span.second;
        } else {
          push(span);
        }
        previous_match = match;
      }
      break;
    case Behavior::kMergedWithNext:
      for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
        const bool match = it->second != invert;
        if (match && !previous_match && !spans.empty()) {
          spans.back().first = it->first.first;
        } else {
          push(it->first);
        }
        previous_match = match;
      }
      std::reverse(spans.begin(), spans.end());
      break;
  }
  std::vector<Span> kept;
  kept.reserve(spans.size());
  for (const Span& span : spans) {
    if (span.first != span.second) kept.push_back(span);
  }
  return kept;
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::Create(
    const PreTokenizerSpec& spec) {
  std::unique_ptr<PreTokenizer> pre_tokenizer(new PreTokenizer());
  if (absl::Status status = pre_tokenizer->AddSteps(spec); !status.ok()) {
    return status;
  }
  return pre_tokenizer;
}

absl::Status PreTokenizer::AddSteps(const PreTokenizerSpec& spec) {
  if (spec.type == Type::kSequence) {
    for (const PreTokenizerSpec& child : spec.pretokenizers) {
      if (absl::Status status = AddSteps(child); !status.ok()) return status;
    }
    return absl::OkStatus();
  }
  Step step{spec, nullptr};
  step.spec.pretokenizers.clear();
  PatternSpec pattern;
  if (spec.type == Type::kSplit) {
    pattern = spec.pattern;
  } else if (spec.type == Type::kByteLevel && spec.use_regex) {
    pattern = {true, std::string(kGpt2Pattern)};
  } else if (spec.type == Type::kWhitespace) {
    pattern = {true, std::string(kWhitespacePattern)};
  }
  if (!pattern.text.empty()) {
    absl::StatusOr<std::unique_ptr<SplitPattern>> compiled =
        SplitPattern::Create(pattern);
    if (!compiled.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(spec.path, ".pattern: ", compiled.status().message()));
    }
    step.pattern = *std::move(compiled);
  }
  steps_.push_back(std::move(step));
  return absl::OkStatus();
}

void PreTokenizer::PreTokenize(absl::string_view text,
                               std::vector<std::string>* words) const {
  std::vector<std::string> pieces{std::string(text)};
  std::vector<std::string> next;
  for (const Step& step : steps_) {
    next.clear();
    for (const std::string& piece : pieces) Apply(step, piece, &next);
    pieces.swap(next);
  }
  for (std::string& piece : pieces) {
    if (!piece.empty()) words->push_back(std::move(piece));
  }
}

void PreTokenizer::Apply(const Step& step, absl::string_view piece,
                         std::vector<std::string>* out) const {
  switch (step.spec.type) {
    case Type::kBert:
      return SplitOnCharacters(
          piece,
          [](char32_t c) {
            if (IsWhitespace(c)) return CharRole::kRemove;
            return IsBertPunctuation(c) ? CharRole::kIsolate : CharRole::kKeep;
          },
          out);
    case Type::kWhitespaceSplit:
      return SplitOnCharacters(
          piece,
          [](char32_t c) {
            return IsWhitespace(c) ? CharRole::kRemove : CharRole::kKeep;
          },
          out);
    case Type::kPunctuation: {
      std::vector<std::pair<Span, bool>> parts;
      for (size_t i = 0; i < piece.size();) {
        const size_t begin = i;
        const bool punctuation = IsBertPunctuation(NextCodePoint(piece, &i));
        parts.push_back({{begin, i}, punctuation});
      }
      for (const Span& span :
           ApplySplitBehavior(parts, step.spec.behavior, false)) {
        out->emplace_back(piece.substr(span.first, span.second - span.first));
      }
      return;
    }
    case Type::kSplit:
    case Type::kWhitespace: {
      const bool whitespace = step.spec.type == Type::kWhitespace;
      const std::vector<Span> spans = ApplySplitBehavior(
          step.pattern->Partition(piece),
          whitespace ? Behavior::kRemoved : step.spec.behavior,
          whitespace ? true : step.spec.invert);
      for (const Span& span : spans) {
        out->emplace_back(piece.substr(span.first, span.second - span.first));
      }
      return;
    }
    case Type::kByteLevel: {
      std::string prefixed;
      if (step.spec.add_prefix_space && (piece.empty() || piece[0] != ' ')) {
        prefixed = absl::StrCat(" ", piece);
        piece = prefixed;
      }
      std::vector<Span> spans;
      if (step.pattern != nullptr) {
        spans = ApplySplitBehavior(step.pattern->Partition(piece),
                                   Behavior::kIsolated, false);
      } else if (!piece.empty()) {
        spans.push_back({0, piece.size()});
      }
      for (const Span& span : spans) {
        std::string mapped;
        AppendByteLevel(piece.substr(span.first, span.second - span.first),
                        &mapped);
        out->push_back(std::move(mapped));
      }
      return;
    }
    case Type::kSequence:
      break;
  }
  out->emplace_back(piece);
}

}  // namespace castserve::text
