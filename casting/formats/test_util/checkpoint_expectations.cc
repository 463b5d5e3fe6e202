#include "casting/formats/test_util/checkpoint_expectations.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace castserve::casting::test_util {
namespace {

constexpr char kExpectedPath[] = "casting/formats/testdata/ckpt_expected.txt";

float HalfToFloat(uint16_t h) {
  const int sign = h >> 15;
  const int exponent = (h >> 10) & 0x1F;
  const int mantissa = h & 0x3FF;
  float magnitude;
  if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), -24);
  } else if (exponent == 31) {
    magnitude = mantissa ? NAN : INFINITY;
  } else {
    magnitude = std::ldexp(static_cast<float>(mantissa + 1024), exponent - 25);
  }
  return sign ? -magnitude : magnitude;
}

float BFloat16ToFloat(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

template <typename T>
T Load(const uint8_t* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

// The element at `p` compared with the expected decimal text.
void ExpectElement(DType dtype, const uint8_t* p, const std::string& text,
                   const std::string& where) {
  switch (dtype) {
    case DType::kF32:
      EXPECT_EQ(Load<float>(p), static_cast<float>(std::stod(text))) << where;
      return;
    case DType::kF64:
      EXPECT_EQ(Load<double>(p), std::stod(text)) << where;
      return;
    case DType::kF16:
      EXPECT_EQ(HalfToFloat(Load<uint16_t>(p)), std::stof(text)) << where;
      return;
    case DType::kBF16:
      EXPECT_EQ(BFloat16ToFloat(Load<uint16_t>(p)), std::stof(text)) << where;
      return;
    case DType::kI8:
      EXPECT_EQ(Load<int8_t>(p), std::stoll(text)) << where;
      return;
    case DType::kI16:
      EXPECT_EQ(Load<int16_t>(p), std::stoll(text)) << where;
      return;
    case DType::kI32:
      EXPECT_EQ(Load<int32_t>(p), std::stoll(text)) << where;
      return;
    case DType::kI64:
      EXPECT_EQ(Load<int64_t>(p), std::stoll(text)) << where;
      return;
    default: {
      uint64_t code = 0;
      std::memcpy(&code, p, DTypeBits(dtype) / 8);
      EXPECT_EQ(code, std::stoull(text)) << where;
    }
  }
}

void ExpectTensor(const Checkpoint& checkpoint,
                  const std::vector<std::string>& fields) {
  const std::string& name = fields[1];
  const TensorEntry* entry = checkpoint.Find(name);
  ASSERT_NE(entry, nullptr) << "missing tensor " << name;
  EXPECT_EQ(DTypeName(entry->dtype), fields[2]) << name;
  EXPECT_EQ(absl::StrJoin(entry->shape, "x"), fields[3]) << name;
  const size_t element_bytes = DTypeBits(entry->dtype) / 8;
  const size_t count = fields.size() - 4;
  ASSERT_EQ(entry->size_bytes, count * element_bytes) << name;
  std::vector<uint8_t> bytes(entry->size_bytes);
  ASSERT_TRUE(checkpoint.CopyTo(*entry, absl::MakeSpan(bytes)).ok()) << name;
  for (size_t i = 0; i < count; ++i) {
    ExpectElement(entry->dtype, bytes.data() + i * element_bytes, fields[4 + i],
                  name + "[" + std::to_string(i) + "]");
  }
}

}  // namespace

int ExpectTensorsMatchFixture(const Checkpoint& checkpoint,
                              const std::string& fixture_name) {
  std::ifstream in(kExpectedPath);
  EXPECT_TRUE(in.good()) << "cannot read " << kExpectedPath;
  int checked = 0;
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> fields =
        absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (fields.size() < 4 || fields[0] != fixture_name) continue;
    if (fields[3] == "scalar") fields[3].clear();
    ExpectTensor(checkpoint, fields);
    ++checked;
  }
  return checked;
}

}  // namespace castserve::casting::test_util
