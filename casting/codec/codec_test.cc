#include "casting/codec/codec.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace castserve::casting {
namespace {

using ::testing::HasSubstr;

constexpr ElementType kComputeTypes[] = {ElementType::kF32, ElementType::kBF16,
                                         ElementType::kF16};
constexpr ElementType kFp8Types[] = {ElementType::kF8E4M3FN,
                                     ElementType::kF8E5M2};

uint32_t Bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

float FromBits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

// --- Ground truth from ml_dtypes (tools/gen_fp8_reference.py) -------------

struct FixtureLine {
  std::string op;  // "decode" or "encode"
  ElementType type;
  uint32_t input;
  uint32_t output;
};

std::vector<FixtureLine> LoadFixture() {
  const std::string relative = "casting/codec/testdata/fp8_reference.txt";
  std::ifstream file(relative);
  if (!file && std::getenv("TEST_SRCDIR") != nullptr) {
    file.open(
        absl::StrCat(std::getenv("TEST_SRCDIR"), "/castserve/", relative));
  }
  EXPECT_TRUE(file.good()) << "cannot open " << relative;
  std::vector<FixtureLine> lines;
  std::string text;
  while (std::getline(file, text)) {
    if (text.empty() || text[0] == '#') continue;
    std::istringstream fields(text);
    std::string op, type_name;
    FixtureLine line;
    fields >> op >> type_name >> std::hex >> line.input >> line.output;
    line.op = op;
    line.type = *ParseElementType(type_name);
    lines.push_back(line);
  }
  return lines;
}

const std::vector<FixtureLine>& Fixture() {
  static const auto* lines = new std::vector<FixtureLine>(LoadFixture());
  return *lines;
}

bool CodeIsNan(ElementType type, uint32_t code) {
  return std::isnan(ElementBitsToF32(type, code));
}

TEST(CodecFixtureTest, Fp8DecodeMatchesMlDtypesForAll256Codes) {
  int checked = 0;
  for (const FixtureLine& line : Fixture()) {
    if (line.op != "decode") continue;
    EXPECT_EQ(Bits(ElementBitsToF32(line.type, line.input)), line.output)
        << ElementTypeName(line.type) << " code 0x" << std::hex << line.input;
    ++checked;
  }
  EXPECT_EQ(checked, 512);
}

// ml_dtypes gives NaN (E4M3FN) or inf (E5M2) beyond the range where we
// saturate; everywhere else, NaN included, the bits must agree.
TEST(CodecFixtureTest, Fp8EncodeMatchesMlDtypesAndSaturatesOutOfRange) {
  int agreed = 0, saturated = 0;
  for (const FixtureLine& line : Fixture()) {
    if (line.op != "encode" || !IsFp8(line.type)) continue;
    const float input = FromBits(line.input);
    const uint32_t ours = F32ToElementBits(line.type, input);
    const float ml_value = ElementBitsToF32(line.type, line.output);
    const bool ml_out_of_range =
        !std::isnan(input) && !std::isfinite(ml_value) && !std::isinf(input);
    const bool e4m3_inf = std::isinf(input) && !std::isfinite(ml_value) &&
                          line.type == ElementType::kF8E4M3FN;
    if (ml_out_of_range || e4m3_inf) {
      const float expected = std::copysign(Fp8MaxFinite(line.type), input);
      EXPECT_EQ(ElementBitsToF32(line.type, ours), expected)
          << ElementTypeName(line.type) << " input " << input;
      ++saturated;
    } else {
      EXPECT_EQ(ours, line.output)
          << ElementTypeName(line.type) << " input " << input << " (0x"
          << std::hex << line.input << ")";
      ++agreed;
    }
  }
  EXPECT_GT(agreed, 3000);
  EXPECT_GT(saturated, 20);
}

// NaN payloads are our own rule for 16-bit types (codec.h); all else agrees.
TEST(CodecFixtureTest, Bf16AndF16EncodeMatchMlDtypes) {
  int checked = 0;
  for (const FixtureLine& line : Fixture()) {
    if (line.op != "encode" || IsFp8(line.type)) continue;
    const float input = FromBits(line.input);
    const uint32_t ours = F32ToElementBits(line.type, input);
    if (std::isnan(input)) {
      EXPECT_TRUE(CodeIsNan(line.type, ours));
      EXPECT_EQ(ours >> 15, line.input >> 31) << "NaN keeps its sign";
    } else {
      EXPECT_EQ(ours, line.output)
          << ElementTypeName(line.type) << " input " << input << " (0x"
          << std::hex << line.input << ")";
    }
    ++checked;
  }
  EXPECT_GT(checked, 4000);
}

TEST(CodecScalarTest, SixteenBitCodesRoundTripExactly) {
  for (ElementType type : {ElementType::kBF16, ElementType::kF16}) {
    for (uint32_t code = 0; code < 0x10000; ++code) {
      const float value = ElementBitsToF32(type, code);
      if (std::isnan(value)) continue;
      ASSERT_EQ(F32ToElementBits(type, value), code)
          << ElementTypeName(type) << " 0x" << std::hex << code;
    }
  }
}

TEST(CodecScalarTest, SaturationAndInfinityRules) {
  const ElementType e4m3 = ElementType::kF8E4M3FN, e5m2 = ElementType::kF8E5M2;
  EXPECT_EQ(F32ToElementBits(e4m3, 464.0f), 0x7Eu);  // Tie rounds to even max.
  EXPECT_EQ(F32ToElementBits(e4m3, 465.0f), 0x7Eu);  // ml_dtypes: NaN.
  EXPECT_EQ(F32ToElementBits(e4m3, -1e30f), 0xFEu);
  EXPECT_EQ(F32ToElementBits(e4m3, INFINITY), 0x7Eu);  // No inf: saturate.
  EXPECT_EQ(F32ToElementBits(e4m3, -INFINITY), 0xFEu);
  EXPECT_EQ(F32ToElementBits(e5m2, 70000.0f), 0x7Bu);  // ml_dtypes: inf.
  EXPECT_EQ(F32ToElementBits(e5m2, -3e38f), 0xFBu);
  EXPECT_EQ(F32ToElementBits(e5m2, INFINITY), 0x7Cu);  // Inf stays inf.
  EXPECT_EQ(F32ToElementBits(e5m2, -INFINITY), 0xFCu);
  EXPECT_EQ(F32ToElementBits(ElementType::kF16, 65520.0f), 0x7C00u);  // IEEE.
}

TEST(CodecScalarTest, NanStaysNanWithSign) {
  for (ElementType type : {ElementType::kBF16, ElementType::kF16,
                           ElementType::kF8E4M3FN, ElementType::kF8E5M2}) {
    for (uint32_t nan_bits : {0x7FC00000u, 0x7F800001u, 0xFFFFFFFFu}) {
      const uint32_t code = F32ToElementBits(type, FromBits(nan_bits));
      const float decoded = ElementBitsToF32(type, code);
      EXPECT_TRUE(std::isnan(decoded)) << ElementTypeName(type);
      EXPECT_EQ(std::signbit(decoded), (nan_bits >> 31) != 0);
    }
  }
  EXPECT_EQ(F32ToElementBits(ElementType::kF8E4M3FN, -NAN), 0xFFu);
  EXPECT_EQ(F32ToElementBits(ElementType::kF8E5M2, NAN), 0x7Eu);
}

// --- Kernels against the reference -----------------------------------------

// Bit patterns that stress rounding and special cases, as f32.
std::vector<float> SpecialF32Values() {
  std::vector<float> values = {
      0.0f,     -0.0f,    INFINITY, -INFINITY, NAN,      -NAN,
      448.0f,   464.0f,   465.0f,   480.0f,    57344.0f, 61440.0f,
      61441.0f, 1e30f,    FLT_MAX,  FLT_MIN,   1e-45f,   1e-40f,
      65504.0f, 65520.0f, 0x1p-10f, 0x3p-11f,  0x1p-17f, 0x3p-18f};
  for (uint32_t bits : {0x7F800001u, 0x7FA00000u, 0xFFC00001u, 0x7F7FFFFFu,
                        0x3F808000u, 0x3F818000u, 0x477FF000u}) {
    values.push_back(FromBits(bits));
  }
  for (ElementType type : kFp8Types) {  // Every fp8 value and midpoint.
    for (uint32_t code = 0; code < 255; ++code) {
      const float a = ElementBitsToF32(type, code);
      const float b = ElementBitsToF32(type, code + 1);
      values.push_back(a);
      if (std::isfinite(a) && std::isfinite(b)) values.push_back((a + b) / 2);
    }
  }
  return values;
}

// `n` elements of `type`: specials, random bit patterns and, when `tame`,
// only finite log-uniform values instead of wild ones.
std::vector<uint8_t> MakeElements(ElementType type, int64_t n, bool tame,
                                  uint32_t seed) {
  static const std::vector<float> specials = SpecialF32Values();
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> log2_magnitude(-24.0f, 14.0f);
  std::vector<uint8_t> bytes(n * ElementSizeBytes(type));
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    const uint32_t pick = rng() % 4;
    if (!tame && pick == 0) {
      bits = F32ToElementBits(type, specials[rng() % specials.size()]);
    } else if (!tame && pick == 1) {
      bits = rng();  // Random pattern, truncated to the element width below.
    } else {
      const float value = std::exp2(log2_magnitude(rng)) * (rng() % 2 ? 1 : -1);
      bits = F32ToElementBits(type, value);
    }
    std::memcpy(&bytes[i * ElementSizeBytes(type)], &bits,
                ElementSizeBytes(type));  // Little-endian low bytes.
  }
  return bytes;
}

