// jinja2's filters, as transformers' environment has them (tojson replaced
// by transformers' json.dumps form).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "text/jinja/bound_args.h"
#include "text/jinja/builtins.h"
#include "text/jinja/lexer.h"
#include "text/jinja/operators.h"
#include "text/jinja/python_string.h"
#include "text/unicode/unicode.h"

namespace castserve::text::jinja {
namespace {

using Filter = absl::StatusOr<Value> (*)(const Value& input,
                                         const CallArgs& args,
                                         const BuiltinContext& context);

absl::Status SizeCheck(size_t bytes, const BuiltinContext& context) {
  if (bytes > context.max_value_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("a value would exceed max_output_bytes (",
                     context.max_value_bytes, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<BoundArgs> Bind(const CallArgs& args, absl::string_view name,
                               const std::vector<absl::string_view>& names,
                               size_t required = 0) {
  return BindArgs(args, name, names, required);
}

// For the string filters: the value as str(), Undefined as "".
absl::StatusOr<Value> StringFilter(const Value& input, const CallArgs& args,
                                   absl::string_view name,
                                   std::string (*apply)(absl::string_view)) {
  absl::StatusOr<BoundArgs> bound = Bind(args, name, {});
  if (!bound.ok()) return bound.status();
  return Value::String(apply(ToStr(input)));
}

absl::StatusOr<Value> Upper(const Value& in, const CallArgs& a,
                            const BuiltinContext&) {
  return StringFilter(in, a, "upper", PythonUpper);
}
absl::StatusOr<Value> Lower(const Value& in, const CallArgs& a,
                            const BuiltinContext&) {
  return StringFilter(in, a, "lower", PythonLower);
}
absl::StatusOr<Value> Capitalize(const Value& in, const CallArgs& a,
                                 const BuiltinContext&) {
  return StringFilter(in, a, "capitalize", PythonCapitalize);
}
absl::StatusOr<Value> Title(const Value& in, const CallArgs& a,
                            const BuiltinContext&) {
  return StringFilter(in, a, "title", JinjaTitle);
}

absl::StatusOr<Value> Trim(const Value& in, const CallArgs& args,
                           const BuiltinContext&) {
  absl::StatusOr<BoundArgs> bound = Bind(args, "trim", {"chars"});
  if (!bound.ok()) return bound.status();
  std::optional<std::string> chars;
  if (bound->Has(0) && !bound->Get(0).is_none()) chars = ToStr(bound->Get(0));
  return Value::String(PythonStrip(ToStr(in), chars, StripSide::kBoth));
}

// Markup(str(value)): a string.
absl::StatusOr<Value> Safe(const Value& in, const CallArgs& args,
                           const BuiltinContext&) {
  absl::StatusOr<BoundArgs> bound = Bind(args, "safe", {});
  if (!bound.ok()) return bound.status();
  if (in.is_string()) return in;
  if (ContainsIterator(in)) return PrintingIteratorError();
  return Value::String(ToStr(in));
}

absl::StatusOr<Value> String(const Value& in, const CallArgs& args,
                             const BuiltinContext&) {
  absl::StatusOr<BoundArgs> bound = Bind(args, "string", {});
  if (!bound.ok()) return bound.status();
  if (ContainsIterator(in)) return PrintingIteratorError();
  return Value::String(ToStr(in));
}

absl::StatusOr<Value> Escape(const Value& in, const CallArgs& args,
                             const BuiltinContext& context) {
  absl::StatusOr<BoundArgs> bound = Bind(args, "escape", {});
  if (!bound.ok()) return bound.status();
  std::string out;
  for (char c : ToStr(in)) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  absl::Status status = SizeCheck(out.size(), context);
  if (!status.ok()) return status;
  return Value::String(std::move(out));
}

absl::StatusOr<Value> Length(const Value& in, const CallArgs& args,
                             const BuiltinContext&) {
  absl::StatusOr<BoundArgs> bound = Bind(args, "length", {});
  if (!bound.ok()) return bound.status();
  switch (in.kind()) {
    case Value::Kind::kUndefined:
      return Value::Int(0);
    case Value::Kind::kString:
      return Value::Int(CodePointCount(in.string_value()));
    case Value::Kind::kList:
      return Value::Int(in.list().size());
    case Value::Kind::kDict:
      return Value::Int(in.dict().size());
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("object of type '", TypeName(in), "' has no len()"));
  }
}

absl::StatusOr<Value> Default(const Value& in, const CallArgs& args,
                              const BuiltinContext&) {
  absl::StatusOr<BoundArgs> bound =
      Bind(args, "default", {"default_value", "boolean"});
  if (!bound.ok()) return bound.status();
  bool use_default = in.is_undefined() ||
                     (bound->Has(1) && Truthy(bound->Get(1)) && !Truthy(in));
  if (!use_default) return in;
  return bound->Has(0) ? bound->Get(0) : Value::String("");
}

absl::StatusOr<Value> Replace(const Value& in, const CallArgs& args,
                              const BuiltinContext& context) {
  absl::StatusOr<BoundArgs> bound =
      Bind(args, "replace", {"old", "new", "count"}, 2);
  if (!bound.ok()) return bound.status();
  int64_t count = -1;
  if (bound->Has(2) && !bound->Get(2).is_none()) {
    count = bound->Get(2).int_value();
  }
  std::string text = ToStr(in);
  std::string old_text = ToStr(bound->Get(0));
  std::string new_text = ToStr(bound->Get(1));
  size_t worst = text.size() + (text.size() + 1) * new_text.size();
  if (worst > context.max_value_bytes) {
    std::string out = PythonReplace(text, old_text, "", count);
    size_t hits = old_text.empty()
                      ? CodePointCount(text) + 1
                      : (text.size() - out.size()) / old_text.size();
    absl::Status status =
        SizeCheck(out.size() + hits * new_text.size(), context);
    if (!status.ok()) return status;
  }
  return Value::String(PythonReplace(text, old_text, new_text, count));
}

absl::StatusOr<Value> Join(const Value& in, const CallArgs& args,
                           const BuiltinContext& context) {
  absl::StatusOr<BoundArgs> bound = Bind(args, "join", {"d", "attribute"});
  if (!bound.ok()) return bound.status();
  absl::StatusOr<std::vector<Value>> items = Iterate(in);
  if (!items.ok()) return items.status();
  std::string separator = bound->Has(0) ? ToStr(bound->Get(0)) : "";
  std::string out;
  for (size_t i = 0; i < items->size(); ++i) {
    Value item = (*items)[i];
    if (bound->Has(1)) {
      absl::StatusOr<Value> attribute = GetItem(item, bound->Get(1), context);
      if (!attribute.ok()) return attribute.status();
      item = *std::move(attribute);
    }
    if (ContainsIterator(item)) return PrintingIteratorError();
    if (i > 0) out += separator;
    out += ToStr(item);
    absl::Status status = SizeCheck(out.size(), context);
    if (!status.ok()) return status;
  }
  return Value::String(std::move(out));
}

absl::StatusOr<Value> First(const Value& in, const CallArgs& args,
                            const BuiltinContext&) {
  absl::StatusOr<BoundArgs> bound = Bind(args, "first", {});
  if (!bound.ok()) return bound.status();
  if (in.kind() == Value::Kind::kIterator) {
    std::optional<Value> next = in.ConsumeNext();
    if (next.has_value()) return *next;
    return Value::Undefined("No first item, sequence was empty.");
  }
  absl::StatusOr<std::vector<Value>> items = Iterate(in);
  if (!items.ok()) return items.status();
  if (items->empty()) {
    return Value::Undefined("No first item, sequence was empty.");
  }
  return items->front();
}

absl::StatusOr<Value> Last(const Value& in, const CallArgs& args,
                           const BuiltinContext&) {
  absl::StatusOr<BoundArgs> bound = Bind(args, "last", {});
  if (!bound.ok()) return bound.status();
  if (in.kind() == Value::Kind::kIterator) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", TypeName(in), "' object is not reversible"));
  }
  absl::StatusOr<std::vector<Value>> items = Iterate(in);
  if (!items.ok()) return items.status();
  if (items->empty()) {
    return Value::Undefined("No last item, sequence was empty.");
  }
  return items->back();
}

absl::StatusOr<Value> List(const Value& in, const CallArgs& args,
                           const BuiltinContext&) {
  absl::StatusOr<BoundArgs> bound = Bind(args, "list", {});
  if (!bound.ok()) return bound.status();
  absl::StatusOr<std::vector<Value>> items = Iterate(in);
  if (!items.ok()) return items.status();
  return Value::List(*std::move(items));
}

absl::StatusOr<Value> Reverse(const Value& in, const CallArgs& args,
                              const BuiltinContext&) {
  absl::StatusOr<BoundArgs> bound = Bind(args, "reverse", {});
  if (!bound.ok()) return bound.status();
  if (in.is_string()) {
    std::u32string s = ToCodePoints(in.string_value());
    std::reverse(s.begin(), s.end());
    return Value::String(FromCodePoints(s));
  }
  absl::StatusOr<std::vector<Value>> items = Iterate(in);
  if (!items.ok()) return items.status();
  std::reverse(items->begin(), items->end());
  // Python's reversed() of a list or dict is an iterator; of anything else
  // jinja2 builds a list.
  if (in.is_list() && !in.is_tuple()) {
    return Value::Iterator(*std::move(items), "list_reverseiterator");
  }
  if (in.is_list()) return Value::Iterator(*std::move(items), "reversed");
  if (in.is_dict()) {
    return Value::Iterator(*std::move(items), "dict_reversekeyiterator");
  }
  return Value::List(*std::move(items));
}

absl::StatusOr<Value> Items(const Value& in, const CallArgs& args,
                            const BuiltinContext&) {
  absl::StatusOr<BoundArgs> bound = Bind(args, "items", {});
  if (!bound.ok()) return bound.status();
  if (in.is_undefined()) return Value::Iterator({}, "generator");
  if (!in.is_dict()) {
    return absl::InvalidArgumentError(
        "Can only get item pairs from a mapping.");
  }
  std::vector<Value> items;
  for (const auto& [key, value] : in.dict().items()) {
    items.push_back(Value::List({Value::String(key), value}, true));
  }
  return Value::Iterator(std::move(items), "generator");
}

// Python's int(text) and float(text), as the int and float filters try them.
std::optional<int64_t> ParseInt(std::string text, int base) {
  text = PythonStrip(text, std::nullopt, StripSide::kBoth);
  std::string digits;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '_' && i > 0 && i + 1 < text.size()) continue;
    digits += text[i];
  }
  if (digits.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  long long value = std::strtoll(digits.c_str(), &end, base);
  if (errno != 0 || end != digits.c_str() + digits.size() ||
      digits.find_first_of(" \t") != std::string::npos) {
    return std::nullopt;
  }
  return value;
}

std::optional<double> ParseFloat(std::string text) {
  text = PythonStrip(text, std::nullopt, StripSide::kBoth);
  if (text.empty() || text.find_first_of(" \t\n_x") != std::string::npos) {
    return std::nullopt;
  }
  char* end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size()) return std::nullopt;
  return value;
}

absl::StatusOr<Value> Int(const Value& in, const CallArgs& args,
                          const BuiltinContext&) {
  absl::StatusOr<BoundArgs> bound = Bind(args, "int", {"default", "base"});
  if (!bound.ok()) return bound.status();
  if (in.is_undefined()) return UndefinedError(in);
  Value fallback = bound->Has(0) ? bound->Get(0) : Value::Int(0);
  int base = bound->Has(1) ? static_cast<int>(bound->Get(1).int_value()) : 10;
  if (in.kind() == Value::Kind::kInt || in.kind() == Value::Kind::kBool) {
    return Value::Int(in.int_value());
  }
  if (in.kind() == Value::Kind::kFloat) {
    double f = in.float_value();
    if (!std::isfinite(f) || std::fabs(f) >= 9.2e18) return fallback;
    return Value::Int(static_cast<int64_t>(f));
  }
  if (in.is_string()) {
    if (std::optional<int64_t> i = ParseInt(in.string_value(), base)) {
      return Value::Int(*i);
    }
    std::optional<double> f = ParseFloat(in.string_value());
    if (f.has_value() && std::isfinite(*f) && std::fabs(*f) < 9.2e18) {
      return Value::Int(static_cast<int64_t>(*f));
    }
  }
  return fallback;
}

absl::StatusOr<Value> Float(const Value& in, const CallArgs& args,
                            const BuiltinContext&) {
  absl::StatusOr<BoundArgs> bound = Bind(args, "float", {"default"});
  if (!bound.ok()) return bound.status();
  if (in.is_undefined()) return UndefinedError(in);
  if (in.is_number()) return Value::Float(in.AsDouble());
  if (in.is_string()) {
    if (std::optional<double> f = ParseFloat(in.string_value())) {
      return Value::Float(*f);
    }
  }
  return bound->Has(0) ? bound->Get(0) : Value::Float(0.0);
}

absl::StatusOr<Value> Abs(const Value& in, const CallArgs& args,
                          const BuiltinContext&) {
  absl::StatusOr<BoundArgs> bound = Bind(args, "abs", {});
  if (!bound.ok()) return bound.status();
  if (in.kind() == Value::Kind::kFloat) {
    return Value::Float(std::fabs(in.float_value()));
  }
  if (in.kind() == Value::Kind::kInt || in.kind() == Value::Kind::kBool) {
    return in.int_value() < 0 ? Negate(in) : Value::Int(in.int_value());
  }
  return absl::InvalidArgumentError(
      absl::StrCat("bad operand type for abs(): '", TypeName(in), "'"));
}

absl::StatusOr<Value> ToJsonFilter(const Value& in, const CallArgs& args,
                                   const BuiltinContext& context) {
  absl::StatusOr<BoundArgs> bound = Bind(
      args, "tojson", {"ensure_ascii", "indent", "separators", "sort_keys"});
  if (!bound.ok()) return bound.status();
  absl::StatusOr<std::string> json =
      ToJsonWithOptions(in, *bound, context.max_value_bytes);
  if (!json.ok()) return json.status();
  return Value::String(*std::move(json));
}

// str.splitlines() (keepends=False).
std::vector<std::string> SplitLines(const std::string& text) {
  std::vector<std::string> lines;
  std::u32string s = ToCodePoints(text);
  std::u32string line;
  for (size_t i = 0; i < s.size(); ++i) {
    char32_t c = s[i];
    bool is_break = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C ||
                    c == 0x1C || c == 0x1D || c == 0x1E || c == 0x85 ||
                    c == 0x2028 || c == 0x2029;
    if (!is_break) {
      line += c;
      continue;
    }
    if (c == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
    lines.push_back(FromCodePoints(line));
    line.clear();
  }
  if (!line.empty()) lines.push_back(FromCodePoints(line));
  return lines;
}

absl::StatusOr<Value> Indent(const Value& in, const CallArgs& args,
                             const BuiltinContext& context) {
  absl::StatusOr<BoundArgs> bound =
      Bind(args, "indent", {"width", "first", "blank"});
  if (!bound.ok()) return bound.status();
  if (in.is_undefined()) return UndefinedError(in);
  if (!in.is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat("indent needs a string, got ", TypeName(in)));
  }
  std::string indention;
  if (bound->Get(0).is_string()) {
    indention = bound->Get(0).string_value();
  } else {
    int64_t width = bound->Has(0) ? bound->Get(0).int_value() : 4;
    indention =
        std::string(std::max<int64_t>(0, std::min<int64_t>(width, 256)), ' ');
  }
  std::vector<std::string> lines = SplitLines(ToStr(in) + "\n");
  std::string out;
  if (Truthy(bound->Get(2))) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i > 0) out += "\n" + indention;
      out += lines[i];
    }
  } else {
    out = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      out += "\n";
      if (!lines[i].empty()) out += indention;
      out += lines[i];
    }
  }
  if (Truthy(bound->Get(1))) out = indention + out;
  absl::Status status = SizeCheck(out.size(), context);
  if (!status.ok()) return status;
  return Value::String(std::move(out));
}

