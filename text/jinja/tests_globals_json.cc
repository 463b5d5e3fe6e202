// The tests (`is defined`, ...), the globals and tojson's JSON writer.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "text/jinja/bound_args.h"
#include "text/jinja/builtins.h"
#include "text/jinja/operators.h"
#include "text/jinja/python_string.h"
#include "text/unicode/unicode.h"

namespace castserve::text::jinja {
namespace {

const absl::flat_hash_set<std::string>& Tests() {
  static const auto* tests = new absl::flat_hash_set<std::string>{
      "defined", "undefined",   "none",     "boolean",     "false",
      "true",    "integer",     "float",    "number",      "string",
      "mapping", "iterable",    "sequence", "callable",    "sameas",
      "eq",      "equalto",     "==",       "ne",          "!=",
      "lt",      "lessthan",    "<",        "le",          "<=",
      "gt",      "greaterthan", ">",        "ge",          ">=",
      "in",      "odd",         "even",     "divisibleby", "lower",
      "upper",   "escaped"};
  return *tests;
}

}  // namespace

bool IsSupportedTest(absl::string_view name) {
  return Tests().contains(std::string(name));
}

absl::StatusOr<bool> ApplyTest(absl::string_view name, const Value& input,
                               const CallArgs& args) {
  using Kind = Value::Kind;
  Kind kind = input.kind();
  static const auto* const kUnary = new absl::flat_hash_set<std::string>{
      "defined", "undefined", "none",     "boolean",  "false",
      "true",    "integer",   "float",    "number",   "string",
      "mapping", "iterable",  "sequence", "callable", "escaped",
      "lower",   "upper",     "odd",      "even"};
  if (kUnary->contains(std::string(name)) &&
      (!args.positional.empty() || !args.keyword.empty())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "test_", name, "() takes 1 positional argument but ",
        1 + args.positional.size() + args.keyword.size(), " were given"));
  }
  if (name == "defined") return kind != Kind::kUndefined;
  if (name == "undefined") return kind == Kind::kUndefined;
  if (name == "none") return kind == Kind::kNone;
  if (name == "boolean") return kind == Kind::kBool;
  if (name == "false") return kind == Kind::kBool && !input.bool_value();
  if (name == "true") return kind == Kind::kBool && input.bool_value();
  if (name == "integer") return kind == Kind::kInt;
  if (name == "float") return kind == Kind::kFloat;
  if (name == "number") return input.is_number();
  if (name == "string") return kind == Kind::kString;
  if (name == "mapping") return kind == Kind::kDict;
  if (name == "iterable" || name == "sequence") {
    return kind == Kind::kString || kind == Kind::kList ||
           kind == Kind::kDict || kind == Kind::kUndefined ||
           (kind == Kind::kIterator && name == "iterable");
  }
  if (name == "callable") return kind == Kind::kCallable;
  if (name == "escaped") return false;
  if (name == "lower" || name == "upper") {
    std::string text = ToStr(input);
    bool cased = PythonLower(text) != PythonUpper(text);
    return cased && (name == "lower" ? PythonLower(text) == text
                                     : PythonUpper(text) == text);
  }
  absl::StatusOr<BoundArgs> bound =
      BindArgs(args, name, {"other"}, name == "odd" || name == "even" ? 0 : 1);
  if (!bound.ok()) return bound.status();
  const Value& other = bound->Get(0);
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (kind != Kind::kInt && kind != Kind::kBool) {
      if (kind == Kind::kUndefined) return UndefinedError(input);
      return absl::InvalidArgumentError(absl::StrCat(
          "test '", name, "' needs an integer, got ", TypeName(input)));
    }
    if (name == "odd") return input.int_value() % 2 != 0;
    if (name == "even") return input.int_value() % 2 == 0;
    if (other.kind() != Kind::kInt || other.int_value() == 0) {
      return absl::InvalidArgumentError("divisibleby needs a non-zero integer");
    }
    return input.int_value() % other.int_value() == 0;
  }
  if (name == "sameas") {
    if (kind != other.kind()) return false;
    if (kind == Kind::kNone || kind == Kind::kUndefined) return true;
    if (kind == Kind::kBool) return input.bool_value() == other.bool_value();
    return false;  // Identity of other objects is not kept across copies.
  }
  if (name == "in") return Compare("in", input, other);
  static const std::pair<absl::string_view, absl::string_view> kOps[] = {
      {"eq", "=="}, {"equalto", "=="}, {"==", "=="},      {"ne", "!="},
      {"!=", "!="}, {"lt", "<"},       {"lessthan", "<"}, {"<", "<"},
      {"le", "<="}, {"<=", "<="},      {"gt", ">"},       {"greaterthan", ">"},
      {">", ">"},   {"ge", ">="},      {">=", ">="}};
  for (const auto& [test, op] : kOps) {
    if (name == test) return Compare(op, input, other);
  }
  return absl::InternalError(absl::StrCat("test '", name, "' has no body"));
}

