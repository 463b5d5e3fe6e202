#include "casting/formats/test_util/safetensors_writer.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace castserve::casting::test_util {

std::string MakeHeaderJson(const std::vector<HeaderTensor>& tensors,
                           const std::map<std::string, std::string>& metadata) {
  std::vector<std::string> parts;
  if (!metadata.empty()) {
    std::vector<std::string> items;
    for (const auto& [key, value] : metadata) {
      items.push_back(absl::StrCat("\"", key, "\":\"", value, "\""));
    }
    parts.push_back(
        absl::StrCat("\"__metadata__\":{", absl::StrJoin(items, ","), "}"));
  }
  for (const HeaderTensor& t : tensors) {
    parts.push_back(absl::StrCat("\"", t.name, "\":{\"dtype\":\"", t.dtype,
                                 "\",\"shape\":[", absl::StrJoin(t.shape, ","),
                                 "],\"data_offsets\":[", t.begin, ",", t.end,
                                 "]}"));
  }
  return absl::StrCat("{", absl::StrJoin(parts, ","), "}");
}

absl::Status WriteSafetensorsFile(const std::string& path,
                                  const std::string& header_json,
                                  const std::string& data,
                                  uint64_t file_size_bytes) {
  std::string prefix(8, '\0');
  uint64_t length = header_json.size();
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<char>(length >> (8 * i));
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << prefix << header_json << data;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  const uint64_t written = 8 + header_json.size() + data.size();
  if (file_size_bytes > written &&
      truncate(path.c_str(), static_cast<off_t>(file_size_bytes)) != 0) {
    return absl::InternalError(absl::StrCat("cannot extend ", path));
  }
  return absl::OkStatus();
}

absl::Status WriteTextFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

}  // namespace castserve::casting::test_util