// The value at a dotted attribute path ("a.b", "0"), as jinja2's
// make_attgetter reads it.
absl::StatusOr<Value> AttributePath(const Value& item, const Value& path,
                                    const BuiltinContext& context) {
  if (!path.is_string()) return GetItem(item, path, context);
  Value current = item;
  for (absl::string_view part : absl::StrSplit(path.string_value(), '.')) {
    int64_t index;
    Value key = absl::SimpleAtoi(part, &index)
                    ? Value::Int(index)
                    : Value::String(std::string(part));
    absl::StatusOr<Value> next = GetItem(current, key, context);
    if (!next.ok()) return next;
    current = *std::move(next);
  }
  return current;
}

// select, reject, selectattr, rejectattr.
absl::StatusOr<Value> SelectCommon(const Value& in, const CallArgs& args,
                                   const BuiltinContext& context,
                                   bool by_attribute, bool keep_matching) {
  size_t first = by_attribute ? 1 : 0;
  if (by_attribute && args.positional.empty()) {
    return absl::InvalidArgumentError("selectattr needs an attribute");
  }
  CallArgs test_args;
  std::string test;
  if (args.positional.size() > first) {
    if (!args.positional[first].is_string()) {
      return absl::InvalidArgumentError("the test name must be a string");
    }
    test = args.positional[first].string_value();
    if (!IsSupportedTest(test)) {
      return absl::UnimplementedError(
          absl::StrCat("unsupported construct: test '", test, "'"));
    }
    test_args.positional.assign(args.positional.begin() + first + 1,
                                args.positional.end());
  }
  test_args.keyword = args.keyword;
  absl::StatusOr<std::vector<Value>> items = Iterate(in);
  if (!items.ok()) return items.status();
  std::vector<Value> kept;
  for (const Value& item : *items) {
    Value subject = item;
    if (by_attribute) {
      absl::StatusOr<Value> attribute =
          AttributePath(item, args.positional[0], context);
      if (!attribute.ok()) return attribute.status();
      subject = *std::move(attribute);
    }
    bool matches;
    if (test.empty()) {
      matches = Truthy(subject);
    } else {
      absl::StatusOr<bool> result = ApplyTest(test, subject, test_args);
      if (!result.ok()) return result.status();
      matches = *result;
    }
    if (matches == keep_matching) kept.push_back(item);
  }
  return Value::Iterator(std::move(kept), "generator");
}

