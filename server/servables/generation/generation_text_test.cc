#include "server/servables/generation/generation_text.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/test_util/byte_tokenizer.h"
#include "text/unicode/unicode.h"

namespace castserve {
namespace {

using test_util::ByteIds;
using test_util::ByteTokenizer;

// Every piece Append returns for `text`'s bytes, then Flush's.
std::vector<std::string> Pieces(GenerationText& stream,
                                const std::vector<int64_t>& ids) {
  std::vector<std::string> pieces;
  for (int64_t id : ids) {
    if (stream.stopped()) break;
    absl::StatusOr<std::string> piece = stream.Append(id);
    EXPECT_TRUE(piece.ok()) << piece.status();
    pieces.push_back(*piece);
  }
  absl::StatusOr<std::string> rest = stream.Flush();
  EXPECT_TRUE(rest.ok());
  pieces.push_back(*rest);
  return pieces;
}

std::string Joined(const std::vector<std::string>& pieces) {
  std::string all;
  for (const std::string& piece : pieces) all += piece;
  return all;
}

TEST(GenerationTextTest, PiecesJoinToTheText) {
  ByteTokenizer tokenizer;
  GenerationText stream(&tokenizer, {});
  const std::vector<std::string> pieces = Pieces(stream, ByteIds("abc"));
  EXPECT_EQ(pieces, (std::vector<std::string>{"a", "b", "c", ""}));
}

TEST(GenerationTextTest, NeverEmitsHalfACharacter) {
  ByteTokenizer tokenizer;
  GenerationText stream(&tokenizer, {});
  // "é" is two bytes, "€" three: no piece may end inside either.
  const std::vector<std::string> pieces = Pieces(stream, ByteIds("xé€y"));
  EXPECT_EQ(pieces, (std::vector<std::string>{"x", "", "\xC3\xA9", "", "",
                                              "\xE2\x82\xAC", "y", ""}));
  for (const std::string& piece : pieces) EXPECT_TRUE(text::IsValidUtf8(piece));
}

TEST(GenerationTextTest, SpecialTokensHaveNoText) {
  ByteTokenizer tokenizer;
  GenerationText stream(&tokenizer, {});
  std::vector<int64_t> ids = ByteIds("ok");
  ids.push_back(ByteTokenizer::kEos);
  EXPECT_EQ(Joined(Pieces(stream, ids)), "ok");
}

TEST(GenerationTextTest, StopStringAcrossTokensIsCutAndNotEmitted) {
  ByteTokenizer tokenizer;
  GenerationText stream(&tokenizer, {"STOP"});
  const std::vector<std::string> pieces =
      Pieces(stream, ByteIds("Hi STOP there"));
  EXPECT_TRUE(stream.stopped());
  EXPECT_EQ(Joined(pieces), "Hi ");
  // "S", "T", "O" were held back (they could begin the stop string).
  EXPECT_EQ(pieces,
            (std::vector<std::string>{"H", "i", " ", "", "", "", "", ""}));
}

TEST(GenerationTextTest, HeldBackTextThatDoesNotStopIsReleased) {
  ByteTokenizer tokenizer;
  GenerationText stream(&tokenizer, {"STOP", "xyz"});
  const std::vector<std::string> pieces = Pieces(stream, ByteIds("STOxy!"));
  EXPECT_FALSE(stream.stopped());
  EXPECT_EQ(Joined(pieces), "STOxy!");
  EXPECT_EQ(pieces[2], "");     // "STO" held.
  EXPECT_EQ(pieces[3], "STO");  // "x" breaks "STOP", starts "xyz".
}

TEST(GenerationTextTest, FlushReleasesAStopPrefixAtTheEnd) {
  ByteTokenizer tokenizer;
  GenerationText stream(&tokenizer, {"STOP"});
  EXPECT_EQ(Joined(Pieces(stream, ByteIds("go ST"))), "go ST");
}

TEST(GenerationTextTest, FirstStopStringToCompleteEnds) {
  ByteTokenizer tokenizer;
  // "cd" completes first; "bcde" never does: the text ends before "cd".
  GenerationText stream(&tokenizer, {"cd", "bcde"});
  EXPECT_EQ(Joined(Pieces(stream, ByteIds("abcdef"))), "ab");
}

TEST(GenerationTextTest, UnknownIdIsAnError) {
  ByteTokenizer tokenizer;
  GenerationText stream(&tokenizer, {});
  EXPECT_EQ(stream.Append(999).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(IsValidUtf8Test, AcceptsUtf8AndRefusesBrokenSequences) {
  EXPECT_TRUE(
      text::IsValidUtf8("plain \xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"));
  EXPECT_FALSE(text::IsValidUtf8("\xC3"));
  EXPECT_FALSE(text::IsValidUtf8("\xC0\xAF"));      // Overlong.
  EXPECT_FALSE(text::IsValidUtf8("\xED\xA0\x80"));  // Surrogate.
  EXPECT_FALSE(text::IsValidUtf8("\xFF"));
}

}  // namespace
}  // namespace castserve
