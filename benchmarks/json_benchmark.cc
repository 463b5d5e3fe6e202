// The JSON libraries of Debian 12 side by side in one process, on the
// documents castserve reads and writes: nlohmann/json 3.11.2 (plain, and
// through castserve's bounded builder platform/json_parser.h), RapidJSON 1.1.0
// and simdjson 3.0.1. The measurements behind the choice of one library
// (the README's "What castserve writes by hand, and why").
//
//   bazel run -c opt //benchmarks:json_benchmark -- [model.safetensors]
//
// The safetensors file defaults to models/testdata/minilm/weights/ (fetched
// by tools/fetch_minilm.sh); the other inputs are generated here. Prints,
// per document, the median milliseconds to parse it and visit every value
// (strings' bytes, numbers as int64/uint64/double), then the time to write an
// [8,128,384] FP32 output as a KServe v2 response, then what each library
// does with a too-deep, a duplicate-key, a malformed and an oversized
// document. Runs in seconds; only ratios between columns of one run mean
// anything on a shared machine.
#include <rapidjson/document.h>
#include <rapidjson/error/en.h>
#include <rapidjson/reader.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include <simdjson.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "platform/json_parser.h"

namespace castserve {
namespace {

using Json = nlohmann::json;
// nlohmann/json with float as its floating type: dump() then prints the
// shortest text that reads back as the same float.
using JsonF32 = nlohmann::basic_json<std::map, std::vector, std::string, bool,
                                     std::int64_t, std::uint64_t, float>;
// Iterative: no recursion on nesting (the recursive default overflows the
// stack on deep input). Full precision: correctly rounded doubles.
constexpr unsigned kRapidFlags =
    rapidjson::kParseIterativeFlag | rapidjson::kParseFullPrecisionFlag;

// ---- Inputs -----------------------------------------------------------------

class Random {
 public:
  uint64_t Next() {  // splitmix64
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  uint64_t Below(uint64_t n) { return Next() % n; }
  float Normal() {  // Box-Muller
    const double u = (Next() >> 11) * 0x1.0p-53 + 1e-12;
    const double v = (Next() >> 11) * 0x1.0p-53;
    return static_cast<float>(std::sqrt(-2 * std::log(u)) *
                              std::cos(6.283185307179586 * v));
  }

 private:
  uint64_t state_ = 42;
};

// The JSON header of a safetensors file, or "" if it cannot be read.
std::string SafetensorsHeader(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  unsigned char prefix[8];
  if (!in.read(reinterpret_cast<char*>(prefix), 8)) return "";
  uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = (length << 8) | prefix[i];
  if (length > (uint64_t{100} << 20)) return "";
  std::string header(length, '\0');
  if (!in.read(header.data(), static_cast<std::streamsize>(length))) return "";
  return header;
}

// A large model's header: `count` bf16 tensors named as Llama's are.
std::string LargeModelHeader(int count) {
  static const char* kSuffixes[] = {
      "input_layernorm.weight",  "self_attn.q_proj.weight",
      "self_attn.k_proj.weight", "self_attn.v_proj.weight",
      "self_attn.o_proj.weight", "post_attention_layernorm.weight",
      "mlp.gate_proj.weight",    "mlp.up_proj.weight",
      "mlp.down_proj.weight",    "self_attn.q_norm.weight"};
  std::string out = "{\"__metadata__\":{\"format\":\"pt\"}";
  uint64_t offset = 0;
  for (int i = 0; i < count; ++i) {
    const int64_t rows = 1024 + 512 * (i % 7), cols = 4096;
    const uint64_t bytes = 2 * rows * cols;
    absl::StrAppend(&out, ",\"model.layers.", i / 10, ".", kSuffixes[i % 10],
                    "\":{\"dtype\":\"BF16\",\"shape\":[", rows, ",", cols,
                    "],\"data_offsets\":[", offset, ",", offset + bytes, "]}");
    offset += bytes;
  }
  return out + "}";
}

// A byte-level BPE token: often the 'Ġ' space marker, letters, sometimes
// a non-ASCII letter, then `id` in digits (so vocab keys are unique).
std::string Token(Random& random, uint64_t id) {
  std::string token = random.Below(2) ? "\xC4\xA0" : "";  // Ġ
  const int letters = 2 + static_cast<int>(random.Below(7));
  for (int i = 0; i < letters; ++i) {
    token += static_cast<char>('a' + random.Below(26));
  }
  if (random.Below(10) == 0) token += "\xC3\xA9";  // é
  return token + std::to_string(id);               // Digits end it: unique.
}

// One side of a merge: "Ġ", "t", "Ġth", "ing".
std::string MergePart(Random& random) {
  std::string part = random.Below(2) ? "\xC4\xA0" : "";
  const int letters = 1 + static_cast<int>(random.Below(4));
  for (int i = 0; i < letters; ++i) {
    part += static_cast<char>('a' + random.Below(26));
  }
  return part;
}

// A tokenizer.json shaped as Llama 3's (about 9 MB, indented as
// `tokenizers` saves it): 256 added tokens, 128,000 vocab entries and
// 280,000 merges.
std::string TokenizerJson() {
  Random random;
  std::string out =
      "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": "
      "null,\n  \"added_tokens\": [";
  for (int i = 0; i < 256; ++i) {
    absl::StrAppend(&out, i ? "," : "", "\n    {\n      \"id\": ", 128000 + i,
                    ",\n      \"content\": \"<|reserved_special_token_", i,
                    "|>\",\n      \"single_word\": false,\n      \"lstrip\": "
                    "false,\n      \"rstrip\": false,\n      \"normalized\": "
                    "false,\n      \"special\": true\n    }");
  }
  absl::StrAppend(
      &out,
      "\n  ],\n  \"normalizer\": null,\n  \"pre_tokenizer\": {\n    \"type\": "
      "\"Sequence\",\n    \"pretokenizers\": [\n      {\n        \"type\": "
      "\"Split\",\n        \"pattern\": {\n          \"Regex\": "
      "\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+"
      "|\\\\p{N}{1,3}| "
      "?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]"
      "+|\\\\s+(?!\\\\S)|\\\\s+\"\n        },\n        \"behavior\": "
      "\"Isolated\",\n        \"invert\": false\n      },\n      {\n        "
      "\"type\": \"ByteLevel\",\n        \"add_prefix_space\": false,\n        "
      "\"trim_offsets\": true,\n        \"use_regex\": false\n      }\n    ]\n"
      "  },\n  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n"
      "    \"unk_token\": null,\n    \"ignore_merges\": true,\n    \"vocab\": "
      "{");
  for (int id = 0; id < 128000; ++id) {
    absl::StrAppend(&out, id ? "," : "", "\n      \"", Token(random, id),
                    "\": ", id);
  }
  out += "\n    },\n    \"merges\": [";
  for (int i = 0; i < 280000; ++i) {
    absl::StrAppend(&out, i ? "," : "", "\n      \"", MergePart(random), " ",
                    MergePart(random), "\"");
  }
  return out + "\n    ]\n  }\n}\n";
}

// A KServe v2 infer request as tritonclient.http sends it: flat "data"
// lists, FP32 values printed as Python prints a float32 widened to double.
std::string BertRequest() {
  Random random;
  Json ids = Json::array(), ones = Json::array(), zeros = Json::array();
  for (int i = 0; i < 128; ++i) {
    ids.push_back(random.Below(30522));
    ones.push_back(1);
    zeros.push_back(0);
  }
  auto input = [](const char* name, Json data) {
    return Json{{"name", name},
                {"shape", {1, 128}},
                {"datatype", "INT64"},
                {"data", std::move(data)}};
  };
  return Json{{"inputs",
               {input("input_ids", ids), input("attention_mask", ones),
                input("token_type_ids", zeros)}}}
      .dump();
}

std::vector<float> NormalFloats(size_t count) {
  Random random;
  std::vector<float> values(count);
  for (float& v : values) v = random.Normal();
  return values;
}

std::string ImageRequest() {
  return Json{{"inputs",
               {{{"name", "pixel_values"},
                 {"shape", {1, 3, 224, 224}},
                 {"datatype", "FP32"},
                 {"data", NormalFloats(3 * 224 * 224)}}}}}
      .dump();
}

// ---- Reading: parse, then visit every value ---------------------------------

struct Tally {
  size_t values = 0;
  size_t string_bytes = 0;
  double numbers = 0;
};

void Visit(const Json& value, Tally& tally) {
  ++tally.values;
  switch (value.type()) {
    case Json::value_t::object:
      for (const auto& [key, member] : value.get_ref<const Json::object_t&>()) {
        tally.string_bytes += key.size();
        Visit(member, tally);
      }
      break;
    case Json::value_t::array:
      for (const Json& item : value.get_ref<const Json::array_t&>()) {
        Visit(item, tally);
      }
      break;
    case Json::value_t::string:
      tally.string_bytes += value.get_ref<const std::string&>().size();
      break;
    case Json::value_t::number_integer:
      tally.numbers += *value.get_ptr<const Json::number_integer_t*>();
      break;
    case Json::value_t::number_unsigned:
      tally.numbers += *value.get_ptr<const Json::number_unsigned_t*>();
      break;
    case Json::value_t::number_float:
      tally.numbers += *value.get_ptr<const Json::number_float_t*>();
      break;
    default:
      break;
  }
}

void Visit(const rapidjson::Value& value, Tally& tally) {
  ++tally.values;
  if (value.IsObject()) {
    for (const auto& member : value.GetObject()) {
      tally.string_bytes += member.name.GetStringLength();
      Visit(member.value, tally);
    }
  } else if (value.IsArray()) {
    for (const rapidjson::Value& item : value.GetArray()) Visit(item, tally);
  } else if (value.IsString()) {
    tally.string_bytes += value.GetStringLength();
  } else if (value.IsInt64()) {
    tally.numbers += value.GetInt64();
  } else if (value.IsUint64()) {
    tally.numbers += value.GetUint64();
  } else if (value.IsNumber()) {
    tally.numbers += value.GetDouble();
  }
}

void Visit(simdjson::dom::element value, Tally& tally) {
  using simdjson::dom::element_type;
  ++tally.values;
  switch (value.type()) {
    case element_type::OBJECT: {
      const simdjson::dom::object object = value.get_object().value_unsafe();
      for (simdjson::dom::key_value_pair member : object) {
        tally.string_bytes += member.key.size();
        Visit(member.value, tally);
      }
      break;
    }
    case element_type::ARRAY: {
      const simdjson::dom::array array = value.get_array().value_unsafe();
      for (simdjson::dom::element item : array) Visit(item, tally);
      break;
    }
    case element_type::STRING:
      tally.string_bytes += value.get_string().value_unsafe().size();
      break;
    case element_type::INT64:
      tally.numbers += value.get_int64().value_unsafe();
      break;
    case element_type::UINT64:
      tally.numbers += value.get_uint64().value_unsafe();
      break;
    case element_type::DOUBLE:
      tally.numbers += value.get_double().value_unsafe();
      break;
    default:
      break;
  }
}

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "json_benchmark: %s\n", what.c_str());
  std::exit(1);
}

Tally ReadNlohmann(const std::string& text) {
  Tally tally;
  Visit(Json::parse(text), tally);
  return tally;
}

Tally ReadBounded(const std::string& text) {
  absl::StatusOr<Json> json = platform::ParseJson(text);
  if (!json.ok()) Fail(std::string(json.status().message()));
  Tally tally;
  Visit(*json, tally);
  return tally;
}

Tally ReadRapid(const std::string& text) {
  rapidjson::Document document;
  document.Parse<kRapidFlags>(text.data(), text.size());
  if (document.HasParseError()) Fail("rapidjson refused an input");
  Tally tally;
  Visit(document, tally);
  return tally;
}

// simdjson reuses one parser (its design: buffers sized once); parse()
// copies the text into padded storage.
Tally ReadSimd(simdjson::dom::parser& parser, const std::string& text) {
  simdjson::dom::element root;
  if (parser.parse(text.data(), text.size()).get(root)) {
    Fail("simdjson refused an input");
  }
  Tally tally;
  Visit(root, tally);
  return tally;
}

// ---- Reading a request's numbers straight into a typed buffer (SAX) ---------

// Collects every number as a float; what a REST front end would do for
// "data" without building a document.
class NlohmannNumbers final : public nlohmann::json_sax<Json> {
 public:
  std::vector<float> values;
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t v) override { return Add(v); }
  bool number_unsigned(number_unsigned_t v) override { return Add(v); }
  bool number_float(number_float_t v, const string_t&) override {
    return Add(v);
  }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return false; }
  bool start_object(std::size_t) override { return true; }
  bool key(string_t&) override { return true; }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t, const std::string&,
                   const nlohmann::json::exception&) override {
    return false;
  }

 private:
  bool Add(double v) {
    values.push_back(static_cast<float>(v));
    return true;
  }
};