absl::StatusOr<Value> Select(const Value& in, const CallArgs& a,
                             const BuiltinContext& c) {
  return SelectCommon(in, a, c, false, true);
}
absl::StatusOr<Value> Reject(const Value& in, const CallArgs& a,
                             const BuiltinContext& c) {
  return SelectCommon(in, a, c, false, false);
}
absl::StatusOr<Value> SelectAttr(const Value& in, const CallArgs& a,
                                 const BuiltinContext& c) {
  return SelectCommon(in, a, c, true, true);
}
absl::StatusOr<Value> RejectAttr(const Value& in, const CallArgs& a,
                                 const BuiltinContext& c) {
  return SelectCommon(in, a, c, true, false);
}

absl::StatusOr<Value> Map(const Value& in, const CallArgs& args,
                          const BuiltinContext& context) {
  absl::StatusOr<std::vector<Value>> items = Iterate(in);
  if (!items.ok()) return items.status();
  std::vector<Value> out;
  if (args.positional.empty()) {
    absl::StatusOr<BoundArgs> bound =
        Bind(args, "map", {"attribute", "default"});
    if (!bound.ok()) return bound.status();
    if (!bound->Has(0))
      return absl::InvalidArgumentError("map needs a filter or attribute=");
    for (const Value& item : *items) {
      absl::StatusOr<Value> value = AttributePath(item, bound->Get(0), context);
      if (!value.ok()) return value.status();
      out.push_back(value->is_undefined() && bound->Has(1) ? bound->Get(1)
                                                           : *std::move(value));
    }
    return Value::Iterator(std::move(out), "generator");
  }
  if (!args.positional[0].is_string() ||
      !IsSupportedFilter(args.positional[0].string_value())) {
    return absl::UnimplementedError(absl::StrCat(
        "unsupported construct: map with filter ", ToRepr(args.positional[0])));
  }
  CallArgs filter_args;
  filter_args.positional.assign(args.positional.begin() + 1,
                                args.positional.end());
  filter_args.keyword = args.keyword;
  for (const Value& item : *items) {
    absl::StatusOr<Value> value = ApplyFilter(args.positional[0].string_value(),
                                              item, filter_args, context);
    if (!value.ok()) return value.status();
    out.push_back(*std::move(value));
  }
  return Value::Iterator(std::move(out), "generator");
}

