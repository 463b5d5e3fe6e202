// Test helpers: at::Tensors to and from safetensors files, and scratch
// folders, so that tests build small checkpoints in code.
#ifndef CASTSERVE_MODELS_TEST_UTIL_TENSOR_FILES_H_
#define CASTSERVE_MODELS_TEST_UTIL_TENSOR_FILES_H_

#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace castserve::models::test_util {

// Writes `tensors` (CPU; F32, F16, BF16, I64, I32, U8 or Bool) to `path` as a
// safetensors file, in name order.
absl::Status WriteSafetensors(const std::string& path,
                              const std::map<std::string, at::Tensor>& tensors);

// Reads every tensor of the safetensors file `path` (F32, F16, BF16, I64,
// I32, U8, Bool) into owned CPU tensors.
absl::StatusOr<std::map<std::string, at::Tensor>> ReadSafetensors(
    const std::string& path);

// A new empty folder under $TEST_TMPDIR (or /tmp), named after `name`.
std::string MakeScratchDir(absl::string_view name);

// max |a - b| / max(max |b|, 1e-6): the error relative to the reference's
// scale. Both are compared in f32.
double RelativeMaxError(const at::Tensor& a, const at::Tensor& reference);
// Cosine similarity of the flattened tensors, in f64.
double CosineSimilarity(const at::Tensor& a, const at::Tensor& b);

// The text names (StorageFormat::ToString, e.g. "F8_E4M3FN:per_row") of every
// storage format that casts, i.e. casting::AllStorageFormats() but F32: the
// <FORMAT> of the fixtures' roundtrip.<FORMAT>.output.* reference tensors.
std::vector<std::string> CastFormatNames();

}  // namespace castserve::models::test_util

#endif  // CASTSERVE_MODELS_TEST_UTIL_TENSOR_FILES_H_