struct RapidNumbers
    : rapidjson::BaseReaderHandler<rapidjson::UTF8<>, RapidNumbers> {
  std::vector<float> values;
  bool Add(double v) {
    values.push_back(static_cast<float>(v));
    return true;
  }
  bool Int(int v) { return Add(v); }
  bool Uint(unsigned v) { return Add(v); }
  bool Int64(int64_t v) { return Add(static_cast<double>(v)); }
  bool Uint64(uint64_t v) { return Add(static_cast<double>(v)); }
  bool Double(double v) { return Add(v); }
};

size_t NumbersNlohmann(const std::string& text) {
  NlohmannNumbers sax;
  if (!Json::sax_parse(text.data(), text.data() + text.size(), &sax)) {
    Fail("nlohmann SAX refused an input");
  }
  return sax.values.size();
}

size_t NumbersRapid(const std::string& text) {
  RapidNumbers handler;
  rapidjson::Reader reader;
  rapidjson::StringStream stream(text.c_str());
  if (reader.Parse<kRapidFlags>(stream, handler).IsError()) {
    Fail("rapidjson SAX refused an input");
  }
  return handler.values.size();
}

// ---- Writing an [8,128,384] FP32 output as a KServe v2 response -------------

template <typename JsonType>
std::string WriteNlohmann(const std::vector<float>& values) {
  return JsonType{{"model_name", "minilm"},
                  {"outputs",
                   {{{"name", "last_hidden_state"},
                     {"datatype", "FP32"},
                     {"shape", {8, 128, 384}},
                     {"data", values}}}}}
      .dump();
}