// A sort key for sort/unique/min/max/dictsort: lower-cased strings unless
// case_sensitive.
Value SortKey(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) {
    return Value::String(PythonLower(v.string_value()));
  }
  return v;
}

absl::StatusOr<std::vector<Value>> SortedItems(std::vector<Value> items,
                                               const std::vector<Value>& keys,
                                               bool reverse) {
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  absl::Status error;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    absl::StatusOr<bool> less = reverse ? Compare("<", keys[b], keys[a])
                                        : Compare("<", keys[a], keys[b]);
    if (!less.ok()) {
      error = less.status();
      return false;
    }
    return *less;
  });
  if (!error.ok()) return error;
  std::vector<Value> out;
  for (size_t i : order) out.push_back(items[i]);
  return out;
}

absl::StatusOr<Value> Sort(const Value& in, const CallArgs& args,
                           const BuiltinContext& context) {
  absl::StatusOr<BoundArgs> bound =
      Bind(args, "sort", {"reverse", "case_sensitive", "attribute"});
  if (!bound.ok()) return bound.status();
  absl::StatusOr<std::vector<Value>> items = Iterate(in);
  if (!items.ok()) return items.status();
  std::vector<Value> keys;
  for (const Value& item : *items) {
    Value key = item;
    if (bound->Has(2)) {
      absl::StatusOr<Value> a = AttributePath(item, bound->Get(2), context);
      if (!a.ok()) return a.status();
      key = *std::move(a);
    }
    keys.push_back(SortKey(key, Truthy(bound->Get(1))));
  }
  absl::StatusOr<std::vector<Value>> sorted =
      SortedItems(*std::move(items), keys, Truthy(bound->Get(0)));
  if (!sorted.ok()) return sorted.status();
  return Value::List(*std::move(sorted));
}

