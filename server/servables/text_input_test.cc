#include "server/servables/text_input.h"

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/test_util/fake_tokenizer.h"

namespace castserve {
namespace {

using ::testing::HasSubstr;

std::vector<models::TensorSpec> BertInputs() {
  return {{"input_ids", at::kLong, {-1, -1}},
          {"attention_mask", at::kLong, {-1, -1}, true},
          {"token_type_ids", at::kLong, {-1, -1}, true}};
}

std::unique_ptr<TextInput> Make(
    std::optional<int64_t> pad_id = 0, int64_t max_length = 0,
    std::vector<models::TensorSpec> inputs = BertInputs()) {
  absl::StatusOr<std::unique_ptr<TextInput>> text = TextInput::Create(
      std::make_shared<test_util::FakeTokenizer>(pad_id), inputs, max_length);
  EXPECT_TRUE(text.ok()) << text.status();
  return text.ok() ? *std::move(text) : nullptr;
}

std::vector<int64_t> Values(const at::Tensor& tensor) {
  const at::Tensor flat = tensor.contiguous().view(-1);
  return std::vector<int64_t>(flat.data_ptr<int64_t>(),
                              flat.data_ptr<int64_t>() + flat.numel());
}

TEST(TextInputTest, PadsTheBatchToItsLongestWithThePadId) {
  std::unique_ptr<TextInput> text = Make(/*pad_id=*/7);
  absl::StatusOr<models::NamedTensors> tensors =
      text->Encode({"a bb ccc", "dddd"});
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  ASSERT_EQ(tensors->size(), 3u);
  EXPECT_EQ(tensors->at("input_ids").sizes(), (std::vector<int64_t>{2, 5}));
  EXPECT_EQ(Values(tensors->at("input_ids")),
            (std::vector<int64_t>{1, 11, 12, 13, 2,  //
                                  1, 14, 2, 7, 7}));
  EXPECT_EQ(Values(tensors->at("attention_mask")),
            (std::vector<int64_t>{1, 1, 1, 1, 1,  //
                                  1, 1, 1, 0, 0}));
  EXPECT_EQ(Values(tensors->at("token_type_ids")),
            (std::vector<int64_t>(10, 0)));
}

TEST(TextInputTest, NoPadIdPadsWithZero) {
  absl::StatusOr<models::NamedTensors> tensors =
      Make(std::nullopt)->Encode({"a", "a b"});
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  EXPECT_EQ(Values(tensors->at("input_ids")),
            (std::vector<int64_t>{1, 11, 2, 0, 1, 11, 11, 2}));
}

TEST(TextInputTest, TruncatesAtMaxLength) {
  std::unique_ptr<TextInput> text = Make(0, /*max_length=*/4);
  EXPECT_EQ(text->max_length(), 4);
  absl::StatusOr<models::NamedTensors> tensors =
      text->Encode({"a bb ccc dddd eeeee"});
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  EXPECT_EQ(Values(tensors->at("input_ids")),
            (std::vector<int64_t>{1, 11, 12, 2}));
}

TEST(TextInputTest, FillsOnlyTheTokenInputsTheModelTakes) {
  std::unique_ptr<TextInput> text =
      Make(0, 0,
           {{"input_ids", at::kLong, {-1, -1}},
            {"attention_mask", at::kLong, {-1, -1}, true}});
  absl::StatusOr<models::NamedTensors> tensors = text->Encode({"a"});
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  EXPECT_EQ(tensors->count("token_type_ids"), 0u);
  EXPECT_EQ(tensors->count("attention_mask"), 1u);
}

TEST(TextInputTest, WithoutAttentionMaskLengthsMustAgree) {
  std::unique_ptr<TextInput> text =
      Make(0, 0, {{"input_ids", at::kLong, {-1, -1}}});
  EXPECT_TRUE(text->Encode({"a b", "c d"}).ok());
  absl::StatusOr<models::NamedTensors> tensors = text->Encode({"a b", "c"});
  ASSERT_FALSE(tensors.ok());
  EXPECT_THAT(std::string(tensors.status().message()),
              HasSubstr("element 1 has 3 tokens, element 0 4; the model "
                        "takes no attention_mask"));
}

TEST(TextInputTest, InvalidUtf8NamesTheElement) {
  absl::StatusOr<models::NamedTensors> tensors =
      Make()->Encode({"caf\xC3\xA9", "bad \xFF byte"});
  ASSERT_FALSE(tensors.ok());
  EXPECT_EQ(tensors.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(tensors.status().message()),
              HasSubstr("input 'text': element 1: not valid UTF-8"));
}

TEST(TextInputTest, ModelWithoutInputIdsTakesNoText) {
  absl::StatusOr<std::unique_ptr<TextInput>> text =
      TextInput::Create(std::make_shared<test_util::FakeTokenizer>(),
                        {{"pixel_values", at::kFloat, {-1, 3, -1, -1}}}, 0);
  ASSERT_FALSE(text.ok());
  EXPECT_THAT(std::string(text.status().message()),
              HasSubstr("takes no INT64 input_ids"));
}

TEST(TextInputTest, UnavailableRefusesWithItsReason) {
  std::unique_ptr<TextInput> text =
      TextInput::Unavailable("the folder has no tokenizer");
  EXPECT_FALSE(text->available());
  absl::StatusOr<models::NamedTensors> tensors = text->Encode({"a"});
  ASSERT_FALSE(tensors.ok());
  EXPECT_EQ(tensors.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(tensors.status().message(), "the folder has no tokenizer");
}

TEST(TextInputTest, WireSpecIsOptionalBytesBatchByOne) {
  const TensorSpec spec = TextInput::WireSpec();
  EXPECT_EQ(spec.name, "text");
  EXPECT_EQ(spec.datatype, "BYTES");
  EXPECT_EQ(spec.shape, (std::vector<int64_t>{-1, 1}));
  EXPECT_TRUE(spec.optional);
}

}  // namespace
}  // namespace castserve
