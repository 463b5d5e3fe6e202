// The one table of element types: every name castserve gives a tensor's
// element type, in every vocabulary, in one row per type.
//
// Columns, per row:
//   - DType: the enum used everywhere below the wire (checkpoints, weights);
//     the row's index in kDtypeRows is its value.
//   - kind, bits: what the element is and how wide.
//   - checkpoint_name: as safetensors headers spell it ("F32", "F8_E4M3").
//   - wire_name: the KServe v2 datatype string of requests and responses
//     ("FP32", "INT64", "BYTES"); wire_contents_field: the
//     InferTensorContents field that carries it in typed contents (none for
//     FP16 and BF16, which travel raw only).
//   - config_name: the model_config.proto DataType name that config.pbtxt
//     files use ("TYPE_FP32", "TYPE_STRING" for BYTES).
//   - torch_name: the c10::ScalarType name ("Float", "BFloat16") of the
//     LibTorch tensor that holds the elements; torch_exact is false where that
//     tensor only holds the bytes (fp8 lives in uint8 tensors, which the codec
//     reads and writes).
//   - torch_storage_class: the class a pickled state dict names for it.
//   - element: the codec's element type (casting::ElementType), which is also
//     the codec id: it indexes the kernel tables of codec_internal.h. Only the
//     floating types the codec reads and writes have one; they also carry the
//     storage-format name ("F8_E4M3FN"), the aliases ParseElementType accepts,
//     whether layers compute in it, and the largest finite fp8 value.
// An empty name means that vocabulary has no name for the type.
//
// Layering. This file is plain constexpr data with no dependency but Abseil
// (element sizes stay compile-time constants for the kernels), so every layer
// can read it: the checkpoint readers and the CUDA codec (no
// LibTorch), casting/device/torch_types.h (LibTorch), server/ (protobuf). The
// two columns that name another library's enum hold that library's own *names*,
// not its numbers, and each is resolved in exactly one place:
//   - c10::ScalarType by name in casting/device/torch_types.cc (once, at first
//   use);
//   - the model_config.proto enums by name in server/servables/proto_dtypes.cc
//     (DataType_Parse(config_name) and the STORAGE_DTYPE_/COMPUTE_DTYPE_
//     prefixes plus element_name; SCALING_ plus ScalingName), so casting/
//     never depends on protobuf or gRPC.
// Names rather than numbers because both enums already carry their names
// (c10::toString, DataType_Name), so nothing is written twice; the tests of
// both places check that every name in the table resolves and, for the
// protos, that every enum value has a row.
//
// Adding a storage format: one row here (with a new ElementType value at the
// end) plus its kernels (codec_reference.cc,
// codec_simd.h, codec_cuda.cu); a STORAGE_DTYPE_<element_name> value in
// model_config.proto if configs may ask for it. Nothing else maps dtypes.
//
// Thread safety: immutable data.
#ifndef CASTSERVE_CASTING_CODEC_DTYPE_TABLE_H_
#define CASTSERVE_CASTING_CODEC_DTYPE_TABLE_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace castserve::casting {

// Element encodings the codec converts between. The numeric values index
// kernel tables (the codec id); do not reorder, append.
enum class ElementType : uint8_t {
  kF32 = 0,
  kF16 = 1,
  kBF16 = 2,
  kF8E4M3FN = 3,  // 1-4-3, bias 7, no inf, NaN = S.1111.111, max 448.
  kF8E5M2 = 4,    // 1-5-2, bias 15, IEEE-like with inf, max 57344.
};

// Every element type castserve knows of. F8_E4M3 is the "fn" variant (no
// infinities), as in PyTorch and ml_dtypes. F4, F6_E2M3 and F6_E3M2 are
// packed sub-byte types: a tensor's bytes are numel * bits / 8. kBytes is the
// wire's variable-length BYTES, which no checkpoint holds.
enum class DType {
  kBool,
  kU8,
  kI8,
  kU16,
  kI16,
  kU32,
  kI32,
  kU64,
  kI64,
  kF16,
  kBF16,
  kF32,
  kF64,
  kC64,
  kF8E4M3,
  kF8E5M2,
  kF8E8M0,
  kF6E2M3,
  kF6E3M2,
  kF4,
  kBytes,
};

enum class DtypeKind : uint8_t { kBool, kInteger, kFloat, kComplex, kBytes };