absl::StatusOr<Value> Unique(const Value& in, const CallArgs& args,
                             const BuiltinContext& context) {
  absl::StatusOr<BoundArgs> bound =
      Bind(args, "unique", {"case_sensitive", "attribute"});
  if (!bound.ok()) return bound.status();
  absl::StatusOr<std::vector<Value>> items = Iterate(in);
  if (!items.ok()) return items.status();
  std::vector<Value> out, seen;
  for (const Value& item : *items) {
    Value key = item;
    if (bound->Has(1)) {
      absl::StatusOr<Value> a = AttributePath(item, bound->Get(1), context);
      if (!a.ok()) return a.status();
      key = *std::move(a);
    }
    key = SortKey(key, Truthy(bound->Get(0)));
    bool found = false;
    for (const Value& s : seen) found = found || Equals(s, key);
    if (found) continue;
    absl::Status status = context.charge_iterations(seen.size());
    if (!status.ok()) return status;
    seen.push_back(key);
    out.push_back(item);
  }
  return Value::Iterator(std::move(out), "generator");
}

absl::StatusOr<Value> MinMax(const Value& in, const CallArgs& args,
                             const BuiltinContext& context, bool max) {
  absl::StatusOr<BoundArgs> bound =
      Bind(args, max ? "max" : "min", {"case_sensitive", "attribute"});
  if (!bound.ok()) return bound.status();
  CallArgs sort_args;
  sort_args.keyword.emplace_back("reverse", Value::Bool(max));
  sort_args.keyword.emplace_back("case_sensitive",
                                 Value::Bool(Truthy(bound->Get(0))));
  if (bound->Has(1)) sort_args.keyword.emplace_back("attribute", bound->Get(1));
  absl::StatusOr<Value> sorted = Sort(in, sort_args, context);
  if (!sorted.ok()) return sorted;
  if (sorted->list().empty()) {
    return Value::Undefined("No aggregated item, sequence was empty.");
  }
  return sorted->list().front();
}