namespace {

constexpr int64_t kMaxRange = 100000;  // jinja2's sandbox MAX_RANGE.

absl::StatusOr<Value> Range(const CallArgs& args,
                            const BuiltinContext* context) {
  if (!args.keyword.empty() || args.positional.empty() ||
      args.positional.size() > 3) {
    return absl::InvalidArgumentError("range() takes 1 to 3 integers");
  }
  int64_t bounds[3] = {0, 0, 1};
  for (size_t i = 0; i < args.positional.size(); ++i) {
    const Value& v = args.positional[i];
    if (v.kind() != Value::Kind::kInt && v.kind() != Value::Kind::kBool) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", TypeName(v), "' object cannot be interpreted as an integer"));
    }
  }
  if (args.positional.size() == 1) {
    bounds[1] = args.positional[0].int_value();
  } else {
    bounds[0] = args.positional[0].int_value();
    bounds[1] = args.positional[1].int_value();
    if (args.positional.size() == 3) bounds[2] = args.positional[2].int_value();
  }
  if (bounds[2] == 0) {
    return absl::InvalidArgumentError("range() arg 3 must not be zero");
  }
  int64_t length = 0;
  if (bounds[2] > 0 && bounds[0] < bounds[1]) {
    length = (bounds[1] - bounds[0] - 1) / bounds[2] + 1;
  } else if (bounds[2] < 0 && bounds[0] > bounds[1]) {
    length = (bounds[0] - bounds[1] - 1) / -bounds[2] + 1;
  }
  if (length > kMaxRange) {
    return absl::InvalidArgumentError(
        "Range too big. The sandbox blocks ranges larger than MAX_RANGE "
        "(100000).");
  }
  absl::Status status = context->charge_iterations(length);
  if (!status.ok()) return status;
  std::vector<Value> items;
  items.reserve(length);
  for (int64_t i = 0; i < length; ++i) {
    items.push_back(Value::Int(bounds[0] + i * bounds[2]));
  }
  return Value::List(std::move(items));
}

absl::StatusOr<Dict> DictFromArgs(const CallArgs& args, absl::string_view fn) {
  Dict dict;
  if (args.positional.size() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(fn, "() takes at most 1 positional argument"));
  }
  if (args.positional.size() == 1) {
    if (!args.positional[0].is_dict()) {
      return absl::UnimplementedError(
          absl::StrCat("unsupported construct: ", fn, "() of a ",
                       TypeName(args.positional[0])));
    }
    dict = args.positional[0].dict();
  }
  for (const auto& [key, value] : args.keyword) dict.Set(key, value);
  return dict;
}