struct DtypeRow {
  DType dtype;
  DtypeKind kind;
  int bits;  // 0 for variable-length BYTES.
  absl::string_view checkpoint_name;
  absl::string_view wire_name;
  absl::string_view wire_contents_field;
  absl::string_view config_name;
  absl::string_view torch_name;
  bool torch_exact;
  absl::string_view torch_storage_class;
  std::optional<ElementType> element;
  // The rest only for rows with an element.
  absl::string_view element_name;
  std::array<absl::string_view, 4> element_aliases;  // Lower case.
  bool compute;
  float fp8_max_finite;
};

// clang-format off
inline constexpr DtypeRow kDtypeRows[] = {
    // dtype, kind, bits, checkpoint, wire, wire contents, config, torch,
    // exact, storage class; then, for codec elements: element, element name,
    // aliases, compute, fp8_max_finite.
    {DType::kBool,   DtypeKind::kBool,    8,  "BOOL",    "BOOL",   "bool_contents",   "TYPE_BOOL",   "Bool",     true,  "torch.BoolStorage", {}, "", {}, false, 0},
    {DType::kU8,     DtypeKind::kInteger, 8,  "U8",      "UINT8",  "uint_contents",   "TYPE_UINT8",  "Byte",     true,  "torch.ByteStorage", {}, "", {}, false, 0},
    {DType::kI8,     DtypeKind::kInteger, 8,  "I8",      "INT8",   "int_contents",    "TYPE_INT8",   "Char",     true,  "torch.CharStorage", {}, "", {}, false, 0},
    {DType::kU16,    DtypeKind::kInteger, 16, "U16",     "UINT16", "uint_contents",   "TYPE_UINT16", "",         true,  "", {}, "", {}, false, 0},
    {DType::kI16,    DtypeKind::kInteger, 16, "I16",     "INT16",  "int_contents",    "TYPE_INT16",  "Short",    true,  "torch.ShortStorage", {}, "", {}, false, 0},
    {DType::kU32,    DtypeKind::kInteger, 32, "U32",     "UINT32", "uint_contents",   "TYPE_UINT32", "",         true,  "", {}, "", {}, false, 0},
    {DType::kI32,    DtypeKind::kInteger, 32, "I32",     "INT32",  "int_contents",    "TYPE_INT32",  "Int",      true,  "torch.IntStorage", {}, "", {}, false, 0},
    {DType::kU64,    DtypeKind::kInteger, 64, "U64",     "UINT64", "uint64_contents", "TYPE_UINT64", "",         true,  "", {}, "", {}, false, 0},
    {DType::kI64,    DtypeKind::kInteger, 64, "I64",     "INT64",  "int64_contents",  "TYPE_INT64",  "Long",     true,  "torch.LongStorage", {}, "", {}, false, 0},
    {DType::kF16,    DtypeKind::kFloat,   16, "F16",     "FP16",   "",                "TYPE_FP16",   "Half",     true,  "torch.HalfStorage",
     ElementType::kF16, "F16", {"float16", "fp16", "half"}, true, 0},
    {DType::kBF16,   DtypeKind::kFloat,   16, "BF16",    "BF16",   "",                "TYPE_BF16",   "BFloat16", true,  "torch.BFloat16Storage",
     ElementType::kBF16, "BF16", {"bfloat16"}, true, 0},
    {DType::kF32,    DtypeKind::kFloat,   32, "F32",     "FP32",   "fp32_contents",   "TYPE_FP32",   "Float",    true,  "torch.FloatStorage",
     ElementType::kF32, "F32", {"float32", "fp32", "float"}, true, 0},
    {DType::kF64,    DtypeKind::kFloat,   64, "F64",     "FP64",   "fp64_contents",   "TYPE_FP64",   "Double",   true,  "torch.DoubleStorage", {}, "", {}, false, 0},
    {DType::kC64,    DtypeKind::kComplex, 64, "C64",     "",       "",                "",            "",         true,  "", {}, "", {}, false, 0},
    {DType::kF8E4M3, DtypeKind::kFloat,   8,  "F8_E4M3", "",       "",                "",            "Byte",     false, "",
     ElementType::kF8E4M3FN, "F8_E4M3FN", {"f8_e4m3", "float8_e4m3fn", "fp8_e4m3fn", "e4m3fn"}, false, 448.0f},
    {DType::kF8E5M2, DtypeKind::kFloat,   8,  "F8_E5M2", "",       "",                "",            "Byte",     false, "",
     ElementType::kF8E5M2, "F8_E5M2", {"float8_e5m2", "fp8_e5m2", "e5m2"}, false, 57344.0f},
    {DType::kF8E8M0, DtypeKind::kFloat,   8,  "F8_E8M0", "",       "",                "",            "",         true,  "", {}, "", {}, false, 0},
    {DType::kF6E2M3, DtypeKind::kFloat,   6,  "F6_E2M3", "",       "",                "",            "",         true,  "", {}, "", {}, false, 0},
    {DType::kF6E3M2, DtypeKind::kFloat,   6,  "F6_E3M2", "",       "",                "",            "",         true,  "", {}, "", {}, false, 0},
    {DType::kF4,     DtypeKind::kFloat,   4,  "F4",      "",       "",                "",            "",         true,  "", {}, "", {}, false, 0},
    {DType::kBytes,  DtypeKind::kBytes,   0,  "",        "BYTES",  "bytes_contents",  "TYPE_STRING", "",         true,  "", {}, "", {}, false, 0},
};
// clang-format on