absl::StatusOr<Value> Min(const Value& in, const CallArgs& a,
                          const BuiltinContext& c) {
  return MinMax(in, a, c, false);
}
absl::StatusOr<Value> Max(const Value& in, const CallArgs& a,
                          const BuiltinContext& c) {
  return MinMax(in, a, c, true);
}

absl::StatusOr<Value> Sum(const Value& in, const CallArgs& args,
                          const BuiltinContext& context) {
  absl::StatusOr<BoundArgs> bound = Bind(args, "sum", {"attribute", "start"});
  if (!bound.ok()) return bound.status();
  absl::StatusOr<std::vector<Value>> items = Iterate(in);
  if (!items.ok()) return items.status();
  Value total = bound->Has(1) ? bound->Get(1) : Value::Int(0);
  for (const Value& item : *items) {
    Value term = item;
    if (bound->Has(0)) {
      absl::StatusOr<Value> a = AttributePath(item, bound->Get(0), context);
      if (!a.ok()) return a.status();
      term = *std::move(a);
    }
    absl::StatusOr<Value> next =
        BinaryOperation("+", total, term, context.max_value_bytes);
    if (!next.ok()) return next;
    total = *std::move(next);
  }
  return total;
}

absl::StatusOr<Value> Round(const Value& in, const CallArgs& args,
                            const BuiltinContext&) {
  absl::StatusOr<BoundArgs> bound =
      Bind(args, "round", {"precision", "method"});
  if (!bound.ok()) return bound.status();
  if (!in.is_number()) {
    return absl::InvalidArgumentError(
        absl::StrCat("type ", TypeName(in), " doesn't define __round__"));
  }
  int64_t precision = bound->Has(0) ? bound->Get(0).int_value() : 0;
  std::string method =
      bound->Has(1) ? ToStr(bound->Get(1)) : std::string("common");
  if (precision < 0 || precision > 15) {
    return absl::UnimplementedError(
        "unsupported construct: round precision outside 0..15");
  }
  double value = in.AsDouble();
  double scale = std::pow(10.0, static_cast<double>(precision));
  if (method == "floor") return Value::Float(std::floor(value * scale) / scale);
  if (method == "ceil") return Value::Float(std::ceil(value * scale) / scale);
  if (method != "common") {
    return absl::InvalidArgumentError(
        "method must be 'common', 'ceil' or 'floor'");
  }
  // Python's round() of an int is that int.
  if (in.kind() != Value::Kind::kFloat) return Value::Int(in.int_value());
  char buffer[512];
  std::snprintf(buffer, sizeof(buffer), "%.*f", static_cast<int>(precision),
                value);
  return Value::Float(std::strtod(buffer, nullptr));
}

