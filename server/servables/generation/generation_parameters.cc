#include "server/servables/generation/generation_parameters.h"

#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "platform/json_parser.h"
#include "server/servables/generation/generation_text.h"
#include "text/unicode/unicode.h"

namespace castserve {
namespace {

using inference::InferParameter;

// A stop list or an id list: a flat array of a few short items.
constexpr platform::JsonLimits kListLimits{2, size_t{64} << 10};

absl::string_view TypeName(const InferParameter& value) {
  switch (value.parameter_choice_case()) {
    case InferParameter::kBoolParam:
      return "a bool";
    case InferParameter::kInt64Param:
    case InferParameter::kUint64Param:
      return "an integer";
    case InferParameter::kStringParam:
      return "a string";
    case InferParameter::kDoubleParam:
      return "a number";
    default:
      return "nothing";
  }
}

absl::Status WrongType(absl::string_view name, absl::string_view expected,
                       const InferParameter& value) {
  return absl::InvalidArgumentError(absl::StrCat(
      "parameter '", name, "' must be ", expected, ", got ", TypeName(value)));
}

absl::Status OutOfRange(absl::string_view name, absl::string_view range,
                        absl::string_view got) {
  return absl::InvalidArgumentError(
      absl::StrCat("parameter '", name, "' must be ", range, ", got ", got));
}

absl::StatusOr<int64_t> IntegerOf(absl::string_view name,
                                  const InferParameter& value) {
  if (value.has_int64_param()) return value.int64_param();
  if (value.has_uint64_param()) {
    if (value.uint64_param() >
        static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return OutOfRange(name, "within int64",
                        absl::StrCat(value.uint64_param()));
    }
    return static_cast<int64_t>(value.uint64_param());
  }
  return WrongType(name, "an integer", value);
}

absl::StatusOr<double> NumberOf(absl::string_view name,
                                const InferParameter& value) {
  if (value.has_double_param()) return value.double_param();
  if (value.has_int64_param()) return static_cast<double>(value.int64_param());
  return WrongType(name, "a number", value);
}

absl::StatusOr<bool> BoolOf(absl::string_view name,
                            const InferParameter& value) {
  if (value.has_bool_param()) return value.bool_param();
  return WrongType(name, "a bool", value);
}

absl::Status CheckStopString(const std::string& stop) {
  if (stop.empty() || stop.size() > kMaxStopStringBytes) {
    return OutOfRange(
        "stop", absl::StrCat("strings of 1..", kMaxStopStringBytes, " bytes"),
        absl::StrCat(stop.size(), " bytes"));
  }
  if (!text::IsValidUtf8(stop)) {
    return absl::InvalidArgumentError("parameter 'stop' must be valid UTF-8");
  }
  return absl::OkStatus();
}

// "stop": one string, or a JSON array of strings.
absl::StatusOr<std::vector<std::string>> StopStringsOf(
    const InferParameter& value) {
  if (!value.has_string_param()) return WrongType("stop", "a string", value);
  const std::string& text = value.string_param();
  std::vector<std::string> stops;
  absl::StatusOr<nlohmann::json> json =
      text.empty() || text.front() != '['
          ? absl::InvalidArgumentError("not an array")
          : platform::ParseJson(text, kListLimits);
  if (!json.ok() || !json->is_array()) {
    stops.push_back(text);  // One stop string.
  } else {
    if (json->size() > kMaxStopStrings) {
      return OutOfRange("stop",
                        absl::StrCat("at most ", kMaxStopStrings, " strings"),
                        absl::StrCat(json->size()));
    }
    for (const nlohmann::json& item : *json) {
      if (!item.is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "parameter 'stop' must be a string or a JSON array of strings; "
            "the array holds ",
            platform::JsonTypeName(item)));
      }
      stops.push_back(item.get<std::string>());
    }
  }
  for (const std::string& stop : stops) {
    if (absl::Status valid = CheckStopString(stop); !valid.ok()) return valid;
  }
  return stops;
}