void ExpectSameElements(const std::vector<uint8_t>& got,
                        const std::vector<uint8_t>& want, ElementType type,
                        const std::string& context) {
  ASSERT_EQ(got.size(), want.size()) << context;
  const int64_t size = ElementSizeBytes(type);
  for (size_t i = 0; i < got.size(); i += size) {
    if (std::memcmp(&got[i], &want[i], size) == 0) continue;
    uint32_t got_bits = 0, want_bits = 0;
    std::memcpy(&got_bits, &got[i], size);
    std::memcpy(&want_bits, &want[i], size);
    FAIL() << context << ": element " << i / size << " is 0x" << std::hex
           << got_bits << ", reference 0x" << want_bits;
  }
}

int64_t RowsFor(int64_t n) { return n % 3 == 0 ? 3 : 1; }

struct EncodeResult {
  std::vector<uint8_t> data;
  std::vector<float> scales;
};

EncodeResult EncodeWith(const CodecOptions& options, ElementType src_type,
                        const std::vector<uint8_t>& src, StorageFormat format,
                        int64_t rows) {
  const int64_t n = src.size() / ElementSizeBytes(src_type);
  EncodeResult result{std::vector<uint8_t>(n * format.element_size_bytes()),
                      std::vector<float>(rows, -1.0f)};
  EXPECT_TRUE(Encode(src_type, src.data(), n, rows, format, result.data.data(),
                     result.scales.data(), options)
                  .ok());
  return result;
}