absl::StatusOr<Value> DictSort(const Value& in, const CallArgs& args,
                               const BuiltinContext&) {
  absl::StatusOr<BoundArgs> bound =
      Bind(args, "dictsort", {"case_sensitive", "by", "reverse"});
  if (!bound.ok()) return bound.status();
  if (!in.is_dict()) {
    return absl::InvalidArgumentError("dictsort needs a mapping");
  }
  bool by_value = bound->Has(1) && ToStr(bound->Get(1)) == "value";
  std::vector<Value> items, keys;
  for (const auto& [key, value] : in.dict().items()) {
    items.push_back(Value::List({Value::String(key), value}, true));
    keys.push_back(
        SortKey(by_value ? value : Value::String(key), Truthy(bound->Get(0))));
  }
  absl::StatusOr<std::vector<Value>> sorted =
      SortedItems(std::move(items), keys, Truthy(bound->Get(2)));
  if (!sorted.ok()) return sorted.status();
  return Value::List(*std::move(sorted));
}

const absl::flat_hash_map<std::string, Filter>& Filters() {
  static const auto* filters =
      new absl::flat_hash_map<std::string, Filter>{{"abs", Abs},
                                                   {"capitalize", Capitalize},
                                                   {"count", Length},
                                                   {"d", Default},
                                                   {"default", Default},
                                                   {"dictsort", DictSort},
                                                   {"e", Escape},
                                                   {"escape", Escape},
                                                   {"first", First},
                                                   {"float", Float},
                                                   {"indent", Indent},
                                                   {"int", Int},
                                                   {"items", Items},
                                                   {"join", Join},
                                                   {"last", Last},
                                                   {"length", Length},
                                                   {"list", List},
                                                   {"lower", Lower},
                                                   {"map", Map},
                                                   {"max", Max},
                                                   {"min", Min},
                                                   {"reject", Reject},
                                                   {"rejectattr", RejectAttr},
                                                   {"replace", Replace},
                                                   {"reverse", Reverse},
                                                   {"round", Round},
                                                   {"safe", Safe},
                                                   {"select", Select},
                                                   {"selectattr", SelectAttr},
                                                   {"sort", Sort},
                                                   {"string", String},
                                                   {"sum", Sum},
                                                   {"title", Title},
                                                   {"tojson", ToJsonFilter},
                                                   {"trim", Trim},
                                                   {"unique", Unique},
                                                   {"upper", Upper}};
  return *filters;
}

}  // namespace

bool IsSupportedFilter(absl::string_view name) {
  return Filters().contains(name);
}

absl::StatusOr<Value> ApplyFilter(absl::string_view name, const Value& input,
                                  const CallArgs& args,
                                  const BuiltinContext& context) {
  auto it = Filters().find(name);
  if (it == Filters().end()) {
    return absl::UnimplementedError(
        absl::StrCat("unsupported construct: filter '", name, "'"));
  }
  // The filters that print their input as str() would print an iterator's
  // memory address.
  static const auto* const kPrinting = new absl::flat_hash_set<std::string>{
      "capitalize", "e",     "escape", "lower",
      "replace",    "title", "trim",   "upper"};
  if (kPrinting->contains(std::string(name)) && ContainsIterator(input)) {
    return PrintingIteratorError();
  }
  return it->second(input, args, context);
}

}  // namespace castserve::text::jinja