absl::StatusOr<Value> StrftimeNow(const CallArgs& args,
                                  const std::function<absl::Time()>& now,
                                  absl::TimeZone time_zone) {
  absl::StatusOr<BoundArgs> bound =
      BindArgs(args, "strftime_now", {"format"}, 1);
  if (!bound.ok()) return bound.status();
  if (!bound->Get(0).is_string()) {
    return absl::InvalidArgumentError("strftime() argument 1 must be str");
  }
  const std::string& format = bound->Get(0).string_value();
  if (format.size() > 1024) {
    return absl::InvalidArgumentError("strftime_now: format over 1024 bytes");
  }
  std::tm tm = absl::ToTM(now(), time_zone);
  std::string out(format.size() * 64 + 64, '\0');
  size_t length = format.empty() ? 0
                                 : std::strftime(out.data(), out.size(),
                                                 format.c_str(), &tm);
  out.resize(length);
  return Value::String(std::move(out));
}

}  // namespace

Dict MakeGlobals(std::function<absl::Time()> now, absl::TimeZone time_zone,
                 const BuiltinContext* context) {
  Dict globals;
  globals.Set("range", Value::Function("range", [context](const CallArgs& a) {
                return Range(a, context);
              }));
  globals.Set("namespace",
              Value::Function(
                  "namespace", [](const CallArgs& a) -> absl::StatusOr<Value> {
                    absl::StatusOr<Dict> d = DictFromArgs(a, "namespace");
                    if (!d.ok()) return d.status();
                    for (const auto& item : d->items()) {
                      if (absl::StartsWith(item.first, "_")) {
                        return absl::InvalidArgumentError(
                            "Chat templates cannot store "
                            "underscore-prefixed attributes on "
                            "a namespace");
                      }
                    }
                    return Value::Namespace(*std::move(d));
                  }));
  globals.Set(
      "dict",
      Value::Function("dict", [](const CallArgs& a) -> absl::StatusOr<Value> {
        absl::StatusOr<Dict> d = DictFromArgs(a, "dict");
        if (!d.ok()) return d.status();
        return Value::FromDict(*std::move(d));
      }));
  globals.Set(
      "raise_exception",
      Value::Function("raise_exception",
                      [](const CallArgs& a) -> absl::StatusOr<Value> {
                        std::string message =
                            a.positional.empty() ? "" : ToStr(a.positional[0]);
                        return absl::InvalidArgumentError(
                            absl::StrCat(kRaisedPrefix, message));
                      }));
  globals.Set("strftime_now",
              Value::Function("strftime_now", [now = std::move(now),
                                               time_zone](const CallArgs& a) {
                return StrftimeNow(a, now, time_zone);
              }));
  return globals;
}

namespace {

struct JsonStyle {
  bool indented = false;
  std::string indent;
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
};

void AppendJsonString(const std::string& s, bool ensure_ascii,
                      std::string* out) {
  *out += '"';
  size_t pos = 0;
  while (pos < s.size()) {
    char32_t c = NextCodePoint(s, &pos);
    char escape[16];
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      case '\b':
        *out += "\\b";
        break;
      case '\f':
        *out += "\\f";
        break;
      default:
        if (c < 0x20 || (ensure_ascii && c >= 0x7F)) {
          if (c >= 0x10000) {
            std::snprintf(escape, sizeof(escape), "\\u%04x\\u%04x",
                          0xD800 + ((c - 0x10000) >> 10),
                          0xDC00 + ((c - 0x10000) & 0x3FF));
          } else {
            std::snprintf(escape, sizeof(escape), "\\u%04x", c);
          }
          *out += escape;
        } else {
          AppendUtf8(c, out);
        }
    }
  }
  *out += '"';
}

