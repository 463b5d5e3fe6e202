#include "platform/json_parser.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "platform/sanitized_text.h"

namespace castserve::platform {
namespace {

using Json = nlohmann::json;

// Error text taken from the input (a token the parser stopped at) is cut
// here, so a 50 MB unterminated string cannot become a 50 MB message.
constexpr size_t kMaxMessageBytes = 300;

// Builds the document from the library parser's SAX events, as the
// library's own builder does, plus the depth and duplicate-key checks.
// Containers being filled are held by pointer: an array's element is not
// moved while it is open (nothing is appended to its parent until it
// closes) and map nodes never move.
class BoundedDocumentBuilder final : public nlohmann::json_sax<Json> {
 public:
  BoundedDocumentBuilder(Json& root, int max_depth)
      : root_(root), max_depth_(max_depth) {}

  const std::string& error() const { return error_; }

  bool null() override { return Put(nullptr) != nullptr; }
  bool boolean(bool value) override { return Put(value) != nullptr; }
  bool number_integer(number_integer_t value) override {
    return Put(value) != nullptr;
  }
  bool number_unsigned(number_unsigned_t value) override {
    return Put(value) != nullptr;
  }
  bool number_float(number_float_t value, const string_t&) override {
    return Put(value) != nullptr;
  }
  bool string(string_t& value) override {
    return Put(std::move(value)) != nullptr;
  }
  bool binary(binary_t&) override {
    error_ = "invalid JSON: binary value";  // Only CBOR & co. have these.
    return false;
  }
  bool start_object(std::size_t) override { return Open(Json::object()); }
  bool start_array(std::size_t) override { return Open(Json::array()); }
  bool end_object() override { return Close(); }
  bool end_array() override { return Close(); }

  bool key(string_t& name) override {
    auto& members = open_.back()->get_ref<Json::object_t&>();
    auto [it, inserted] = members.try_emplace(std::move(name));
    if (!inserted) {
      error_ = Truncated(
          absl::StrCat("invalid JSON: duplicate key \"", it->first, "\""));
      return false;
    }
    member_ = &it->second;
    return true;
  }

  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::json::exception& error) override {
    // what(): "[json.exception.parse_error.101] parse error at line 1,
    // column 17: syntax error ..." or "[json.exception.out_of_range.406]
    // number overflow parsing '1e400'"; `position` counts from 1.
    absl::string_view what = error.what();
    if (const size_t id_end = what.find("] "); id_end != what.npos) {
      what.remove_prefix(id_end + 2);
    }
    if (absl::StartsWith(what, "parse error")) {
      if (const size_t colon = what.find(": "); colon != what.npos) {
        what.remove_prefix(colon + 2);
      }
    }
    error_ = Truncated(absl::StrCat(
        "invalid JSON at byte ", position > 0 ? position - 1 : 0, ": ", what));
    return false;
  }

 private:
  // The parser quotes the bytes it last read, which may be anything.
  static std::string Truncated(const std::string& message) {
    return SanitizeText(message, kMaxMessageBytes);
  }

  // Stores `value` where the parser is: the root, the next element of the
  // open array, or the member whose key came last. Returns where it went.
  Json* Put(Json&& value) {
    if (open_.empty()) {
      root_ = std::move(value);
      return &root_;
    }
    Json& parent = *open_.back();
    if (parent.is_array()) {
      auto& items = parent.get_ref<Json::array_t&>();
      items.push_back(std::move(value));
      return &items.back();
    }
    *member_ = std::move(value);
    return member_;
  }

  bool Open(Json&& container) {
    if (open_.size() >= static_cast<size_t>(max_depth_)) {
      error_ = absl::StrCat("invalid JSON: nesting deeper than ", max_depth_);
      return false;
    }
    open_.push_back(Put(std::move(container)));
    return true;
  }

  bool Close() {
    open_.pop_back();
    return true;
  }

  Json& root_;
  const int max_depth_;
  std::vector<Json*> open_;  // The containers being filled, outermost first.
  Json* member_ = nullptr;   // The member the next value of an object fills.
  std::string error_;
};

}  // namespace

absl::StatusOr<nlohmann::json> ParseJson(absl::string_view text,
                                         const JsonLimits& limits) {
  if (text.size() > limits.max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("JSON text of ", text.size(),
                     " bytes exceeds the limit of ", limits.max_bytes));
  }
  Json root;
  BoundedDocumentBuilder builder(root, limits.max_depth);
  const bool ok = Json::sax_parse(text.data(), text.data() + text.size(),
                                  &builder, Json::input_format_t::json,
                                  /*strict=*/true, /*ignore_comments=*/false);
  if (!ok) {
    return absl::InvalidArgumentError(
        builder.error().empty() ? "invalid JSON" : builder.error());
  }
  return std::move(root);  // Not a copy of the whole document.
}

absl::string_view JsonTypeName(const nlohmann::json& value) {
  switch (value.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
    case Json::value_t::number_float:
      return "a number";
    case Json::value_t::string:
      return "a string";
    case Json::value_t::array:
      return "an array";
    case Json::value_t::object:
      return "an object";
    default:
      return "not JSON";  // binary, discarded: never from ParseJson.
  }
}

}  // namespace castserve::platform