std::vector<uint8_t> DecodeWith(const CodecOptions& options,
                                StorageFormat format,
                                const std::vector<uint8_t>& src,
                                const std::vector<float>& scales, int64_t rows,
                                ElementType dst_type) {
  const int64_t n = src.size() / format.element_size_bytes();
  std::vector<uint8_t> out(n * ElementSizeBytes(dst_type));
  EXPECT_TRUE(Decode(format, src.data(), scales.data(), n, rows, dst_type,
                     out.data(), options)
                  .ok());
  return out;
}

CodecOptions SingleThreaded(CodecIsa isa) {
  CodecOptions options;
  options.isa = isa;
  options.max_threads = 1;
  return options;
}

std::vector<CodecIsa> FastIsas() {
  std::vector<CodecIsa> isas;
  for (CodecIsa isa :
       {CodecIsa::kPortable, CodecIsa::kAvx2, CodecIsa::kAvx512}) {
    if (CodecIsaSupported(isa)) isas.push_back(isa);
  }
  return isas;
}

std::vector<int64_t> TestLengths() {
  std::vector<int64_t> lengths;
  for (int64_t n = 0; n <= 67; ++n) lengths.push_back(n);
  lengths.push_back(999);
  return lengths;
}

TEST(CodecKernelTest, EncodeMatchesReferenceForAllLengthsAndValues) {
  const CodecOptions reference = SingleThreaded(CodecIsa::kReference);
  for (CodecIsa isa : FastIsas()) {
    for (ElementType src_type : kComputeTypes) {
      for (const StorageFormat& format : AllStorageFormats()) {
        for (int64_t n : TestLengths()) {
          for (bool tame : {false, true}) {
            const auto src = MakeElements(src_type, n, tame, n * 7 + tame);
            const int64_t rows = RowsFor(n);
            const std::string context = absl::StrCat(
                CodecIsaName(isa), " ", ElementTypeName(src_type), "->",
                format.ToString(), " n=", n, tame ? " tame" : " wild");
            const EncodeResult got =
                EncodeWith(SingleThreaded(isa), src_type, src, format, rows);
            const EncodeResult want =
                EncodeWith(reference, src_type, src, format, rows);
            ExpectSameElements(got.data, want.data, format.element, context);
            EXPECT_EQ(got.scales, want.scales) << context;
          }
        }
      }
    }
  }
}

