#include "text/pipeline/normalizer.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "text/unicode/unicode.h"

namespace castserve::text {
namespace {

using Type = NormalizerSpec::Type;

// clean_text and handle_chinese_chars, one pass.
std::string CleanAndSpaceChinese(absl::string_view text, bool clean_text,
                                 bool handle_chinese_chars) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const unsigned char byte = static_cast<unsigned char>(text[i]);
    if (byte >= 0x20 && byte < 0x7F) {  // printable ASCII: unchanged
      out.push_back(static_cast<char>(byte));
      ++i;
      continue;
    }
    char32_t c = NextCodePoint(text, &i);
    if (clean_text) {
      if (c == 0 || c == 0xFFFD || IsBertControl(c)) continue;
      if (IsWhitespace(c)) c = ' ';
    }
    if (handle_chinese_chars && IsChineseChar(c)) {
      out.push_back(' ');
      AppendUtf8(c, &out);
      out.push_back(' ');
    } else {
      AppendUtf8(c, &out);
    }
  }
  return out;
}

std::string RemoveNonspacingMarks(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    if (static_cast<unsigned char>(text[i]) < 0x80) {
      out.push_back(text[i++]);
      continue;
    }
    const char32_t c = NextCodePoint(text, &i);
    if (!IsNonspacingMark(c)) AppendUtf8(c, &out);
  }
  return out;
}

std::string Lowercase(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    AppendLowercase(NextCodePoint(text, &i), &out);
  }
  return out;
}

std::string StripWhitespace(absl::string_view text, bool left, bool right) {
  size_t begin = 0;
  size_t end = text.size();
  if (left) {
    while (begin < end) {
      size_t next = begin;
      if (!IsWhitespace(NextCodePoint(text, &next))) break;
      begin = next;
    }
  }
  if (right) {
    while (end > begin) {
      size_t last = end - 1;
      while ((static_cast<unsigned char>(text[last]) & 0xC0) == 0x80) --last;
      size_t probe = last;
      if (!IsWhitespace(NextCodePoint(text, &probe))) break;
      end = last;
    }
  }
  return std::string(text.substr(begin, end - begin));
}

std::string ReplaceMatches(absl::string_view text, const SplitPattern& pattern,
                           absl::string_view content) {
  std::string out;
  size_t previous = 0;
  for (const SplitPattern::Span& match : pattern.FindMatches(text)) {
    absl::StrAppend(&out, text.substr(previous, match.first - previous));
    absl::StrAppend(&out, content);
    previous = match.second;
  }
  absl::StrAppend(&out, text.substr(previous));
  return out;
}

}  // namespace

absl::StatusOr<std::string> BertNormalize(absl::string_view text,
                                          const NormalizerSpec& spec) {
  std::string out =
      CleanAndSpaceChinese(text, spec.clean_text, spec.handle_chinese_chars);
  if (spec.strip_accents.value_or(spec.lowercase)) {
    absl::StatusOr<std::string> decomposed =
        NormalizeUnicode(out, NormalizationForm::kNfd);
    if (!decomposed.ok()) return decomposed.status();
    out = RemoveNonspacingMarks(*decomposed);
  }
  if (spec.lowercase) out = Lowercase(out);
  return out;
}

absl::StatusOr<std::unique_ptr<Normalizer>> Normalizer::Create(
    const NormalizerSpec& spec) {
  std::unique_ptr<Normalizer> normalizer(new Normalizer());
  if (absl::Status status = normalizer->AddSteps(spec); !status.ok()) {
    return status;
  }
  return normalizer;
}

absl::Status Normalizer::AddSteps(const NormalizerSpec& spec) {
  if (spec.type == Type::kSequence) {
    for (const NormalizerSpec& child : spec.normalizers) {
      if (absl::Status status = AddSteps(child); !status.ok()) return status;
    }
    return absl::OkStatus();
  }
  Step step{spec, nullptr, nullptr};
  if (spec.type == Type::kPrecompiled) {
    absl::StatusOr<std::unique_ptr<PrecompiledCharsmap>> charsmap =
        PrecompiledCharsmap::Create(
            spec.precompiled_charsmap,
            absl::StrCat(spec.path, ".precompiled_charsmap"));
    if (!charsmap.ok()) return charsmap.status();
    step.charsmap = *std::move(charsmap);
    step.spec.precompiled_charsmap.clear();
  }
  if (spec.type == Type::kReplace) {
    absl::StatusOr<std::unique_ptr<SplitPattern>> pattern =
        SplitPattern::Create(spec.pattern);
    if (!pattern.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(spec.path, ".pattern: ", pattern.status().message()));
    }
    step.pattern = *std::move(pattern);
  }
  steps_.push_back(std::move(step));
  return absl::OkStatus();
}

absl::StatusOr<std::string> Normalizer::Normalize(
    absl::string_view text) const {
  std::string current(text);
  for (const Step& step : steps_) {
    absl::StatusOr<std::string> next = Apply(step, std::move(current));
    if (!next.ok()) return next.status();
    current = *std::move(next);
  }
  return current;
}

absl::StatusOr<std::string> Normalizer::Apply(const Step& step,
                                              std::string text) const {
  switch (step.spec.type) {
    case Type::kBert:
      return BertNormalize(text, step.spec);
    case Type::kNfc:
      return NormalizeUnicode(text, NormalizationForm::kNfc);
    case Type::kNfd:
      return NormalizeUnicode(text, NormalizationForm::kNfd);
    case Type::kNfkc:
      return NormalizeUnicode(text, NormalizationForm::kNfkc);
    case Type::kNfkd:
      return NormalizeUnicode(text, NormalizationForm::kNfkd);
    case Type::kLowercase:
      return Lowercase(text);
    case Type::kStrip:
      return StripWhitespace(text, step.spec.strip_left, step.spec.strip_right);
    case Type::kStripAccents:
      return RemoveNonspacingMarks(text);
    case Type::kReplace:
      return ReplaceMatches(text, *step.pattern, step.spec.content);
    case Type::kPrepend:
      return text.empty() ? text : absl::StrCat(step.spec.content, text);
    case Type::kPrecompiled:
      return step.charsmap->Normalize(text);
    case Type::kSequence:
      break;  // flattened by AddSteps
  }
  return text;
}

}  // namespace castserve::text