std::string WriteRapid(const std::vector<float>& values) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> writer(buffer);
  writer.StartObject();
  writer.Key("model_name");
  writer.String("minilm");
  writer.Key("outputs");
  writer.StartArray();
  writer.StartObject();
  writer.Key("name");
  writer.String("last_hidden_state");
  writer.Key("datatype");
  writer.String("FP32");
  writer.Key("shape");
  writer.StartArray();
  for (int d : {8, 128, 384}) writer.Int(d);
  writer.EndArray();
  writer.Key("data");
  writer.StartArray();
  for (float v : values) writer.Double(v);
  writer.EndArray();
  writer.EndObject();
  writer.EndArray();
  writer.EndObject();
  return std::string(buffer.GetString(), buffer.GetSize());
}

// ---- Timing and the table ---------------------------------------------------

// Median milliseconds of each of `runs`, after one warm-up each. The runs
// take turns (one of each per round), so that a load change on a shared
// machine falls on all of them: at least 5 rounds, more until 1 s has
// passed (at most 31).
std::vector<double> MedianMs(const std::vector<std::function<void()>>& runs) {
  using Clock = std::chrono::steady_clock;
  for (const auto& run : runs) run();
  std::vector<std::vector<double>> ms(runs.size());
  const Clock::time_point start = Clock::now();
  for (int round = 0; round < 31; ++round) {
    if (round >= 5 && Clock::now() - start > std::chrono::seconds(1)) break;
    for (size_t i = 0; i < runs.size(); ++i) {
      const Clock::time_point t0 = Clock::now();
      runs[i]();
      ms[i].push_back(
          std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
  }
  std::vector<double> medians;
  for (std::vector<double>& times : ms) {
    std::sort(times.begin(), times.end());
    medians.push_back(times[times.size() / 2]);
  }
  return medians;
}

void ReadRow(const char* name, const std::string& text) {
  if (text.empty()) {
    std::printf("%-34s (input not found; pass a .safetensors path)\n", name);
    return;
  }
  simdjson::dom::parser parser;
  if (parser.allocate(text.size(), 64)) Fail("simdjson allocate");
  // Every library must see the same document.
  const Tally expected = ReadNlohmann(text);
  for (const Tally& t :
       {ReadBounded(text), ReadRapid(text), ReadSimd(parser, text)}) {
    if (t.values != expected.values ||
        t.string_bytes != expected.string_bytes) {
      Fail(absl::StrCat(name, ": libraries disagree on the document"));
    }
  }
  volatile size_t sink = 0;
  const std::vector<double> ms =
      MedianMs({[&] { sink += ReadNlohmann(text).values; },
                [&] { sink += ReadBounded(text).values; },
                [&] { sink += ReadRapid(text).values; },
                [&] { sink += ReadSimd(parser, text).values; }});
  std::printf("%-34s %10zu %10.3f %10.3f %10.3f %10.3f\n", name, text.size(),
              ms[0], ms[1], ms[2], ms[3]);
}

void SaxRow(const char* name, const std::string& text) {
  volatile size_t sink = 0;
  const std::vector<double> ms =
      MedianMs({[&] { sink += NumbersNlohmann(text); },
                [&] { sink += NumbersRapid(text); }});
  std::printf("%-34s %10zu %10.3f %10s %10.3f %10s\n", name, text.size(), ms[0],
              "-", ms[1], "-");
}

void WriteRows() {
  const std::vector<float> values = NormalFloats(8 * 128 * 384);
  volatile size_t sink = 0;
  const std::string as_double = WriteNlohmann<Json>(values);
  const std::string as_float = WriteNlohmann<JsonF32>(values);
  const std::string rapid = WriteRapid(values);
  const std::vector<double> ms =
      MedianMs({[&] { sink += WriteNlohmann<Json>(values).size(); },
                [&] { sink += WriteNlohmann<JsonF32>(values).size(); },
                [&] { sink += WriteRapid(values).size(); }});
  std::printf("%-34s %10zu %10.3f %10s %10.3f %10s\n",
              "write [8,128,384] FP32 as double", as_double.size(), ms[0], "-",
              ms[2], "n/a");
  std::printf("%-34s %10zu %10.3f %10s %10s %10s\n",
              "write [8,128,384] FP32 as float", as_float.size(), ms[1], "-",
              "-", "n/a");
  if (rapid.size() != as_double.size()) {
    std::printf("  (rapidjson's text is %zu bytes: its own shortest doubles)\n",
                rapid.size());
  }
}

// ---- What each library does with hostile input ------------------------------

std::string Nested(int depth) {
  return std::string(depth, '[') + std::string(depth, ']');
}

std::string NlohmannVerdict(const std::string& text) {
  try {
    const Json json = Json::parse(text);
    if (json.is_object() && json.contains("a")) {
      return absl::StrCat("accepted, keeps \"a\": ", json["a"].dump());
    }
    return "accepted";
  } catch (const Json::parse_error& e) {
    return absl::StrCat("error at byte ", e.byte, " (1-based)");
  }
}

std::string BoundedVerdict(const std::string& text) {
  absl::StatusOr<Json> json = platform::ParseJson(text);
  if (json.ok()) return "accepted";
  return std::string(json.status().message().substr(0, 70));
}

std::string RapidVerdict(const std::string& text) {
  rapidjson::Document document;
  document.Parse<kRapidFlags>(text.data(), text.size());
  if (document.HasParseError()) {
    return absl::StrCat("error at byte ", document.GetErrorOffset(), ": ",
                        rapidjson::GetParseError_En(document.GetParseError()));
  }
  if (document.IsObject()) {
    return absl::StrCat("accepted (", document.MemberCount(), " members)");
  }
  return "accepted";
}

std::string SimdVerdict(const std::string& text, size_t max_capacity) {
  simdjson::dom::parser parser(max_capacity);
  if (parser.allocate(std::min(text.size(), max_capacity), 64)) {
    return "allocate refused";
  }
  simdjson::dom::element root;
  if (simdjson::error_code error = parser.parse(text).get(root)) {
    return absl::StrCat("error: ", simdjson::error_message(error));
  }
  if (root.is_object()) {
    return absl::StrCat("accepted (", root.get_object().value_unsafe().size(),
                        " members)");
  }
  return "accepted";
}

void HostileRows() {
  struct Case {
    const char* name;
    std::string text;
    size_t simdjson_capacity;  // simdjson's bound on the document's size.
  };
  const Case cases[] = {
      {"nesting 100 deep (limit 64)", Nested(100), 1 << 20},
      {"nesting 100,000 deep", Nested(100000), 1 << 20},
      {"duplicate key {\"a\":1,\"a\":2}", "{\"a\":1,\"a\":2}", 1 << 20},
      {"malformed {\"a\": {\"dtype\": }", "{\"a\": {\"dtype\": }", 1 << 20},
      {"2 KB document, simdjson capacity 1 KB",
       Json{{"k", std::string(2000, 'x')}}.dump(), 1024},
  };
  for (const Case& c : cases) {
    std::printf("%s\n", c.name);
    std::printf("  nlohmann          %s\n", NlohmannVerdict(c.text).c_str());
    std::printf("  nlohmann+bounds   %s\n", BoundedVerdict(c.text).c_str());
    std::printf("  rapidjson         %s\n", RapidVerdict(c.text).c_str());
    std::printf("  simdjson          %s\n",
                SimdVerdict(c.text, c.simdjson_capacity).c_str());
  }
}

}  // namespace
}  // namespace castserve