TEST(CodecKernelTest, DecodeMatchesReferenceForAllLengthsAndValues) {
  const CodecOptions reference = SingleThreaded(CodecIsa::kReference);
  const std::vector<float> scales = {0.0173f, 3.5f, 1e-30f};
  for (CodecIsa isa : FastIsas()) {
    for (const StorageFormat& format : AllStorageFormats()) {
      for (ElementType dst_type : kComputeTypes) {
        for (int64_t n : TestLengths()) {
          const auto src = MakeElements(format.element, n, false, n);
          const int64_t rows = RowsFor(n);
          const std::string context =
              absl::StrCat(CodecIsaName(isa), " ", format.ToString(), "->",
                           ElementTypeName(dst_type), " n=", n);
          ExpectSameElements(
              DecodeWith(SingleThreaded(isa), format, src, scales, rows,
                         dst_type),
              DecodeWith(reference, format, src, scales, rows, dst_type),
              dst_type, context);
        }
      }
    }
  }
}

// Per-block scaling, written out element by element from the layout in
// casting/codec/storage_format.h: every kernel family and thread count gives
// these bits, ragged last blocks included.
TEST(CodecPerBlockTest, DecodeMultipliesEachBlockByItsScale) {
  for (const auto& [rows, cols, block_rows, block_cols] :
       std::vector<std::array<int64_t, 4>>{{40, 70, 16, 32},
                                           {5, 3, 2, 2},
                                           {64, 128, 64, 128},
                                           {33, 17, 1, 5},
                                           {7, 300, 3, 128}}) {
    const StorageFormat format =
        StorageFormat::PerBlock(ElementType::kF8E4M3FN, block_rows, block_cols);
    const std::vector<uint8_t> codes =
        MakeElements(ElementType::kF8E4M3FN, rows * cols, true, rows + cols);
    const std::vector<int64_t> grid = *format.ScaleShape({rows, cols});
    std::vector<float> scales(grid[0] * grid[1]);
    for (size_t i = 0; i < scales.size(); ++i) scales[i] = 0.01f * (i + 1);
    std::vector<float> want(rows * cols);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        want[r * cols + c] =
            ElementBitsToF32(ElementType::kF8E4M3FN, codes[r * cols + c]) *
            scales[(r / block_rows) * grid[1] + c / block_cols];
      }
    }
    std::vector<uint8_t> want_bytes(want.size() * 4);
    std::memcpy(want_bytes.data(), want.data(), want_bytes.size());
    CodecOptions threaded;
    threaded.max_threads = 3;
    threaded.min_elements_per_thread = 64;
    std::vector<CodecOptions> all = {threaded,
                                     SingleThreaded(CodecIsa::kReference)};
    for (CodecIsa isa : FastIsas()) all.push_back(SingleThreaded(isa));
    for (const CodecOptions& options : all) {
      const std::string context =
          absl::StrCat(format.ToString(), " [", rows, ", ", cols, "] ",
                       CodecIsaName(options.isa.value_or(BestCodecIsa())));
      ExpectSameElements(
          DecodeWith(options, format, codes, scales, rows, ElementType::kF32),
          want_bytes, ElementType::kF32, context);
    }
  }
}

