#include "text/pipeline/decoder.h"

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "text/unicode/byte_level.h"
#include "text/unicode/unicode.h"

namespace castserve::text {
namespace {

using Type = DecoderSpec::Type;

// The library's WordPiece cleanup of tokenization spaces.
std::string Cleanup(const std::string& token) {
  return absl::StrReplaceAll(token, {{" .", "."},
                                     {" ?", "?"},
                                     {" !", "!"},
                                     {" ,", ","},
                                     {" ' ", "'"},
                                     {" n't", "n't"},
                                     {" 'm", "'m"},
                                     {" do not", " don't"},
                                     {" 's", "'s"},
                                     {" 've", "'ve"},
                                     {" 're", "'re"}});
}

std::vector<std::string> DecodeWordPiece(const DecoderSpec& spec,
                                         std::vector<std::string> tokens) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    std::string& token = tokens[i];
    if (i != 0) {
      if (absl::StartsWith(token, spec.prefix)) {
        token.erase(0, spec.prefix.size());
      } else {
        token.insert(0, " ");
      }
    }
    if (spec.cleanup) token = Cleanup(token);
  }
  return tokens;
}

std::vector<std::string> DecodeByteLevel(
    const std::vector<std::string>& tokens) {
  std::string bytes;
  for (const std::string& token : tokens) {
    std::string token_bytes;
    bool all_mapped = true;
    for (size_t i = 0; i < token.size() && all_mapped;) {
      const std::optional<unsigned char> byte =
          ByteOfCharacter(NextCodePoint(token, &i));
      if (byte.has_value()) token_bytes.push_back(static_cast<char>(*byte));
      all_mapped = byte.has_value();
    }
    bytes.append(all_mapped ? token_bytes : token);
  }
  return {Utf8Lossy(bytes)};
}

// "<0xAB>" -> 0xAB.
std::optional<unsigned char> FallbackByte(const std::string& token) {
  if (token.size() != 6 || !absl::StartsWith(token, "<0x") || token[5] != '>') {
    return std::nullopt;
  }
  int value = 0;
  for (size_t i = 3; i < 5; ++i) {
    const char c = token[i];
    const int digit = c >= '0' && c <= '9'   ? c - '0'
                      : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                             : -1;
    if (digit < 0) return std::nullopt;
    value = value * 16 + digit;
  }
  return static_cast<unsigned char>(value);
}

std::vector<std::string> DecodeByteFallback(std::vector<std::string> tokens) {
  std::vector<std::string> out;
  std::string pending;  // bytes of consecutive <0xXX> tokens
  size_t pending_tokens = 0;
  auto flush = [&] {
    if (pending_tokens == 0) return;
    if (IsValidUtf8(pending)) {
      out.push_back(pending);
    } else {
      for (size_t i = 0; i < pending_tokens; ++i) out.push_back("\xEF\xBF\xBD");
    }
    pending.clear();
    pending_tokens = 0;
  };
  for (std::string& token : tokens) {
    if (std::optional<unsigned char> byte = FallbackByte(token)) {
      pending.push_back(static_cast<char>(*byte));
      ++pending_tokens;
      continue;
    }
    flush();
    out.push_back(std::move(token));
  }
  flush();
  return out;
}

// Removes up to `count` copies of `content` at the start (or end).
void StripRepeated(std::string* token, absl::string_view content,
                   int64_t start_count, int64_t stop_count) {
  if (content.empty()) return;
  for (int64_t i = 0; i < start_count && absl::StartsWith(*token, content);
       ++i) {
    token->erase(0, content.size());
  }
  for (int64_t i = 0; i < stop_count && absl::EndsWith(*token, content); ++i) {
    token->erase(token->size() - content.size());
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Decoder>> Decoder::Create(
    const DecoderSpec* spec) {
  std::unique_ptr<Decoder> decoder(new Decoder());
  if (spec == nullptr) return decoder;
  decoder->has_spec_ = true;
  if (absl::Status status = decoder->AddSteps(*spec); !status.ok())
    return status;
  return decoder;
}

absl::Status Decoder::AddSteps(const DecoderSpec& spec) {
  if (spec.type == Type::kSequence) {
    for (const DecoderSpec& child : spec.decoders) {
      if (absl::Status status = AddSteps(child); !status.ok()) return status;
    }
    return absl::OkStatus();
  }
  Step step{spec, nullptr};
  step.spec.decoders.clear();
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

std::string Decoder::Decode(std::vector<std::string> tokens) const {
  if (!has_spec_) return Utf8Lossy(absl::StrJoin(tokens, " "));
  for (const Step& step : steps_) tokens = Apply(step, std::move(tokens));
  return Utf8Lossy(absl::StrJoin(tokens, ""));
}

std::vector<std::string> Decoder::Apply(const Step& step,
                                        std::vector<std::string> tokens) const {
  const DecoderSpec& spec = step.spec;
  switch (spec.type) {
    case Type::kWordPiece:
      return DecodeWordPiece(spec, std::move(tokens));
    case Type::kByteLevel:
      return DecodeByteLevel(tokens);
    case Type::kByteFallback:
      return DecodeByteFallback(std::move(tokens));
    case Type::kFuse:
      return {absl::StrJoin(tokens, "")};
    case Type::kReplace:
      for (std::string& token : tokens) {
        std::string replaced;
        size_t previous = 0;
        for (const SplitPattern::Span& match :
             step.pattern->FindMatches(token)) {
          absl::StrAppend(&replaced,
                          token.substr(previous, match.first - previous),
                          spec.content);
          previous = match.second;
        }
        token = absl::StrCat(replaced, token.substr(previous));
      }
      return tokens;
    case Type::kStrip:
      for (std::string& token : tokens) {
        StripRepeated(&token, spec.content, spec.strip_start, spec.strip_stop);
      }
      return tokens;
    case Type::kMetaspace:
      for (size_t i = 0; i < tokens.size(); ++i) {
        if (!spec.replacement.empty()) {
          tokens[i] = absl::StrReplaceAll(tokens[i], {{spec.replacement, " "}});
        }
        if (i == 0 && spec.add_prefix_space &&
            absl::StartsWith(tokens[i], " ")) {
          tokens[i].erase(0, 1);
        }
      }
      return tokens;
    case Type::kSequence:
      break;
  }
  return tokens;
}

}  // namespace castserve::text
