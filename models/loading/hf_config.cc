#include "models/loading/hf_config.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "platform/json_parser.h"

namespace castserve::models {

using Json = nlohmann::json;

namespace {

// The text of `path`, at most kMaxHfConfigBytes: NotFound and DataLoss as
// they are, any other failure FailedPrecondition.
absl::StatusOr<std::string> ReadConfigText(const std::string& path,
                                           platform::FileSystem* file_system) {
  absl::StatusOr<std::string> text =
      file_system->ReadFile(path, kMaxHfConfigBytes);
  if (text.ok()) return text;
  const absl::StatusCode code = text.status().code();
  if (code == absl::StatusCode::kNotFound ||
      code == absl::StatusCode::kDataLoss) {
    return text.status();
  }
  return absl::FailedPreconditionError(text.status().message());
}

}  // namespace

absl::StatusOr<HfConfig> HfConfig::Load(const std::string& path,
                                        platform::FileSystem* file_system) {
  absl::StatusOr<std::string> text = ReadConfigText(path, file_system);
  if (!text.ok()) return text.status();
  return Parse(*text, path);
}

absl::StatusOr<std::vector<HfConfig>> HfConfig::LoadList(
    const std::string& path, platform::FileSystem* file_system) {
  absl::StatusOr<std::string> text = ReadConfigText(path, file_system);
  if (!text.ok()) return text.status();
  platform::JsonLimits limits;
  limits.max_bytes = kMaxHfConfigBytes;
  absl::StatusOr<Json> parsed = platform::ParseJson(*text, limits);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", parsed.status().message()));
  }
  if (!parsed->is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": expected a JSON list, got ", platform::JsonTypeName(*parsed)));
  }
  auto document = std::make_shared<const Json>(*std::move(parsed));
  std::vector<HfConfig> items;
  for (size_t i = 0; i < document->size(); ++i) {
    const Json& item = (*document)[i];
    if (!item.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, "[", i, "]: expected a JSON object, got ",
                       platform::JsonTypeName(item)));
    }
    // Shares ownership of the whole document, points at the item.
    items.push_back(HfConfig(std::shared_ptr<const Json>(document, &item),
                             absl::StrCat(path, "[", i, "]")));
  }
  return items;
}

absl::StatusOr<HfConfig> HfConfig::Parse(absl::string_view json,
                                         absl::string_view label) {
  platform::JsonLimits limits;
  limits.max_bytes = kMaxHfConfigBytes;
  absl::StatusOr<Json> parsed = platform::ParseJson(json, limits);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": ", parsed.status().message()));
  }
  if (!parsed->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": expected a JSON object, got ",
                     platform::JsonTypeName(*parsed)));
  }
  return HfConfig(std::make_shared<const Json>(*std::move(parsed)),
                  std::string(label));
}

HfConfig::HfConfig(std::shared_ptr<const Json> object, std::string label)
    : object_(std::move(object)), label_(std::move(label)) {}

std::string HfConfig::model_type() const {
  const Json* value = Lookup("model_type");
  return value != nullptr && value->is_string()
             ? value->get_ref<const std::string&>()
             : "";
}

const Json* HfConfig::Lookup(absl::string_view key) const {
  auto it = object_->find(std::string_view(key.data(), key.size()));
  if (it == object_->end() || it->is_null()) return nullptr;
  return &*it;
}

bool HfConfig::Has(absl::string_view key) const {
  return Lookup(key) != nullptr;
}

std::vector<std::string> HfConfig::Keys() const {
  std::vector<std::string> keys;
  for (const auto& [key, value] : object_->items()) {
    if (!value.is_null()) keys.push_back(key);
  }
  return keys;  // nlohmann::json's objects are std::maps: sorted.
}

bool HfConfig::IsEmpty(absl::string_view key) const {
  const Json* value = Lookup(key);
  if (value == nullptr) return false;
  if (value->is_string()) return value->get_ref<const std::string&>().empty();
  return (value->is_object() || value->is_array()) && value->empty();
}

absl::Status HfConfig::Missing(absl::string_view key) const {
  return absl::NotFoundError(
      absl::StrCat(label_, ": missing required key '", key, "'"));
}

absl::Status HfConfig::WrongType(absl::string_view key,
                                 absl::string_view expected) const {
  return absl::InvalidArgumentError(
      absl::StrCat(label_, ": key '", key, "' is not ", expected));
}

namespace {

// An integer (no fraction, no exponent) within int64_t.
bool ToInt(const Json& value, int64_t* out) {
  if (const auto* u = value.get_ptr<const Json::number_unsigned_t*>()) {
    if (*u > static_cast<uint64_t>(INT64_MAX)) return false;
    *out = static_cast<int64_t>(*u);
    return true;
  }
  if (const auto* i = value.get_ptr<const Json::number_integer_t*>()) {
    *out = *i;
    return true;
  }
  return false;
}

bool ToDouble(const Json& value, double* out) {
  if (!value.is_number()) return false;
  *out = value.get<double>();
  return true;
}

}  // namespace

absl::StatusOr<int64_t> HfConfig::GetInt(absl::string_view key) const {
  const Json* value = Lookup(key);
  if (value == nullptr) return Missing(key);
  int64_t out = 0;
  if (!ToInt(*value, &out)) return WrongType(key, "an integer");
  return out;
}

absl::StatusOr<double> HfConfig::GetDouble(absl::string_view key) const {
  const Json* value = Lookup(key);
  if (value == nullptr) return Missing(key);
  double out = 0;
  if (!ToDouble(*value, &out)) return WrongType(key, "a number");
  return out;
}