inline constexpr int kNumDTypes =
    static_cast<int>(sizeof(kDtypeRows) / sizeof(kDtypeRows[0]));

namespace dtype_table_internal {
constexpr int CountElementRows() {
  int count = 0;
  for (const DtypeRow& row : kDtypeRows) count += row.element.has_value();
  return count;
}
}  // namespace dtype_table_internal

// How many ElementTypes (codec ids) there are: one per row with an element.
inline constexpr int kNumElementTypes =
    dtype_table_internal::CountElementRows();

// The row of `dtype` (rows are in enum order: checked below).
constexpr const DtypeRow& RowOf(DType dtype) {
  return kDtypeRows[static_cast<int>(dtype)];
}

// The row whose codec element is `type`.
constexpr const DtypeRow& RowOf(ElementType type) {
  for (const DtypeRow& row : kDtypeRows) {
    if (row.element == type) return row;
  }
  return kDtypeRows[0];  // Unreachable: checked below.
}

namespace dtype_table_internal {

constexpr bool RowsAreInEnumOrder() {
  for (int i = 0; i < kNumDTypes; ++i) {
    if (static_cast<int>(kDtypeRows[i].dtype) != i) return false;
  }
  return true;
}

constexpr bool EachElementTypeHasOneRow() {
  int element_rows = 0;
  for (const DtypeRow& row : kDtypeRows) {
    if (!row.element.has_value()) continue;
    ++element_rows;
    const int id = static_cast<int>(*row.element);
    if (id < 0 || id >= kNumElementTypes) return false;
    if (row.element_name.empty() || row.bits % 8 != 0) return false;
  }
  for (int id = 0; id < kNumElementTypes; ++id) {
    int rows = 0;
    for (const DtypeRow& row : kDtypeRows) {
      rows += row.element == static_cast<ElementType>(id) ? 1 : 0;
    }
    if (rows != 1) return false;
  }
  return element_rows == kNumElementTypes;
}

}  // namespace dtype_table_internal

static_assert(dtype_table_internal::RowsAreInEnumOrder(),
              "kDtypeRows must list the DTypes in enum order");
static_assert(dtype_table_internal::EachElementTypeHasOneRow(),
              "every ElementType needs exactly one row with its name");

// All rows, in DType order.
constexpr absl::Span<const DtypeRow> AllDtypeRows() { return kDtypeRows; }

// Lookups by name, each exact (case-sensitive, as the vocabulary spells it).
// Empty names never match. InvalidArgument naming `name` and the vocabulary
// ("unknown dtype 'X'", "unknown datatype 'X' ...") when no row has it.
absl::StatusOr<const DtypeRow*> FindByCheckpointName(absl::string_view name);
absl::StatusOr<const DtypeRow*> FindByWireName(absl::string_view name);
absl::StatusOr<const DtypeRow*> FindByConfigName(absl::string_view name);
absl::StatusOr<const DtypeRow*> FindByTorchStorageClass(absl::string_view name);
// The canonical element name ("F8_E4M3FN"), exactly; no aliases.
absl::StatusOr<ElementType> ElementTypeFromCanonicalName(
    absl::string_view name);

// The element names in ElementType order: "F32, F16, BF16, F8_E4M3FN,
// F8_E5M2", for messages.
std::string ElementTypeNameList();

}  // namespace castserve::casting

#endif  // CASTSERVE_CASTING_CODEC_DTYPE_TABLE_H_