absl::Status AppendJson(const Value& value, const JsonStyle& style, int level,
                        size_t max_bytes, std::string* out) {
  if (out->size() > max_bytes || level > 512) {
    return absl::ResourceExhaustedError(
        "tojson output exceeds max_output_bytes");
  }
  auto newline = [&](int depth) {
    if (!style.indented) return;
    *out += '\n';
    for (int i = 0; i < depth; ++i) *out += style.indent;
  };
  switch (value.kind()) {
    case Value::Kind::kNone:
      *out += "null";
      return absl::OkStatus();
    case Value::Kind::kBool:
      *out += value.bool_value() ? "true" : "false";
      return absl::OkStatus();
    case Value::Kind::kInt:
      absl::StrAppend(out, value.int_value());
      return absl::OkStatus();
    case Value::Kind::kFloat: {
      double f = value.float_value();
      *out += std::isnan(f)   ? "NaN"
              : std::isinf(f) ? (f > 0 ? "Infinity" : "-Infinity")
                              : FloatRepr(f);
      return absl::OkStatus();
    }
    case Value::Kind::kString:
      AppendJsonString(value.string_value(), style.ensure_ascii, out);
      return absl::OkStatus();
    case Value::Kind::kList: {
      if (value.list().empty()) {
        *out += "[]";
        return absl::OkStatus();
      }
      *out += '[';
      for (size_t i = 0; i < value.list().size(); ++i) {
        if (i > 0) *out += style.item_separator;
        newline(level + 1);
        absl::Status status =
            AppendJson(value.list()[i], style, level + 1, max_bytes, out);
        if (!status.ok()) return status;
      }
      newline(level);
      *out += ']';
      return absl::OkStatus();
    }
    case Value::Kind::kDict: {
      if (value.dict().size() == 0) {
        *out += "{}";
        return absl::OkStatus();
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& item : value.dict().items()) items.push_back(&item);
      if (style.sort_keys) {
        std::stable_sort(
            items.begin(), items.end(),
            [](const auto* a, const auto* b) { return a->first < b->first; });
      }
      *out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) *out += style.item_separator;
        newline(level + 1);
        AppendJsonString(items[i]->first, style.ensure_ascii, out);
        *out += style.key_separator;
        absl::Status status =
            AppendJson(items[i]->second, style, level + 1, max_bytes, out);
        if (!status.ok()) return status;
      }
      newline(level);
      *out += '}';
      return absl::OkStatus();
    }
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "Object of type ", TypeName(value), " is not JSON serializable"));
  }
}

}  // namespace

absl::StatusOr<std::string> ToJsonWithOptions(const Value& value,
                                              const BoundArgs& options,
                                              size_t max_bytes) {
  // options: ensure_ascii, indent, separators, sort_keys.
  JsonStyle style;
  style.ensure_ascii = options.Has(0) && Truthy(options.Get(0));
  const Value& indent = options.Get(1);
  if (indent.kind() == Value::Kind::kInt) {
    style.indented = true;
    style.indent = std::string(
        std::max<int64_t>(0, std::min<int64_t>(indent.int_value(), 64)), ' ');
  } else if (indent.is_string()) {
    style.indented = true;
    style.indent = indent.string_value();
  } else if (!indent.is_none() && !indent.is_undefined()) {
    return absl::InvalidArgumentError("tojson: indent must be an int or str");
  }
  if (style.indented) style.item_separator = ",";
  const Value& separators = options.Get(2);
  if (separators.is_list() && separators.list().size() == 2 &&
      separators.list()[0].is_string() && separators.list()[1].is_string()) {
    style.item_separator = separators.list()[0].string_value();
    style.key_separator = separators.list()[1].string_value();
  } else if (!separators.is_none() && !separators.is_undefined()) {
    return absl::InvalidArgumentError(
        "tojson: separators must be a pair of strings");
  }
  style.sort_keys = options.Has(3) && Truthy(options.Get(3));
  std::string out;
  absl::Status status = AppendJson(value, style, 0, max_bytes, &out);
  if (!status.ok()) return status;
  if (out.size() > max_bytes) {
    return absl::ResourceExhaustedError(
        "tojson output exceeds max_output_bytes");
  }
  return out;
}

absl::StatusOr<std::string> ToJson(const Value& value, const Value& indent,
                                   bool sort_keys) {
  BoundArgs options(4);
  options.Set(1, indent);
  options.Set(3, Value::Bool(sort_keys));
  return ToJsonWithOptions(value, options, size_t{1} << 40);
}

}  // namespace castserve::text::jinja
