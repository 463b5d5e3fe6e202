#include "models/kernels/storage_product.h"

#include <ATen/ATen.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "casting/codec/codec.h"
#include "casting/codec/storage_format.h"
#include "casting/formats/safetensors_reader.h"
#include "casting/formats/test_util/safetensors_writer.h"
#include "casting/weight.h"
#include "gtest/gtest.h"

namespace castserve::models {
namespace {

using casting::ElementType;
using casting::Scaling;
using casting::StorageFormat;

// A weight encoded into a storage format: the view a kernel reads, the bytes
// and scales it points into, and the decoded f32 values (the reference).
struct EncodedWeight {
  at::Tensor bytes;
  at::Tensor scales;
  at::Tensor decoded;  // [out, in] f32: what decode-then-matmul multiplies by.
  casting::StorageView view;
};

EncodedWeight Encode(const at::Tensor& w, StorageFormat format) {
  const int64_t out = w.size(0);
  const int64_t in = w.size(1);
  EncodedWeight e;
  e.bytes = at::empty({out * in * format.element_size_bytes()}, at::kByte);
  e.scales =
      at::ones({format.scaling == Scaling::kPerRow ? out : 1}, at::kFloat);
  const at::Tensor src = w.contiguous();
  EXPECT_TRUE(casting::Encode(ElementType::kF32, src.data_ptr(), w.numel(), out,
                              format, e.bytes.data_ptr(),
                              e.scales.data_ptr<float>())
                  .ok());
  e.decoded = at::empty({out, in}, at::kFloat);
  EXPECT_TRUE(casting::Decode(format, e.bytes.data_ptr(),
                              e.scales.data_ptr<float>(), w.numel(), out,
                              ElementType::kF32, e.decoded.data_ptr())
                  .ok());
  e.view.data = e.bytes.data_ptr<uint8_t>();
  e.view.format = format;
  e.view.rows = out;
  e.view.cols = in;
  if (format.is_scaled()) {
    const bool per_row = format.scaling == Scaling::kPerRow;
    e.view.scales.data = e.scales.data_ptr<float>();
    e.view.scales.block_rows = per_row ? 1 : out;
    e.view.scales.block_cols = in;
    e.view.scales.grid_rows = per_row ? out : 1;
  }
  return e;
}

// Every kernel family this CPU runs, the forced fallbacks included.
std::vector<ProductIsa> SupportedIsas() {
  std::vector<ProductIsa> isas;
  for (ProductIsa isa :
       {ProductIsa::kReference, ProductIsa::kAvx2, ProductIsa::kAvx512,
        ProductIsa::kAvx512Bf16, ProductIsa::kAmxBf16}) {
    if (ProductIsaSupported(isa)) isas.push_back(isa);
  }
  return isas;
}

std::string IsaName(ProductIsa isa) { return std::string(ProductIsaName(isa)); }

// |y - x W^T| within f32 rounding of the sum of |x| |W|^T (summation
// order differs from the reference's), W the decoded weight, in double.
void ExpectNearReference(const at::Tensor& y, const at::Tensor& x,
                         const at::Tensor& decoded, const std::string& what) {
  const at::Tensor reference =
      at::matmul(x.to(at::kDouble), decoded.to(at::kDouble).t());
  const at::Tensor magnitude =
      at::matmul(x.abs().to(at::kDouble), decoded.abs().to(at::kDouble).t());
  const at::Tensor error = (y.to(at::kDouble) - reference).abs();
  const at::Tensor bound = magnitude * 1e-5 + 1e-30;
  EXPECT_TRUE(error.le(bound).all().item<bool>())
      << what << ": max error " << error.max().item<double>() << ", max bound "
      << bound.max().item<double>();
}

TEST(StorageProductTest, MatchesDecodeThenMatmulOverShapesFormatsAndIsas) {
  at::manual_seed(5);
  // Up to 2 x 16 + 1 rows (the AMX kernels' row groups); shapes with
  // partial and whole tiles of 16 features x 32 columns.
  const std::vector<int64_t> row_counts = {1, 2,  3,  4,  5,  7,
                                           8, 13, 16, 17, 32, 33};
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {1, 1},    {7, 15},   {9, 17},  {37, 33}, {16, 64},
      {11, 100}, {13, 200}, {64, 96}, {48, 65}};
  for (ProductIsa isa : SupportedIsas()) {
    for (StorageFormat format : casting::AllStorageFormats()) {
      for (auto [out, in] : shapes) {
        at::Tensor w = at::randn({out, in}) * 0.05;
        w[0] *= 40;  // A row of another scale: per-row scales differ.
        const EncodedWeight e = Encode(w, format);
        for (int64_t rows : row_counts) {
          const at::Tensor x = at::randn({rows, in});
          absl::StatusOr<at::Tensor> y =
              StorageProduct(x, e.view, at::Tensor(), std::nullopt, isa);
          ASSERT_TRUE(y.ok()) << y.status();
          ASSERT_EQ(y->sizes(), (std::vector<int64_t>{rows, out}));
          ExpectNearReference(*y, x, e.decoded,
                              IsaName(isa) + " " + format.ToString() + " " +
                                  std::to_string(rows) + "x" +
                                  std::to_string(in) + "->" +
                                  std::to_string(out));
        }
      }
    }
  }
}

// Every code of each fp8 type, alone in its row of zeros (once where the
// vector loop reads it, once in the scalar tail), times ones (one row, and
// 17 for the AMX tiles): the output is the decoded code exactly, NaN and
// infinity included.
TEST(StorageProductTest, Fp8SpecialValuesDecodeExactly) {
  constexpr int64_t kIn = 40;  // 2 full AVX-512 vectors + a tail of 8.
  for (ProductIsa isa : SupportedIsas()) {
    for (ElementType type : {ElementType::kF8E4M3FN, ElementType::kF8E5M2}) {
      for (int64_t column : {int64_t{3}, kIn - 1}) {
        for (int64_t rows : {1, 17}) {
          at::Tensor bytes = at::zeros({256, kIn}, at::kByte);
          for (int code = 0; code < 256; ++code) bytes[code][column] = code;
          casting::StorageView view;
          view.data = bytes.data_ptr<uint8_t>();
          view.format = StorageFormat::Plain(type);
          view.rows = 256;
          view.cols = kIn;
          absl::StatusOr<at::Tensor> y = StorageProduct(
              at::ones({rows, kIn}), view, at::Tensor(), std::nullopt, isa);
          ASSERT_TRUE(y.ok()) << y.status();
          for (int code = 0; code < 256; ++code) {
            const float expected = casting::ElementBitsToF32(type, code);
            const float got = (*y)[rows - 1][code].item<float>();
            if (std::isnan(expected)) {
              EXPECT_TRUE(std::isnan(got)) << code;
            } else {
              EXPECT_EQ(got, expected)
                  << IsaName(isa) << " code " << code << " column " << column
                  << " rows " << rows;
            }
          }
        }
      }
    }
  }
}

// f32 activations that bf16 does not hold exactly are split into bf16
// parts, some of them zero; a stored infinity times such a part would be
// NaN. The product is the reference's: infinite where an infinite weight
// meets a nonzero activation, NaN where it meets a zero one.
TEST(StorageProductTest, AnInfiniteWeightGivesTheReferencesInfinity) {
  constexpr int64_t kOut = 40, kIn = 70;
  for (StorageFormat format : {StorageFormat::Plain(ElementType::kBF16),
                               StorageFormat::Plain(ElementType::kF8E5M2)}) {
    at::Tensor w = at::full({kOut, kIn}, 0.25);
    w[3][5] = std::numeric_limits<float>::infinity();
    w[35][64] = -std::numeric_limits<float>::infinity();
    const EncodedWeight e = Encode(w, format);
    for (int64_t rows : {2, 4, 20}) {
      // 1 + 2^-10 + 2^-20: three bf16 parts, the last two small.
      at::Tensor x = at::full({rows, kIn}, 1.0 + 1.0 / 1024 + 1.0 / 1048576);
      // The first row meets the infinity with 1 (its last two parts zero),
      // the last row with 0.
      x[0][5] = 1.0;
      x[rows - 1][5] = 0.0;
      const at::Tensor reference = at::matmul(x, e.decoded.t());
      for (ProductIsa isa : SupportedIsas()) {
        absl::StatusOr<at::Tensor> y =
            StorageProduct(x, e.view, at::Tensor(), std::nullopt, isa);
        ASSERT_TRUE(y.ok()) << y.status();
        const std::string what =
            IsaName(isa) + " " + format.ToString() + " " + std::to_string(rows);
        for (int64_t r = 0; r < rows; ++r) {
          EXPECT_EQ(std::isnan((*y)[r][3].item<float>()), r == rows - 1)
              << what << " row " << r;
          if (r < rows - 1) {
            EXPECT_EQ((*y)[r][3].item<float>(),
                      std::numeric_limits<float>::infinity())
                << what;
          }
          EXPECT_EQ((*y)[r][35].item<float>(),
                    -std::numeric_limits<float>::infinity())
              << what;
          EXPECT_NEAR((*y)[r][0].item<float>(), reference[r][0].item<float>(),
                      1e-4)
              << what;
        }
      }
    }
  }
}

// The scale lookup reads a grid: blocks of 2 rows x 16 columns (the shape a
// per-block format has) scale their own dot products; then blocks of 64
// columns, where the bf16 kernels' fp8 chunks (64 codes, reordered in
// registers) fill whole blocks and a last narrower block is all tail.
TEST(StorageProductTest, ReadsAScaleGridOfBlocks) {
  at::manual_seed(9);
  constexpr int64_t kOut = 5, kBlockRows = 2, kGridRows = 3, kGridCols = 3;
  for (auto [in, block_cols] : {std::pair<int64_t, int64_t>{40, 16},
                                std::pair<int64_t, int64_t>{160, 64}}) {
    const at::Tensor w = at::randn({kOut, in});
    at::Tensor bytes = at::empty({kOut * in}, at::kByte);
    ASSERT_TRUE(casting::Encode(ElementType::kF32, w.data_ptr(), w.numel(),
                                kOut,
                                StorageFormat::Plain(ElementType::kF8E4M3FN),
                                bytes.data_ptr(), nullptr)
                    .ok());
    at::Tensor codes = at::empty({kOut, in}, at::kFloat);
    ASSERT_TRUE(casting::Decode(StorageFormat::Plain(ElementType::kF8E4M3FN),
                                bytes.data_ptr(), nullptr, w.numel(), kOut,
                                ElementType::kF32, codes.data_ptr())
                    .ok());
    const at::Tensor grid = at::rand({kGridRows, kGridCols}) + 0.5;
    at::Tensor decoded = codes.clone();
    for (int64_t r = 0; r < kOut; ++r) {
      for (int64_t c = 0; c < in; ++c) {
        decoded[r][c] *= grid[r / kBlockRows][c / block_cols];
      }
    }
    casting::StorageView view;
    view.data = bytes.data_ptr<uint8_t>();
    view.format = {ElementType::kF8E4M3FN, Scaling::kPerRow};
    view.rows = kOut;
    view.cols = in;
    view.scales = {grid.data_ptr<float>(), kBlockRows, block_cols, kGridRows,
                   kGridCols};
    for (ProductIsa isa : SupportedIsas()) {
      for (int64_t rows : {1, 3, 6}) {
        const at::Tensor x = at::randn({rows, in});
        absl::StatusOr<at::Tensor> y =
            StorageProduct(x, view, at::Tensor(), std::nullopt, isa);
        ASSERT_TRUE(y.ok()) << y.status();
        ExpectNearReference(*y, x, decoded,
                            "grid " + IsaName(isa) + " " +
                                std::to_string(rows) + "x" +
                                std::to_string(in));
      }
    }
  }
}

// bf16 and f16 activations (bf16 / f16 compute): the avx512_bf16 kernels
// take bf16 activations as 1 bf16 part at every row count, f16 ones as 2
// exact parts for E4M3FN at 1 row and widened weights otherwise; each
// product is exact in f32, so the result is within f32 summation rounding of
// the exact product of the same activations, then x's dtype's rounding.
TEST(StorageProductTest, ReducedPrecisionActivationsOverIsas) {
  at::manual_seed(13);
  const at::Tensor w = at::randn({21, 200}) * 0.05;
  for (StorageFormat format :
       {StorageFormat::Plain(ElementType::kBF16),
        StorageFormat{ElementType::kF8E4M3FN, Scaling::kPerRow},
        StorageFormat{ElementType::kF8E5M2, Scaling::kPerTensor}}) {
    const EncodedWeight e = Encode(w, format);
    for (at::ScalarType dtype : {at::kBFloat16, at::kHalf}) {
      for (int64_t rows : {1, 2, 5, 16, 30}) {
        const at::Tensor x = at::randn({rows, 200}).to(dtype);
        for (ProductIsa isa : SupportedIsas()) {
          absl::StatusOr<at::Tensor> y =
              StorageProduct(x, e.view, at::Tensor(), std::nullopt, isa);
          ASSERT_TRUE(y.ok()) << y.status();
          ASSERT_EQ(y->scalar_type(), dtype);
          // The result is rounded to x's dtype: allow its half ulp.
          const at::Tensor exact =
              at::matmul(x.to(at::kDouble), e.decoded.to(at::kDouble).t());
          const double ulp = dtype == at::kBFloat16 ? 1.0 / 256 : 1.0 / 2048;
          const at::Tensor error = (y->to(at::kDouble) - exact).abs();
          const at::Tensor bound =
              exact.abs() * ulp +
              at::matmul(x.abs().to(at::kDouble),
                         e.decoded.abs().to(at::kDouble).t()) *
                  1e-5 +
              1e-30;
          EXPECT_TRUE(error.le(bound).all().item<bool>())
              << IsaName(isa) << " " << format.ToString() << " " << rows
              << " rows: max error " << error.max().item<double>();
        }
      }
    }
  }
}

TEST(StorageProductTest, ReducedPrecisionBiasActivationAndBatchDims) {
  at::manual_seed(3);
  const at::Tensor w = at::randn({24, 48}) * 0.1;
  const EncodedWeight e = Encode(w, StorageFormat::Plain(ElementType::kBF16));
  const at::Tensor x = at::randn({2, 3, 48});
  const at::Tensor bias = at::randn({24});
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    absl::StatusOr<at::Tensor> y =
        StorageProduct(x.to(dtype), e.view, bias.to(dtype), Activation::kSilu);
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_EQ(y->scalar_type(), dtype);
    EXPECT_EQ(y->sizes(), (std::vector<int64_t>{2, 3, 24}));
    const at::Tensor expected = Activate(
        Activation::kSilu, at::linear(x.to(dtype).to(at::kFloat), e.decoded,
                                      bias.to(dtype).to(at::kFloat)));
    const double tolerance = dtype == at::kFloat ? 1e-5 : 2e-2;
    EXPECT_TRUE(at::allclose(y->to(at::kFloat), expected, tolerance, tolerance))
        << (y->to(at::kFloat) - expected).abs().max().item<float>();
  }
}

