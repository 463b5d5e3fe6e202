#ifndef CASTSERVE_CASTING_TEST_UTIL_SAFETENSORS_WRITER_H_
#define CASTSERVE_CASTING_TEST_UTIL_SAFETENSORS_WRITER_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace castserve::casting::test_util {

// A header entry as written, free to be wrong (tests write malformed files).
struct HeaderTensor {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // Relative to the data region.
  uint64_t end = 0;
};

// The JSON header text for `tensors` (and `__metadata__` if non-empty).
std::string MakeHeaderJson(
    const std::vector<HeaderTensor>& tensors,
    const std::map<std::string, std::string>& metadata = {});

// Writes the 8-byte length of `header_json`, the header, then `data`. If
// `file_size_bytes` is larger than that, the file is extended with ftruncate
// (sparse: no data blocks are written).
absl::Status WriteSafetensorsFile(const std::string& path,
                                  const std::string& header_json,
                                  const std::string& data,
                                  uint64_t file_size_bytes = 0);

// Writes `text` to `path`.
absl::Status WriteTextFile(const std::string& path, const std::string& text);

}  // namespace castserve::casting::test_util

#endif  // CASTSERVE_CASTING_TEST_UTIL_SAFETENSORS_WRITER_H_