TEST(CodecPerBlockTest, EncodeScalesEachBlockByItsAbsMax) {
  const int64_t rows = 37, cols = 45;
  const StorageFormat format =
      StorageFormat::PerBlock(ElementType::kF8E4M3FN, 16, 32);
  const std::vector<uint8_t> src =
      MakeElements(ElementType::kF32, rows * cols, true, 11);
  std::vector<float> values(rows * cols);
  std::memcpy(values.data(), src.data(), src.size());
  const std::vector<int64_t> grid = *format.ScaleShape({rows, cols});
  const int64_t num_scales = grid[0] * grid[1];
  std::vector<float> want_scales(num_scales, 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      float& absmax = want_scales[(r / 16) * grid[1] + c / 32];
      if (std::isfinite(values[r * cols + c])) {
        absmax = std::max(absmax, std::fabs(values[r * cols + c]));
      }
    }
  }
  for (float& scale : want_scales) {
    scale = ScaleForAbsMax(scale, ElementType::kF8E4M3FN);
  }
  std::vector<CodecOptions> all = {SingleThreaded(CodecIsa::kReference)};
  for (CodecIsa isa : FastIsas()) all.push_back(SingleThreaded(isa));
  CodecOptions threaded;
  threaded.max_threads = 3;
  threaded.min_elements_per_thread = 64;
  all.push_back(threaded);
  for (const CodecOptions& options : all) {
    std::vector<uint8_t> data(rows * cols);
    std::vector<float> scales(num_scales, -1.0f);
    ASSERT_TRUE(Encode(ElementType::kF32, src.data(), rows * cols, rows, format,
                       data.data(), scales.data(), options)
                    .ok());
    EXPECT_EQ(scales, want_scales);
    // Each element is its value over its block's scale, rounded once.
    for (int64_t i = 0; i < rows * cols; ++i) {
      const float scale =
          want_scales[(i / cols / 16) * grid[1] + i % cols / 32];
      ASSERT_EQ(data[i],
                F32ToElementBits(ElementType::kF8E4M3FN, values[i] / scale))
          << "element " << i;
    }
  }
}

TEST(CodecKernelTest, LargeTensorAboveThreadThresholdMatchesReference) {
  const int64_t n = (int64_t{1} << 21) + 3 * 64 + 5;
  ASSERT_GE(n, 2 * CodecOptions().min_elements_per_thread);
  const auto src = MakeElements(ElementType::kF32, n, false, 42);
  const StorageFormat format{ElementType::kF8E4M3FN, Scaling::kPerTensor};
  const EncodeResult got = EncodeWith({}, ElementType::kF32, src, format, 1);
  const EncodeResult want = EncodeWith(SingleThreaded(CodecIsa::kReference),
                                       ElementType::kF32, src, format, 1);
  ExpectSameElements(got.data, want.data, format.element, "encode");
  EXPECT_EQ(got.scales, want.scales);
  ExpectSameElements(
      DecodeWith({}, format, got.data, got.scales, 1, ElementType::kBF16),
      DecodeWith(SingleThreaded(CodecIsa::kReference), format, got.data,
                 got.scales, 1, ElementType::kBF16),
      ElementType::kBF16, "decode");
}

