// The tests (`is defined`, ...), the globals and tojson's JSON writer.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <limits>
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
                               const CallArgs& args,
                               const BuiltinContext& context) {
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
    absl::StatusOr<std::string> printed = ToStr(input, context.bounds);
    if (!printed.ok()) return printed.status();
    const std::string& text = *printed;
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
    // INT64_MIN % -1 overflows in C++; every integer is divisible by -1.
    if (other.int_value() == -1) return true;
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
  // In 128 bits: start, stop and step may span all of int64.
  __int128 start = bounds[0], stop = bounds[1], step = bounds[2];
  __int128 length = 0;
  if (step > 0 && start < stop) {
    length = (stop - start - 1) / step + 1;
  } else if (step < 0 && start > stop) {
    length = (start - stop - 1) / -step + 1;
  }
  if (length > kMaxRange) {
    return absl::InvalidArgumentError(
        "Range too big. The sandbox blocks ranges larger than MAX_RANGE "
        "(100000).");
  }
  absl::Status status =
      CheckValueBytes("range()", static_cast<size_t>(length) * kItemBytes,
                      context->bounds.max_bytes);
  if (status.ok()) status = context->charge_iterations(length);
  if (!status.ok()) return status;
  std::vector<Value> items;
  items.reserve(static_cast<size_t>(length));
  for (__int128 i = 0; i < length; ++i) {
    items.push_back(Value::Int(static_cast<int64_t>(start + i * step)));
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

absl::StatusOr<Value> StrftimeNow(const CallArgs& args, platform::Clock* clock,
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
  std::tm tm = absl::ToTM(clock->Now(), time_zone);
  std::string out(format.size() * 64 + 64, '\0');
  size_t length = format.empty() ? 0
                                 : std::strftime(out.data(), out.size(),
                                                 format.c_str(), &tm);
  out.resize(length);
  return Value::String(std::move(out));
}

}  // namespace

Dict MakeGlobals(platform::Clock* clock, absl::TimeZone time_zone,
                 const BuiltinContext* context) {
  Dict globals;
  globals.Set("range", Value::Function("range", [context](const CallArgs& a) {
                return Range(a, context);
              }));
  globals.Set(
      "namespace",
      Value::Function("namespace",
                      [context](const CallArgs& a) -> absl::StatusOr<Value> {
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
                        return context->namespaces->Create(*std::move(d));
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
                      [context](const CallArgs& a) -> absl::StatusOr<Value> {
                        std::string message;
                        if (!a.positional.empty()) {
                          absl::Status status = AppendStr(
                              a.positional[0], context->bounds, &message);
                          if (!status.ok()) return status;
                        }
                        return absl::InvalidArgumentError(
                            absl::StrCat(kRaisedPrefix, message));
                      }));
  globals.Set(
      "strftime_now",
      Value::Function("strftime_now", [clock, time_zone](const CallArgs& a) {
        return StrftimeNow(a, clock, time_zone);
      }));
  return globals;
}

namespace {

struct JsonStyle {
  bool indented = false;
  // The indent is `indent_text`, or `indent_spaces` spaces when an int gave
  // it (kept as a count: only a newline that is written needs them).
  std::string indent_text;
  size_t indent_spaces = 0;
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
};

// json.dumps into `out_`, refusing before it would grow past the bounds.
class JsonWriter {
 public:
  JsonWriter(const JsonStyle& style, const ValueBounds& bounds,
             std::string* out)
      : style_(style), bounds_(bounds), out_(out) {}

  absl::Status Write(const Value& value, int level);

 private:
  absl::Status Append(absl::string_view text) {
    if (out_->size() + text.size() > bounds_.max_bytes) {
      return CheckValueBytes("'tojson'", out_->size() + text.size(),
                             bounds_.max_bytes);
    }
    out_->append(text.data(), text.size());
    return absl::OkStatus();
  }
  absl::Status Newline(int level) {
    if (!style_.indented) return absl::OkStatus();
    size_t unit = style_.indent_text.size() + style_.indent_spaces;
    __int128 projected = static_cast<__int128>(out_->size()) + 1 +
                         static_cast<__int128>(unit) * level;
    if (projected > bounds_.max_bytes) {
      return CheckValueBytes(
          "'tojson'",
          static_cast<size_t>(std::min<__int128>(
              projected, std::numeric_limits<size_t>::max())),
          bounds_.max_bytes);
    }
    *out_ += '\n';
    for (int i = 0; i < level; ++i) {
      *out_ += style_.indent_text;
      out_->append(style_.indent_spaces, ' ');
    }
    return absl::OkStatus();
  }
  absl::Status String(const std::string& s);
  absl::Status Items(const Value& value, int level);

  const JsonStyle& style_;
  const ValueBounds& bounds_;
  std::string* out_;
};

absl::Status JsonWriter::String(const std::string& s) {
  absl::Status status = Append("\"");
  size_t pos = 0;
  while (pos < s.size() && status.ok()) {
    // A run that needs no escape goes in whole.
    size_t run = pos;
    while (run < s.size()) {
      unsigned char byte = static_cast<unsigned char>(s[run]);
      if (byte < 0x20 || byte == '"' || byte == '\\' ||
          (style_.ensure_ascii && byte >= 0x7F)) {
        break;
      }
      ++run;
    }
    if (run > pos) {
      status = Append(absl::string_view(s).substr(pos, run - pos));
      pos = run;
      continue;
    }
    char32_t c = NextCodePoint(s, &pos);
    char escape[16];
    switch (c) {
      case '"':
        status = Append("\\\"");
        break;
      case '\\':
        status = Append("\\\\");
        break;
      case '\n':
        status = Append("\\n");
        break;
      case '\r':
        status = Append("\\r");
        break;
      case '\t':
        status = Append("\\t");
        break;
      case '\b':
        status = Append("\\b");
        break;
      case '\f':
        status = Append("\\f");
        break;
      default:
        if (c >= 0x10000) {
          std::snprintf(escape, sizeof(escape), "\\u%04x\\u%04x",
                        0xD800 + ((c - 0x10000) >> 10),
                        0xDC00 + ((c - 0x10000) & 0x3FF));
        } else {
          std::snprintf(escape, sizeof(escape), "\\u%04x", c);
        }
        status = Append(escape);
    }
  }
  if (!status.ok()) return status;
  return Append("\"");
}

absl::Status JsonWriter::Items(const Value& value, int level) {
  if (level >= bounds_.max_depth) return ValueTooDeep(bounds_.max_depth);
  bool is_list = value.is_list();
  size_t count = is_list ? value.list().size() : value.dict().size();
  if (count == 0) return Append(is_list ? "[]" : "{}");
  std::vector<const std::pair<std::string, Value>*> members;
  if (!is_list) {
    for (const auto& item : value.dict().items()) members.push_back(&item);
    if (style_.sort_keys) {
      std::stable_sort(
          members.begin(), members.end(),
          [](const auto* a, const auto* b) { return a->first < b->first; });
    }
  }
  absl::Status status = Append(is_list ? "[" : "{");
  for (size_t i = 0; i < count && status.ok(); ++i) {
    if (i > 0) status = Append(style_.item_separator);
    if (status.ok()) status = Newline(level + 1);
    if (!status.ok()) break;
    if (is_list) {
      status = Write(value.list()[i], level + 1);
      continue;
    }
    status = String(members[i]->first);
    if (status.ok()) status = Append(style_.key_separator);
    if (status.ok()) status = Write(members[i]->second, level + 1);
  }
  if (status.ok()) status = Newline(level);
  if (!status.ok()) return status;
  return Append(is_list ? "]" : "}");
}

absl::Status JsonWriter::Write(const Value& value, int level) {
  switch (value.kind()) {
    case Value::Kind::kNone:
      return Append("null");
    case Value::Kind::kBool:
      return Append(value.bool_value() ? "true" : "false");
    case Value::Kind::kInt:
      return Append(absl::StrCat(value.int_value()));
    case Value::Kind::kFloat: {
      double f = value.float_value();
      return Append(std::isnan(f)   ? "NaN"
                    : std::isinf(f) ? (f > 0 ? "Infinity" : "-Infinity")
                                    : FloatRepr(f));
    }
    case Value::Kind::kString:
      return String(value.string_value());
    case Value::Kind::kList:
      if (!value.view_name().empty()) break;  // dict_items: not JSON.
      return Items(value, level);
    case Value::Kind::kDict:
      return Items(value, level);
    default:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "Object of type ", TypeName(value), " is not JSON serializable"));
}

}  // namespace

absl::StatusOr<std::string> ToJson(const Value& value, const BoundArgs& options,
                                   const ValueBounds& bounds) {
  // options: ensure_ascii, indent, separators, sort_keys.
  JsonStyle style;
  style.ensure_ascii = options.Has(0) && Truthy(options.Get(0));
  const Value& indent = options.Get(1);
  if (indent.kind() == Value::Kind::kInt ||
      indent.kind() == Value::Kind::kBool) {
    // json.dumps: " " * indent, none when indent <= 0.
    style.indented = true;
    style.indent_spaces =
        static_cast<size_t>(std::max<int64_t>(indent.int_value(), 0));
  } else if (indent.is_string()) {
    style.indented = true;
    style.indent_text = indent.string_value();
  } else if (!indent.is_none() && !indent.is_undefined()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "can't multiply sequence by non-int of type '", TypeName(indent), "'"));
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
  absl::Status status = JsonWriter(style, bounds, &out).Write(value, 0);
  if (!status.ok()) return status;
  return out;
}

}  // namespace castserve::text::jinja