// "stop_token_ids": a JSON array of ids, or one id as an integer.
absl::StatusOr<std::vector<int64_t>> StopTokenIdsOf(
    const InferParameter& value) {
  std::vector<int64_t> ids;
  if (value.has_int64_param() || value.has_uint64_param()) {
    absl::StatusOr<int64_t> id = IntegerOf("stop_token_ids", value);
    if (!id.ok()) return id.status();
    ids.push_back(*id);
  } else if (value.has_string_param()) {
    absl::StatusOr<nlohmann::json> json =
        platform::ParseJson(value.string_param(), kListLimits);
    if (!json.ok() || !json->is_array()) {
      return absl::InvalidArgumentError(
          "parameter 'stop_token_ids' must be a JSON array of integers");
    }
    if (json->size() > kMaxStopTokenIds) {
      return OutOfRange("stop_token_ids",
                        absl::StrCat("at most ", kMaxStopTokenIds, " ids"),
                        absl::StrCat(json->size()));
    }
    for (const nlohmann::json& item : *json) {
      if (!item.is_number_integer()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "parameter 'stop_token_ids' must be a JSON array of integers; "
            "the array holds ",
            platform::JsonTypeName(item)));
      }
      ids.push_back(item.get<int64_t>());
    }
  } else {
    return WrongType("stop_token_ids", "a JSON array string or an integer",
                     value);
  }
  return ids;  // Inside the vocabulary: models::CheckGenerationRequest.
}

// The sampling parameter of type number named `name`; null for others.
double* NumberField(const std::string& name, models::SamplingParams& sampling) {
  if (name == "temperature") return &sampling.temperature;
  if (name == "top_p") return &sampling.top_p;
  if (name == "repetition_penalty") return &sampling.repetition_penalty;
  if (name == "presence_penalty") return &sampling.presence_penalty;
  if (name == "frequency_penalty") return &sampling.frequency_penalty;
  return nullptr;
}

// One parameter into `out`; keys that are not generation parameters are
// left alone.
absl::Status ParseOne(const std::string& name, const InferParameter& value,
                      GenerationParameters& out) {
  if (name == "max_tokens") {
    absl::StatusOr<int64_t> n = IntegerOf(name, value);
    if (!n.ok()) return n.status();
    out.max_tokens = *n;  // Its range: models::CheckGenerationRequest.
  } else if (double* field = NumberField(name, out.sampling)) {
    absl::StatusOr<double> x = NumberOf(name, value);
    if (!x.ok()) return x.status();
    *field = *x;  // Its range: the check's.
  } else if (name == "top_k" || name == "top_logprobs" || name == "seed") {
    absl::StatusOr<int64_t> n = IntegerOf(name, value);
    if (!n.ok()) return n.status();
    if (name == "top_k") out.sampling.top_k = *n;  // Range: the check's.
    if (name == "top_logprobs") out.sampling.top_logprobs = *n;
    if (name == "seed") {
      // The seed's bits are a uint64's; a negative one means nothing.
      if (*n < 0) return OutOfRange(name, ">= 0", absl::StrCat(*n));
      out.sampling.seed = static_cast<uint64_t>(*n);
    }
  } else if (name == "stop") {
    absl::StatusOr<std::vector<std::string>> stops = StopStringsOf(value);
    if (!stops.ok()) return stops.status();
    out.stop = *std::move(stops);
  } else if (name == "stop_token_ids") {
    absl::StatusOr<std::vector<int64_t>> ids = StopTokenIdsOf(value);
    if (!ids.ok()) return ids.status();
    out.stop_token_ids = *std::move(ids);
  } else if (name == "ignore_eos" || name == "logprobs" ||
             name == "triton_enable_empty_final_response") {
    absl::StatusOr<bool> flag = BoolOf(name, value);
    if (!flag.ok()) return flag.status();
    (name == "ignore_eos" ? out.ignore_eos
     : name == "logprobs" ? out.sampling.logprobs
                          : out.empty_final_response) = *flag;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<GenerationParameters> ParseGenerationParameters(
    const InferParameters& parameters) {
  GenerationParameters parsed;
  for (const auto& [name, value] : parameters) {
    if (absl::Status valid = ParseOne(name, value, parsed); !valid.ok()) {
      return valid;
    }
  }
  return parsed;
}

}  // namespace castserve