TEST(CodecThreadingTest, ThreadedMatchesSingleThreaded) {
  const int64_t rows = 7, n = rows * 14293;
  CodecOptions threaded;
  threaded.max_threads = 4;
  threaded.min_elements_per_thread = 1000;
  const CodecOptions single = SingleThreaded(BestCodecIsa());
  for (const StorageFormat& format : AllStorageFormats()) {
    for (ElementType compute : kComputeTypes) {
      const auto src = MakeElements(compute, n, true, 3);
      const std::string context =
          absl::StrCat(format.ToString(), " ", ElementTypeName(compute));
      const EncodeResult a = EncodeWith(threaded, compute, src, format, rows);
      const EncodeResult b = EncodeWith(single, compute, src, format, rows);
      ExpectSameElements(a.data, b.data, format.element, context);
      EXPECT_EQ(a.scales, b.scales) << context;
      ExpectSameElements(
          DecodeWith(threaded, format, a.data, a.scales, rows, compute),
          DecodeWith(single, format, a.data, a.scales, rows, compute), compute,
          context);
    }
  }
}

// A ReadGuard that runs each read after checking that it lies inside `src`
// and covers whole units of `unit_bytes`, and counts the bytes and the calls
// it was handed.
class CheckingGuard {
 public:
  CheckingGuard(const std::vector<uint8_t>& src, size_t unit_bytes,
                std::string context)
      : src_(src), unit_bytes_(unit_bytes), context_(std::move(context)) {}

  absl::Status operator()(const void* begin, size_t size,
                          absl::FunctionRef<void()> read) const {
    const uint8_t* first = static_cast<const uint8_t*>(begin);
    EXPECT_GE(first, src_.data()) << context_;
    EXPECT_LE(first + size, src_.data() + src_.size()) << context_;
    EXPECT_EQ(size % unit_bytes_, 0u) << context_;
    bytes_ += static_cast<int64_t>(size);
    ++calls_;
    read();
    return absl::OkStatus();
  }
  int64_t bytes() const { return bytes_; }
  int calls() const { return calls_; }

 private:
  const std::vector<uint8_t>& src_;
  const size_t unit_bytes_;
  const std::string context_;
  mutable std::atomic<int64_t> bytes_{0};
  mutable std::atomic<int> calls_{0};
};

TEST(CodecGuardedTest, DecodesLikeDecodeWithEveryThreadsShareGuarded) {
  const int64_t n = 5 * 14293;
  CodecOptions threaded;
  threaded.max_threads = 4;
  threaded.min_elements_per_thread = 1000;
  for (ElementType source :
       {ElementType::kBF16, ElementType::kF16, ElementType::kF32,
        ElementType::kF8E4M3FN, ElementType::kF8E5M2}) {
    for (ElementType compute : kComputeTypes) {
      const auto src = MakeElements(source, n, false, 5);
      const std::string context = absl::StrCat(ElementTypeName(source), " -> ",
                                               ElementTypeName(compute));
      CheckingGuard guard(src, 1, context);
      std::vector<uint8_t> got(n * ElementSizeBytes(compute));
      ASSERT_TRUE(DecodeGuarded(source, src.data(), n, compute, got.data(),
                                guard, threaded)
                      .ok());
      ExpectSameElements(got,
                         DecodeWith(threaded, StorageFormat::Plain(source), src,
                                    {}, 1, compute),
                         compute, context);
      EXPECT_EQ(guard.bytes(), static_cast<int64_t>(src.size())) << context;
      EXPECT_EQ(guard.calls(), 4) << context;
    }
  }
}

TEST(CodecGuardedTest, AGuardsErrorIsReturned) {
  const auto src = MakeElements(ElementType::kBF16, 4096, true, 6);
  std::vector<float> out(4096);
  auto failing = [](const void*, size_t, absl::FunctionRef<void()>) {
    return absl::DataLossError("page vanished");
  };
  absl::Status status = DecodeGuarded(ElementType::kBF16, src.data(), 4096,
                                      ElementType::kF32, out.data(), failing);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(status.message(), "page vanished");
}

