#include "models/model.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <functional>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

namespace castserve::models {
namespace {

// A model whose forward runs `body` and returns its input as "y".
class FakeModel : public Model {
 public:
  explicit FakeModel(std::function<void()> body) : body_(std::move(body)) {}
  std::string architecture() const override { return "fake"; }
  const std::vector<TensorSpec>& inputs() const override { return inputs_; }
  const std::vector<TensorSpec>& outputs() const override { return outputs_; }
  Module& root() override { return root_; }

 protected:
  NamedTensors ForwardImpl(ForwardContext& context,
                           const NamedTensors& inputs) const override {
    body_();
    EXPECT_TRUE(c10::InferenceMode::is_enabled());
    return {{"y", inputs.at("x")}};
  }

 private:
  std::function<void()> body_;
  Module root_{"", "Fake"};
  std::vector<TensorSpec> inputs_ = {{"x", at::kFloat, {-1, 4}},
                                     {"mask", at::kLong, {-1}, true}};
  std::vector<TensorSpec> outputs_ = {{"y", at::kFloat, {-1, 4}}};
};

absl::StatusCode CodeOf(std::function<void()> body) {
  FakeModel model(std::move(body));
  return model.Forward({{"x", at::ones({2, 4})}}).status().code();
}

TEST(ModelTest, MapsTorchErrorsToStatusCodes) {
  EXPECT_EQ(CodeOf([] {}), absl::StatusCode::kOk);
  EXPECT_EQ(CodeOf([] { TORCH_CHECK_INDEX(false, "bad index"); }),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CodeOf([] { TORCH_CHECK_VALUE(false, "bad value"); }),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CodeOf([] { TORCH_CHECK_TYPE(false, "bad type"); }),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CodeOf([] { TORCH_CHECK_NOT_IMPLEMENTED(false, "later"); }),
            absl::StatusCode::kUnimplemented);
  EXPECT_EQ(CodeOf([] {
              TORCH_CHECK(false, "DefaultCPUAllocator: not enough memory");
            }),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(CodeOf([] { throw std::bad_alloc(); }),
            absl::StatusCode::kResourceExhausted);
  // A real failed allocation (4 PiB): LibTorch 2.11 says "can't allocate
  // memory".
  EXPECT_EQ(CodeOf([] { at::empty({int64_t{1} << 52}, at::kByte); }),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(CodeOf([] {
              throw WeightUnavailableError("w", absl::DataLossError("gone"));
            }),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(CodeOf([] { TORCH_CHECK(false, "we are wrong"); }),
            absl::StatusCode::kInternal);
  // A real LibTorch error: mismatched matmul shapes.
  EXPECT_NE(CodeOf([] {
              at::matmul(at::ones({2, 3}), at::ones({2, 3}));
            }),
            absl::StatusCode::kOk);
}

// Two modules, "first" and "second", run one after the other; `on_first`
// runs inside the first one.
class TwoStepModel : public FakeModel {
 public:
  explicit TwoStepModel(std::function<void()> on_first)
      : FakeModel([] {}), on_first_(std::move(on_first)) {}
  std::vector<std::string> ran;

 protected:
  NamedTensors ForwardImpl(ForwardContext& context,
                           const NamedTensors& inputs) const override {
    {
      ModuleCall call(first_, context);
      ran_->push_back("first");
      on_first_();
    }
    ModuleCall call(second_, context);
    ran_->push_back("second");
    return {{"y", inputs.at("x")}};
  }

 private:
  std::function<void()> on_first_;
  Module first_{"first", "Step"};
  Module second_{"second", "Step"};
  std::vector<std::string>* ran_ = &ran;
};

TEST(ModelTest, ACancelledForwardStopsAtTheNextModule) {
  Cancellation cancellation;
  TwoStepModel model([&] { cancellation.Cancel("the model was unloaded"); });
  absl::StatusOr<NamedTensors> outputs =
      model.Forward({{"x", at::ones({2, 4})}}, &cancellation);
  EXPECT_EQ(outputs.status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(outputs.status().message(),
            "forward cancelled before module 'second': the model was unloaded");
  EXPECT_EQ(model.ran, std::vector<std::string>({"first"}));
  // A cancelled parent cancels its children; nothing runs at all.
  auto parent = std::make_shared<Cancellation>();
  Cancellation child(parent);
  parent->Cancel("shutting down");
  EXPECT_TRUE(child.cancelled());
  EXPECT_EQ(child.reason(), "shutting down");
  TwoStepModel untouched([] {});
  EXPECT_EQ(
      untouched.Forward({{"x", at::ones({2, 4})}}, &child).status().code(),
      absl::StatusCode::kCancelled);
  EXPECT_TRUE(untouched.ran.empty());
  // Without a cancellation, or before it is set, both run.
  TwoStepModel plain([] {});
  EXPECT_TRUE(plain.Forward({{"x", at::ones({2, 4})}}).ok());
  EXPECT_EQ(plain.ran, std::vector<std::string>({"first", "second"}));
}

TEST(CatchExceptionsTest, WhatIsThrownBecomesAStatusOfTheCallersType) {
  absl::StatusOr<int> value = CatchExceptions(
      []() -> absl::StatusOr<int> { return at::ones({2})[5].item<int>(); });
  EXPECT_EQ(value.status().code(), absl::StatusCode::kInvalidArgument)
      << value.status();
  EXPECT_EQ(
      CatchExceptions([]() -> absl::Status { throw std::bad_alloc(); }).code(),
      absl::StatusCode::kResourceExhausted);
  absl::Status other = CatchExceptions(
      []() -> absl::Status { throw std::runtime_error("disk on fire"); });
  EXPECT_EQ(other.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(other.message(), "disk on fire");
  EXPECT_EQ(*CatchExceptions([]() -> absl::StatusOr<int> { return 7; }), 7);
}

TEST(ModelTest, ErrorMessageKeepsTheCause) {
  FakeModel model([] { TORCH_CHECK_INDEX(false, "id 7 is outside"); });
  absl::Status status = model.Forward({{"x", at::ones({1, 4})}}).status();
  EXPECT_NE(status.message().find("id 7 is outside"), std::string::npos);
}

TEST(ModelTest, ChecksInputsAgainstTheSignature) {
  FakeModel model([] {});
  auto code = [&](NamedTensors inputs) {
    return model.Forward(inputs).status().code();
  };
  EXPECT_EQ(code({{"x", at::ones({3, 4})}}), absl::StatusCode::kOk);
  EXPECT_EQ(code({{"x", at::ones({3, 4})}, {"mask", at::ones({3}, at::kLong)}}),
            absl::StatusCode::kOk);
  EXPECT_EQ(code({}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code({{"x", at::ones({3, 5})}}),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code({{"x", at::ones({3, 4}, at::kDouble)}}),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code({{"x", at::ones({4})}}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code({{"x", at::ones({3, 4})}, {"extra", at::ones({1})}}),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code({{"x", at::Tensor()}}), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace castserve::models
