// A process that links libprotobuf (as the daemon does) loads and runs a
// SentencePiece tokenizer: libsentencepiece's bundled protobuf 3.14 must not
// meet libprotobuf 3.21 (linked together, one aborts at start).
#include <google/protobuf/stubs/common.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "text/tokenizer.h"

namespace castserve::text {
namespace {

using ::testing::ElementsAre;

TEST(SentencePieceBesideProtobufTest, LoadsAndEncodes) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // Sanitizer runtimes refuse RTLD_DEEPBIND, so sanitized builds load the
  // library unisolated (sentencepiece_model.cc).
  GTEST_SKIP() << "needs RTLD_DEEPBIND, which sanitizers refuse";
#endif
  GOOGLE_PROTOBUF_VERIFY_VERSION;  // libprotobuf is really here
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      LoadTokenizer("text/testdata/sentencepiece");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EncodeOptions options;
  options.add_special_tokens = false;
  EXPECT_THAT((*tokenizer)->Encode("Hello world", options)->ids,
              ElementsAre(481, 599, 524, 495, 445));
  EXPECT_EQ((*tokenizer)->Decode({481, 599, 524, 495, 445}, true).value(),
            "Hello world");
}

}  // namespace
}  // namespace castserve::text