TEST(CodecGuardedTest, EncodesLikeEncodeWithEveryThreadsRowsGuarded) {
  const int64_t rows = 7, n = rows * 14293;
  CodecOptions threaded;
  threaded.max_threads = 4;
  threaded.min_elements_per_thread = 1000;
  for (const StorageFormat& format : AllStorageFormats()) {
    if (format.scaling != Scaling::kNone && format.scaling != Scaling::kPerRow)
      continue;  // Refused: the next test.
    for (ElementType compute : kComputeTypes) {
      const auto src = MakeElements(compute, n, true, 9);
      const std::string context =
          absl::StrCat(ElementTypeName(compute), " -> ", format.ToString());
      CheckingGuard guard(src, src.size() / rows, context);  // Whole rows.
      EncodeResult got{std::vector<uint8_t>(n * format.element_size_bytes()),
                       std::vector<float>(rows, -1.0f)};
      ASSERT_TRUE(EncodeGuarded(compute, src.data(), n, rows, format,
                                got.data.data(), got.scales.data(), guard,
                                threaded)
                      .ok())
          << context;
      const EncodeResult want =
          EncodeWith(threaded, compute, src, format, rows);
      ExpectSameElements(got.data, want.data, format.element, context);
      EXPECT_EQ(got.scales, want.scales) << context;
      EXPECT_EQ(guard.bytes(), static_cast<int64_t>(src.size())) << context;
      EXPECT_EQ(guard.calls(), 4) << context;
    }
  }
}

TEST(CodecGuardedTest, AGuardedEncodeRefusesScalesAcrossRowsAndReturnsErrors) {
  const auto src = MakeElements(ElementType::kBF16, 4096, true, 6);
  std::vector<uint8_t> out(4096);
  std::vector<float> scales(64);
  auto passing = [](const void*, size_t, absl::FunctionRef<void()> read) {
    read();
    return absl::OkStatus();
  };
  for (const StorageFormat& format : AllStorageFormats()) {
    if (format.scaling != Scaling::kPerTensor &&
        format.scaling != Scaling::kPerBlock)
      continue;
    const absl::Status status =
        EncodeGuarded(ElementType::kBF16, src.data(), 4096, 64, format,
                      out.data(), scales.data(), passing);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument)
        << format.ToString();
    EXPECT_THAT(status.message(), HasSubstr(format.ToString()));
  }
  auto failing = [](const void*, size_t, absl::FunctionRef<void()>) {
    return absl::DataLossError("page vanished");
  };
  const absl::Status status =
      EncodeGuarded(ElementType::kBF16, src.data(), 4096, 64,
                    StorageFormat{ElementType::kF8E4M3FN, Scaling::kPerRow},
                    out.data(), scales.data(), failing);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(status.message(), "page vanished");
}

// --- Scaled fp8
// ---------------------------------------------------------------

std::vector<float> RowsOfMagnitudes(const std::vector<float>& row_magnitudes,
                                    int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> values;
  for (float magnitude : row_magnitudes) {
    for (int64_t c = 0; c < cols; ++c)
      values.push_back(normal(rng) * magnitude);
  }
  return values;
}