absl::StatusOr<bool> HfConfig::GetBool(absl::string_view key) const {
  const Json* value = Lookup(key);
  if (value == nullptr) return Missing(key);
  if (!value->is_boolean()) return WrongType(key, "a boolean");
  return value->get<bool>();
}

absl::StatusOr<std::string> HfConfig::GetString(absl::string_view key) const {
  const Json* value = Lookup(key);
  if (value == nullptr) return Missing(key);
  if (!value->is_string()) return WrongType(key, "a string");
  return value->get_ref<const std::string&>();
}

absl::StatusOr<HfConfig> HfConfig::GetObject(absl::string_view key) const {
  const Json* value = Lookup(key);
  if (value == nullptr) return Missing(key);
  if (!value->is_object()) return WrongType(key, "an object");
  // Shares ownership of the whole document, points at the member.
  return HfConfig(std::shared_ptr<const Json>(object_, value),
                  absl::StrCat(label_, ":", key));
}

absl::StatusOr<std::vector<std::string>> HfConfig::GetStringList(
    absl::string_view key) const {
  const Json* value = Lookup(key);
  if (value == nullptr) return Missing(key);
  std::vector<std::string> out;
  if (!value->is_array()) return WrongType(key, "a list of strings");
  for (const Json& item : *value) {
    if (!item.is_string()) return WrongType(key, "a list of strings");
    out.push_back(item.get_ref<const std::string&>());
  }
  return out;
}

absl::StatusOr<std::vector<int64_t>> HfConfig::GetIntList(
    absl::string_view key) const {
  const Json* value = Lookup(key);
  if (value == nullptr) return Missing(key);
  if (!value->is_array()) return WrongType(key, "a list of integers");
  std::vector<int64_t> out;
  for (const Json& item : *value) {
    int64_t number = 0;
    if (!ToInt(item, &number)) return WrongType(key, "a list of integers");
    out.push_back(number);
  }
  return out;
}

absl::StatusOr<std::vector<double>> HfConfig::GetDoubleList(
    absl::string_view key) const {
  const Json* value = Lookup(key);
  if (value == nullptr) return Missing(key);
  if (!value->is_array()) return WrongType(key, "a list of numbers");
  std::vector<double> out;
  for (const Json& item : *value) {
    double number = 0;
    if (!ToDouble(item, &number)) return WrongType(key, "a list of numbers");
    out.push_back(number);
  }
  return out;
}

namespace {

const ConfigSizeLimit* FindSizeLimit(absl::string_view key) {
  for (const ConfigSizeLimit& limit : kConfigSizeLimits) {
    if (key == limit.key) return &limit;
  }
  return nullptr;
}

constexpr int64_t MaxSize(std::string_view key) {
  for (const ConfigSizeLimit& limit : kConfigSizeLimits) {
    if (key == limit.key) return limit.max;
  }
  return 0;
}

// The products of sizes that models/ builds from, at every limit at once:
// they must stay far inside int64_t (and their f32 bytes too), so that no
// shape, element count or byte count computed from a checked config
// overflows.
constexpr int64_t kMaxHidden = MaxSize("hidden_size");
constexpr int64_t kMaxTableRows =
    std::max({MaxSize("vocab_size"), MaxSize("max_position_embeddings"),
              MaxSize("image_size") * MaxSize("image_size")});
constexpr int64_t kMaxProjectionFeatures = std::max(
    {MaxSize("intermediate_size"),
     MaxSize("num_attention_heads") * MaxSize("head_dim"), 3 * kMaxHidden});
constexpr int64_t kMaxLayerParameters =
    4 * kMaxHidden * kMaxProjectionFeatures +
    3 * kMaxHidden * MaxSize("intermediate_size");
static_assert(kMaxTableRows * kMaxHidden < (int64_t{1} << 48),
              "an embedding table's elements must fit with room to spare");
static_assert(MaxSize("num_hidden_layers") * kMaxLayerParameters <
                  (int64_t{1} << 58),
              "a model's f32 bytes must fit in int64_t");

}  // namespace

absl::StatusOr<int64_t> HfConfig::GetSize(absl::string_view key) const {
  const ConfigSizeLimit* limit = FindSizeLimit(key);
  if (limit == nullptr) {
    return absl::InternalError(
        absl::StrCat("config key '", key, "' has no size limit"));
  }
  absl::StatusOr<int64_t> value = GetInt(key);
  if (!value.ok()) return value;
  if (*value < limit->min || *value > limit->max) {
    return absl::InvalidArgumentError(
        absl::StrCat(label_, ": ", key, " is ", *value, ", outside [",
                     limit->min, ", ", limit->max, "]"));
  }
  return value;
}

absl::StatusOr<int64_t> HfConfig::GetSize(absl::string_view key,
                                          int64_t default_value) const {
  return Has(key) ? GetSize(key) : default_value;
}

absl::StatusOr<int64_t> HfConfig::GetInt(absl::string_view key,
                                         int64_t default_value) const {
  return Has(key) ? GetInt(key) : default_value;
}

absl::StatusOr<double> HfConfig::GetDouble(absl::string_view key,
                                           double default_value) const {
  return Has(key) ? GetDouble(key) : default_value;
}

absl::StatusOr<bool> HfConfig::GetBool(absl::string_view key,
                                       bool default_value) const {
  return Has(key) ? GetBool(key) : default_value;
}

absl::StatusOr<std::string> HfConfig::GetString(
    absl::string_view key, absl::string_view default_value) const {
  return Has(key) ? GetString(key) : std::string(default_value);
}

}  // namespace castserve::models
