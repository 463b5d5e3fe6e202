#include "text/pipeline/added_vocabulary.h"

#include <unicode/uchar.h>

#include <algorithm>
#include <cctype>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "text/unicode/unicode.h"

namespace castserve::text {
namespace {

// The regex crate's Unicode \w, which the library tests single_word with.
bool IsWordCharacter(char32_t c) {
  if (c < 0x80) return std::isalnum(static_cast<int>(c)) || c == '_';
  const auto code = static_cast<UChar32>(c);
  const int32_t mask = U_GET_GC_MASK(code);
  return u_hasBinaryProperty(code, UCHAR_ALPHABETIC) ||
         u_hasBinaryProperty(code, UCHAR_JOIN_CONTROL) ||
         (mask & (U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK)) != 0;
}

char32_t LastCodePoint(absl::string_view text) {
  size_t last = text.size() - 1;
  while (last > 0 && (static_cast<unsigned char>(text[last]) & 0xC0) == 0x80)
    --last;
  return NextCodePoint(text, &last);
}

// The start of the whitespace run that ends `text` (text.size() if none).
size_t WhitespaceRunBeforeEnd(absl::string_view text) {
  size_t begin = text.size();
  while (begin > 0) {
    size_t last = begin - 1;
    while (last > 0 && (static_cast<unsigned char>(text[last]) & 0xC0) == 0x80)
      --last;
    size_t probe = last;
    if (!IsWhitespace(NextCodePoint(text, &probe))) break;
    begin = last;
  }
  return begin;
}

// Bytes of the whitespace run that starts `text`.
size_t WhitespaceRunAtStart(absl::string_view text) {
  size_t end = 0;
  while (end < text.size()) {
    size_t next = end;
    if (!IsWhitespace(NextCodePoint(text, &next))) break;
    end = next;
  }
  return end;
}

}  // namespace

absl::StatusOr<std::unique_ptr<AddedVocabulary>> AddedVocabulary::Create(
    const std::vector<AddedTokenSpec>& tokens, const Normalizer* normalizer) {
  std::unique_ptr<AddedVocabulary> vocabulary(new AddedVocabulary());
  vocabulary->tokens_ = tokens;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const AddedTokenSpec& token = tokens[i];
    vocabulary->by_content_.insert_or_assign(token.content, i);
    vocabulary->by_id_.insert_or_assign(token.id, i);
    vocabulary->id_end_ = std::max(vocabulary->id_end_, token.id + 1);
    if (!token.normalized || normalizer == nullptr) {
      AddPattern(
          token.content, i,
          token.normalized ? &vocabulary->normalized_ : &vocabulary->raw_);
      continue;
    }
    absl::StatusOr<std::string> content = normalizer->Normalize(token.content);
    if (!content.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "added_tokens[", i, "].content: ", content.status().message()));
    }
    AddPattern(*std::move(content), i, &vocabulary->normalized_);
  }
  return vocabulary;
}

void AddedVocabulary::AddPattern(std::string content, size_t token,
                                 Matcher* matcher) {
  if (content.empty()) return;
  matcher->first_bytes.set(static_cast<unsigned char>(content[0]));
  if (std::find(matcher->lengths.begin(), matcher->lengths.end(),
                content.size()) == matcher->lengths.end()) {
    matcher->lengths.push_back(content.size());
    std::sort(matcher->lengths.rbegin(), matcher->lengths.rend());
  }
  matcher->token_by_content.insert_or_assign(std::move(content), token);
}

std::optional<AddedVocabulary::Match> AddedVocabulary::NextMatch(
    const Matcher& matcher, absl::string_view text, size_t from) const {
  for (size_t begin = from; begin < text.size(); ++begin) {
    if (!matcher.first_bytes.test(static_cast<unsigned char>(text[begin])))
      continue;
    for (size_t length : matcher.lengths) {
      if (length > text.size() - begin) continue;
      auto it = matcher.token_by_content.find(
          absl::string_view(text.data() + begin, length));
      if (it != matcher.token_by_content.end()) {
        return Match{it->second, begin, begin + length};
      }
    }
  }
  return std::nullopt;
}

std::vector<AddedVocabulary::Segment> AddedVocabulary::Split(
    absl::string_view text, bool normalized) const {
  const Matcher& matcher = normalized ? normalized_ : raw_;
  std::vector<Segment> segments;
  size_t covered = 0;  // end of the last kept match
  for (size_t from = 0; from < text.size();) {
    const std::optional<Match> match = NextMatch(matcher, text, from);
    if (!match.has_value()) break;
    from = match->end;
    const AddedTokenSpec& token = tokens_[match->token];
    size_t begin = match->begin;
    size_t end = match->end;
    if (token.single_word &&
        ((begin > 0 && IsWordCharacter(LastCodePoint(text.substr(0, begin)))) ||
         (end < text.size() && IsWordCharacter([&] {
            size_t at = end;
            return NextCodePoint(text, &at);
          }())))) {
      continue;
    }
    if (token.lstrip) {  // never back past the previous token
      begin = covered +
              WhitespaceRunBeforeEnd(text.substr(covered, begin - covered));
    }
    if (token.rstrip) end += WhitespaceRunAtStart(text.substr(end));
    if (begin > covered) segments.push_back(Segment{-1, covered, begin});
    segments.push_back(Segment{token.id, begin, end});
    covered = end;
    from = end;
  }
  if (covered < text.size())
    segments.push_back(Segment{-1, covered, text.size()});
  return segments;
}

std::optional<int64_t> AddedVocabulary::Find(absl::string_view content) const {
  auto it = by_content_.find(absl::string_view(content.data(), content.size()));
  if (it == by_content_.end()) return std::nullopt;
  return tokens_[it->second].id;
}

const AddedTokenSpec* AddedVocabulary::Token(int64_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

}  // namespace castserve::text