int main(int argc, char** argv) {
  using namespace castserve;
  std::string path = argc > 1 ? argv[1] : "";
  if (path.empty()) {
    const char* root = std::getenv("BUILD_WORKSPACE_DIRECTORY");
    path = absl::StrCat(root != nullptr ? root : ".",
                        "/models/testdata/minilm/weights/model.safetensors");
  }
  double load[3] = {0, 0, 0};
  getloadavg(load, 3);
  std::printf("load average %.2f (ratios within a row are what counts)\n",
              load[0]);
  std::printf(
      "median ms to parse and visit every value (write rows: to build and "
      "dump)\n%-34s %10s %10s %10s %10s %10s\n",
      "document", "bytes", "nlohmann", "+bounds", "rapidjson", "simdjson");
  ReadRow("MiniLM safetensors header", SafetensorsHeader(path));
  ReadRow("7,000-tensor safetensors header", LargeModelHeader(7000));
  const std::string tokenizer = TokenizerJson();
  ReadRow("BPE tokenizer.json (Llama 3 shape)", tokenizer);
  const std::string bert = BertRequest();
  const std::string image = ImageRequest();
  ReadRow("infer request 3x[1,128] INT64", bert);
  ReadRow("infer request [1,3,224,224] FP32", image);
  SaxRow("  same, SAX into vector<float>", image);
  WriteRows();
  std::printf("\nhostile input (nlohmann+bounds: platform/json_parser.h)\n");
  HostileRows();
  return 0;
}
