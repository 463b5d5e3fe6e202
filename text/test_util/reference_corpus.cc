#include "text/test_util/reference_corpus.h"

#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace castserve::text {

std::vector<std::string> ReadLines(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::vector<std::string> lines;
  for (std::string line; std::getline(file, line);) lines.push_back(line);
  return lines;
}

std::string Unescape(absl::string_view line) {
  std::string out;
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] != '\\' || i + 1 >= line.size()) {
      out.push_back(line[i]);
    } else if (line[i + 1] == '\\') {
      out.push_back('\\');
      ++i;
    } else {  // \xHH
      uint32_t byte = 0;
      absl::SimpleHexAtoi(line.substr(i + 2, 2), &byte);
      out.push_back(static_cast<char>(byte));
      i += 3;
    }
  }
  return out;
}

std::vector<std::string> ReadCorpus() {
  std::vector<std::string> texts;
  for (const std::string& line :
       ReadLines(absl::StrCat(kReferencesFolder, "corpus.txt"))) {
    texts.push_back(Unescape(line));
  }
  return texts;
}

std::vector<int64_t> ParseIds(absl::string_view line) {
  std::vector<int64_t> ids;
  for (absl::string_view field : absl::StrSplit(line, ' ', absl::SkipEmpty())) {
    int64_t id = -1;
    absl::SimpleAtoi(field, &id);
    ids.push_back(id);
  }
  return ids;
}

std::vector<std::vector<int64_t>> ReadIdsFile(const std::string& path) {
  std::vector<std::vector<int64_t>> all;
  for (const std::string& line : ReadLines(path)) all.push_back(ParseIds(line));
  return all;
}

std::vector<std::vector<int64_t>> ReadReferenceIds(const std::string& name) {
  return ReadIdsFile(absl::StrCat(kReferencesFolder, name, ".ids"));
}

}  // namespace castserve::text