// A mapped bf16 weight is read straight from the file's pages, under the
// SIGBUS guard: the product equals decode-then-matmul, and once the file is
// truncated under it the product is DATA_LOSS, not a crash.
TEST(StorageProductTest, ReadsAMappedWeightUnderTheGuard) {
  at::manual_seed(11);
  constexpr int64_t kOut = 512, kIn = 40;  // 40 KiB: several pages.
  const at::Tensor w = (at::randn({kOut, kIn}) * 0.1).to(at::kBFloat16);
  const std::string data(static_cast<const char*>(w.data_ptr()), w.nbytes());
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path =
      std::string(dir ? dir : "/tmp") + "/mapped_product.safetensors";
  const std::string header = casting::test_util::MakeHeaderJson(
      {{"w", "BF16", {kOut, kIn}, 0, static_cast<uint64_t>(w.nbytes())}});
  ASSERT_TRUE(
      casting::test_util::WriteSafetensorsFile(path, header, data).ok());
  absl::StatusOr<std::unique_ptr<casting::Checkpoint>> checkpoint =
      casting::OpenSafetensors(path);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  casting::WeightOptions options;
  options.residency = casting::Residency::kMapped;
  options.compute_copy = casting::ComputeCopyPolicy::kTransient;
  absl::StatusOr<std::unique_ptr<casting::Weight>> weight =
      casting::Weight::Create(std::move(*checkpoint), "w", options);
  ASSERT_TRUE(weight.ok()) << weight.status();
  absl::StatusOr<const casting::StorageView*> read = (*weight)->ReadStorage();
  ASSERT_TRUE(read.ok()) << read.status();
  const casting::StorageView& view = **read;
  ASSERT_TRUE(view.mapped);
  const at::Tensor x = at::randn({2, kIn});
  absl::StatusOr<at::Tensor> y = StorageProduct(x, view, at::Tensor());
  ASSERT_TRUE(y.ok()) << y.status();
  ExpectNearReference(*y, x, w.to(at::kFloat), "mapped");
  ASSERT_EQ(truncate(path.c_str(), 0), 0);
  absl::StatusOr<at::Tensor> cut = StorageProduct(x, view, at::Tensor());
  ASSERT_FALSE(cut.ok());
  EXPECT_EQ(cut.status().code(), absl::StatusCode::kDataLoss) << cut.status();
}

}  // namespace
}  // namespace castserve::models
