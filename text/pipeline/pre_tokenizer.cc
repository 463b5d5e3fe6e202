#include "text/pipeline/pre_tokenizer.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "text/unicode/byte_level.h"
#include "text/unicode/unicode.h"

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

// Appends `part`, bytes [begin, ...) of `parent`, to *out.
void Emit(const PreTokenizer::Piece& parent, size_t begin,
          absl::string_view part, std::vector<PreTokenizer::Piece>* out) {
  out->push_back({std::string(part), parent.starts_text && begin == 0});
}

void EmitSpans(const PreTokenizer::Piece& parent, absl::string_view text,
               const std::vector<Span>& spans,
               std::vector<PreTokenizer::Piece>* out) {
  for (const Span& span : spans) {
    Emit(parent, span.first, text.substr(span.first, span.second - span.first),
         out);
  }
}

// Cuts a piece at characters for which `classify` says kRemove (dropped) or
// kIsolate (a word of their own); the rest accumulate into words.
enum class CharRole { kKeep, kRemove, kIsolate };
template <typename Classify>
void SplitOnCharacters(const PreTokenizer::Piece& piece, Classify classify,
                       std::vector<PreTokenizer::Piece>* out) {
  const absl::string_view text = piece.text;
  size_t word_begin = 0;
  for (size_t i = 0; i < text.size();) {
    const size_t begin = i;
    const CharRole role = classify(NextCodePoint(text, &i));
    if (role == CharRole::kKeep) continue;
    if (begin > word_begin) {
      Emit(piece, word_begin, text.substr(word_begin, begin - word_begin), out);
    }
    if (role == CharRole::kIsolate) {
      Emit(piece, begin, text.substr(begin, i - begin), out);
    }
    word_begin = i;
  }
  if (text.size() > word_begin) {
    Emit(piece, word_begin, text.substr(word_begin), out);
  }
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
  } else if (spec.type == Type::kMetaspace && spec.split) {
    pattern = {false, spec.replacement};
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
                               std::vector<std::string>* words,
                               bool starts_text) const {
  std::vector<Piece> pieces{{std::string(text), starts_text}};
  std::vector<Piece> next;
  for (const Step& step : steps_) {
    next.clear();
    for (const Piece& piece : pieces) Apply(step, piece, &next);
    pieces.swap(next);
  }
  for (Piece& piece : pieces) {
    if (!piece.text.empty()) words->push_back(std::move(piece.text));
  }
}

void PreTokenizer::Apply(const Step& step, const Piece& piece,
                         std::vector<Piece>* out) const {
  const absl::string_view text = piece.text;
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
      for (size_t i = 0; i < text.size();) {
        const size_t begin = i;
        const bool punctuation = IsBertPunctuation(NextCodePoint(text, &i));
        parts.push_back({{begin, i}, punctuation});
      }
      return EmitSpans(piece, text,
                       ApplySplitBehavior(parts, step.spec.behavior, false),
                       out);
    }
    case Type::kSplit:
    case Type::kWhitespace: {
      const bool whitespace = step.spec.type == Type::kWhitespace;
      return EmitSpans(piece, text,
                       ApplySplitBehavior(
                           step.pattern->Partition(text),
                           whitespace ? Behavior::kRemoved : step.spec.behavior,
                           whitespace ? true : step.spec.invert),
                       out);
    }
    case Type::kByteLevel:
      return ApplyByteLevel(step, piece, out);
    case Type::kMetaspace:
      return ApplyMetaspace(step, piece, out);
    case Type::kSequence:
      break;
  }
  out->push_back(piece);
}

void PreTokenizer::ApplyByteLevel(const Step& step, const Piece& piece,
                                  std::vector<Piece>* out) const {
  absl::string_view text = piece.text;
  std::string prefixed;
  if (step.spec.add_prefix_space && (text.empty() || text[0] != ' ')) {
    prefixed = absl::StrCat(" ", text);
    text = prefixed;
  }
  std::vector<Span> spans;
  if (step.pattern != nullptr) {
    spans = ApplySplitBehavior(step.pattern->Partition(text),
                               Behavior::kIsolated, false);
  } else if (!text.empty()) {
    spans.push_back({0, text.size()});
  }
  for (const Span& span : spans) {
    std::string mapped;
    AppendByteLevel(text.substr(span.first, span.second - span.first), &mapped);
    out->push_back({std::move(mapped), piece.starts_text && span.first == 0});
  }
}

void PreTokenizer::ApplyMetaspace(const Step& step, const Piece& piece,
                                  std::vector<Piece>* out) const {
  const PreTokenizerSpec& spec = step.spec;
  std::string text = absl::StrReplaceAll(piece.text, {{" ", spec.replacement}});
  const bool prepend =
      spec.prepend_scheme == PreTokenizerSpec::PrependScheme::kAlways ||
      (spec.prepend_scheme == PreTokenizerSpec::PrependScheme::kFirst &&
       piece.starts_text);
  if (prepend && !absl::StartsWith(text, spec.replacement)) {
    text = absl::StrCat(spec.replacement, text);
  }
  if (!spec.split) {
    out->push_back({std::move(text), piece.starts_text});
    return;
  }
  EmitSpans(piece, text,
            ApplySplitBehavior(step.pattern->Partition(text),
                               Behavior::kMergedWithNext, false),
            out);
}

}  // namespace castserve::text