std::vector<uint8_t> AsBytes(const std::vector<float>& values) {
  std::vector<uint8_t> bytes(values.size() * 4);
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

std::vector<float> AsFloats(const std::vector<uint8_t>& bytes) {
  std::vector<float> values(bytes.size() / 4);
  std::memcpy(values.data(), bytes.data(), bytes.size());
  return values;
}

TEST(ScaledCodecTest, PerRowRoundTripErrorIsWithinHalfAStep) {
  const std::vector<float> magnitudes = {1e-6f, 0.02f, 1.0f, 3e4f};
  const int64_t cols = 4096, rows = magnitudes.size();
  const std::vector<float> x = RowsOfMagnitudes(magnitudes, cols, 1);
  for (ElementType type : kFp8Types) {
    const StorageFormat format{type, Scaling::kPerRow};
    const EncodeResult encoded =
        EncodeWith({}, ElementType::kF32, AsBytes(x), format, rows);
    const std::vector<float> y = AsFloats(DecodeWith(
        {}, format, encoded.data, encoded.scales, rows, ElementType::kF32));
    const int mantissa_bits = type == ElementType::kF8E4M3FN ? 3 : 2;
    const float min_step = type == ElementType::kF8E4M3FN ? 0x1p-9f : 0x1p-16f;
    for (int64_t r = 0; r < rows; ++r) {
      float absmax = 0;
      for (int64_t c = 0; c < cols; ++c) {
        absmax = std::max(absmax, std::fabs(x[r * cols + c]));
      }
      EXPECT_FLOAT_EQ(encoded.scales[r], absmax / Fp8MaxFinite(type));
      for (int64_t c = 0; c < cols; ++c) {
        const float xi = x[r * cols + c], yi = y[r * cols + c];
        const float bound =
            std::max(std::ldexp(std::fabs(xi), -mantissa_bits - 1),
                     encoded.scales[r] * min_step / 2);
        ASSERT_LE(std::fabs(xi - yi), bound * 1.0001f)
            << ElementTypeName(type) << " row " << r << " x=" << xi;
      }
    }
  }
}

TEST(ScaledCodecTest, SmallWeightsSurviveScalingButFlushWithout) {
  const std::vector<float> x = RowsOfMagnitudes({1e-5f}, 1000, 2);
  const ElementType type = ElementType::kF8E4M3FN;
  const EncodeResult plain = EncodeWith({}, ElementType::kF32, AsBytes(x),
                                        StorageFormat::Plain(type), 1);
  const EncodeResult scaled = EncodeWith({}, ElementType::kF32, AsBytes(x),
                                         {type, Scaling::kPerTensor}, 1);
  int plain_zeros = 0, scaled_zeros = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    plain_zeros += (plain.data[i] & 0x7F) == 0;
    scaled_zeros += (scaled.data[i] & 0x7F) == 0;
  }
  EXPECT_EQ(plain_zeros, 1000);  // Far below the smallest subnormal, 2^-9.
  EXPECT_LT(scaled_zeros, 10);
}

TEST(ScaledCodecTest, ZeroRowsGetUnitScaleAndNonFiniteValuesAreIgnored) {
  const std::vector<float> x = {0, 0, -0.0f, 0, 2.0f, INFINITY, NAN, -8.0f};
  const StorageFormat format{ElementType::kF8E5M2, Scaling::kPerRow};
  const EncodeResult encoded =
      EncodeWith({}, ElementType::kF32, AsBytes(x), format, 2);
  EXPECT_EQ(encoded.scales[0], 1.0f);
  EXPECT_EQ(encoded.scales[1], 8.0f / 57344.0f);
  const std::vector<float> y = AsFloats(DecodeWith(
      {}, format, encoded.data, encoded.scales, 2, ElementType::kF32));
  EXPECT_EQ(y[4], 2.0f);
  EXPECT_TRUE(std::isinf(y[5]));
  EXPECT_TRUE(std::isnan(y[6]));
  EXPECT_EQ(y[7], -8.0f);
  EXPECT_TRUE(std::signbit(y[2]));
}

// --- Argument errors
// -----------------------------------------------------------

TEST(CodecTest, InvalidArgumentsAreErrors) {
  float data[6] = {};
  uint8_t out[6];
  float scales[4];
  const StorageFormat per_row{ElementType::kF8E4M3FN, Scaling::kPerRow};
  EXPECT_THAT(
      Encode(ElementType::kF32, data, 6, 4, per_row, out, scales).message(),
      HasSubstr("4 rows do not divide 6 elements"));
  EXPECT_THAT(
      Encode(ElementType::kF32, data, 6, 2, per_row, out, nullptr).message(),
      HasSubstr("needs a scale buffer"));
  EXPECT_THAT(Decode(StorageFormat::Plain(ElementType::kF32), data, nullptr, 6,
                     1, ElementType::kF8E5M2, out)
                  .message(),
              HasSubstr("compute type must be F32, BF16 or F16"));
  EXPECT_FALSE(Encode(ElementType::kF32, data, -1, 1,
                      StorageFormat::Plain(ElementType::kBF16), out, nullptr)
                   .ok());
}

}  // namespace
}  // namespace castserve::casting
