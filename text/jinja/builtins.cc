// Attribute and item access, iteration, methods, tests, globals and JSON.
// The filters are in filters.cc.
#include "text/jinja/builtins.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "text/jinja/bound_args.h"
#include "text/jinja/operators.h"
#include "text/jinja/python_string.h"
#include "text/unicode/unicode.h"

namespace castserve::text::jinja {
namespace {

const absl::flat_hash_set<std::string>& DictMethods() {
  static const auto* methods =
      new absl::flat_hash_set<std::string>{"get", "items", "keys", "values"};
  return *methods;
}

// Python attributes of dict and list that castserve does not offer: jinja2
// finds these before any item of the same name.
const absl::flat_hash_set<std::string>& OtherContainerAttributes() {
  static const auto* names = new absl::flat_hash_set<std::string>{
      "pop",        "popitem",  "update", "copy",   "clear",
      "setdefault", "fromkeys", "append", "extend", "insert",
      "remove",     "reverse",  "sort",   "index"};
  return *names;
}

std::string ObjectTypeRepr(const Value& value) {
  if (value.is_none()) return "None";
  return absl::StrCat(TypeName(value), " object");
}

Value MissingAttribute(const Value& object, absl::string_view name) {
  return Value::Undefined(absl::StrCat("'", ObjectTypeRepr(object),
                                       "' has no attribute '", name, "'"));
}

Value MissingElement(const Value& object, const Value& key) {
  return Value::Undefined(absl::StrCat("'", ObjectTypeRepr(object),
                                       "' has no element ", ToRepr(key)));
}

absl::Status CheckSize(size_t bytes, const BuiltinContext& context) {
  if (bytes > context.max_value_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("a value would exceed max_output_bytes (",
                     context.max_value_bytes, ")"));
  }
  return absl::OkStatus();
}

Value StringList(std::vector<std::string> parts) {
  std::vector<Value> items;
  items.reserve(parts.size());
  for (std::string& part : parts)
    items.push_back(Value::String(std::move(part)));
  return Value::List(std::move(items));
}

absl::StatusOr<bool> AffixMatch(const std::string& text, const Value& affix,
                                bool prefix) {
  std::vector<Value> candidates;
  if (affix.is_string()) {
    candidates.push_back(affix);
  } else if (affix.is_list() && affix.is_tuple()) {
    candidates = affix.list();
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        prefix ? "startswith" : "endswith",
        " first arg must be str or a tuple of str, not ", TypeName(affix)));
  }
  for (const Value& candidate : candidates) {
    if (!candidate.is_string()) {
      return absl::InvalidArgumentError(
          "tuple for startswith/endswith must "
          "only contain str");
    }
    const std::string& a = candidate.string_value();
    if (a.size() <= text.size() &&
        (prefix ? text.compare(0, a.size(), a) == 0
                : text.compare(text.size() - a.size(), a.size(), a) == 0)) {
      return true;
    }
  }
  return false;
}

// str.format with "{}", "{0}" and "{name}" fields (no format specs).
absl::StatusOr<Value> Format(const std::string& text, const CallArgs& args,
                             const BuiltinContext& context) {
  std::string out;
  size_t next_auto = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if ((c == '{' || c == '}') && i + 1 < text.size() && text[i + 1] == c) {
      out += c;
      ++i;
      continue;
    }
    if (c == '}') return absl::InvalidArgumentError("Single '}' encountered");
    if (c != '{') {
      out += c;
      continue;
    }
    size_t close = text.find('}', i);
    if (close == std::string::npos) {
      return absl::InvalidArgumentError("Single '{' encountered");
    }
    std::string field = text.substr(i + 1, close - i - 1);
    const Value* value = nullptr;
    size_t index = 0;
    if (field.empty()) {
      index = next_auto++;
    } else if (field.find_first_not_of("0123456789") == std::string::npos &&
               field.size() < 6) {
      index = std::stoul(field);
    } else if (field.find_first_of(":!.[") != std::string::npos) {
      return absl::UnimplementedError(
          "unsupported construct: str.format field with a format spec");
    } else {
      for (const auto& [name, v] : args.keyword) {
        if (name == field) value = &v;
      }
      if (value == nullptr)
        return absl::InvalidArgumentError(
            absl::StrCat("KeyError: '", field, "'"));
    }
    if (value == nullptr) {
      if (index >= args.positional.size()) {
        return absl::InvalidArgumentError(
            "Replacement index out of range for positional args tuple");
      }
      value = &args.positional[index];
    }
    out += ToStr(*value);
    absl::Status status = CheckSize(out.size(), context);
    if (!status.ok()) return status;
    i = close;
  }
  return Value::String(std::move(out));
}

using StringMethod = absl::StatusOr<Value> (*)(const std::string& text,
                                               absl::string_view name,
                                               const CallArgs& args,
                                               const BuiltinContext& context);

absl::StatusOr<Value> Strip(const std::string& text, absl::string_view name,
                            const CallArgs& args, const BuiltinContext&) {
  absl::StatusOr<BoundArgs> bound = BindArgs(args, name, {"chars"});
  if (!bound.ok()) return bound.status();
  std::optional<std::string> chars;
  if (bound->Has(0) && !bound->Get(0).is_none()) {
    if (!bound->Get(0).is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " arg must be None or str"));
    }
    chars = bound->Get(0).string_value();
  }
  StripSide side = name == "strip"    ? StripSide::kBoth
                   : name == "lstrip" ? StripSide::kLeft
                                      : StripSide::kRight;
  return Value::String(PythonStrip(text, chars, side));
}

absl::StatusOr<Value> Split(const std::string& text, absl::string_view name,
                            const CallArgs& args, const BuiltinContext&) {
  absl::StatusOr<BoundArgs> bound = BindArgs(args, name, {"sep", "maxsplit"});
  if (!bound.ok()) return bound.status();
  std::optional<std::string> sep;
  if (bound->Has(0) && !bound->Get(0).is_none()) {
    if (!bound->Get(0).is_string()) {
      return absl::InvalidArgumentError("must be str or None");
    }
    sep = bound->Get(0).string_value();
  }
  int64_t maxsplit = bound->Has(1) ? bound->Get(1).int_value() : -1;
  absl::StatusOr<std::vector<std::string>> parts =
      name == "split" ? PythonSplit(text, sep, maxsplit)
                      : PythonRSplit(text, sep, maxsplit);
  if (!parts.ok()) return parts.status();
  return StringList(*std::move(parts));
}

absl::StatusOr<Value> Affix(const std::string& text, absl::string_view name,
                            const CallArgs& args, const BuiltinContext&) {
  absl::StatusOr<BoundArgs> bound = BindArgs(args, name, {"affix"}, 1);
  if (!bound.ok()) return bound.status();
  absl::StatusOr<bool> match =
      AffixMatch(text, bound->Get(0), name == "startswith");
  if (!match.ok()) return match.status();
  return Value::Bool(*match);
}

absl::StatusOr<Value> Case(const std::string& text, absl::string_view name,
                           const CallArgs& args, const BuiltinContext&) {
  absl::StatusOr<BoundArgs> bound = BindArgs(args, name, {});
  if (!bound.ok()) return bound.status();
  if (name == "upper") return Value::String(PythonUpper(text));
  if (name == "lower") return Value::String(PythonLower(text));
  if (name == "title") return Value::String(PythonTitle(text));
  return Value::String(PythonCapitalize(text));
}

absl::StatusOr<Value> ReplaceMethod(const std::string& text,
                                    absl::string_view name,
                                    const CallArgs& args,
                                    const BuiltinContext& context) {
  absl::StatusOr<BoundArgs> bound =
      BindArgs(args, name, {"old", "new", "count"}, 2);
  if (!bound.ok()) return bound.status();
  if (!bound->Get(0).is_string() || !bound->Get(1).is_string()) {
    return absl::InvalidArgumentError("replace() arguments must be str");
  }
  const std::string& old_text = bound->Get(0).string_value();
  const std::string& new_text = bound->Get(1).string_value();
  int64_t count = bound->Has(2) ? bound->Get(2).int_value() : -1;
  // The size before building: text plus one new_text per match.
  size_t matches = old_text.empty() ? CodePointCount(text) + 1 : 0;
  for (size_t at = old_text.empty() ? std::string::npos : text.find(old_text);
       at != std::string::npos; at = text.find(old_text, at + old_text.size()))
    ++matches;
  if (count >= 0) matches = std::min<size_t>(matches, count);
  absl::Status status =
      CheckSize(text.size() + matches * new_text.size(), context);
  if (!status.ok()) return status;
  return Value::String(PythonReplace(text, old_text, new_text, count));
}

absl::StatusOr<Value> FindOrCount(const std::string& text,
                                  absl::string_view name, const CallArgs& args,
                                  const BuiltinContext&) {
  absl::StatusOr<BoundArgs> bound = BindArgs(args, name, {"sub"}, 1);
  if (!bound.ok()) return bound.status();
  if (!bound->Get(0).is_string()) {
    return absl::InvalidArgumentError("must be str");
  }
  const std::string& sub = bound->Get(0).string_value();
  if (name == "find") {
    size_t at = text.find(sub);
    if (at == std::string::npos) return Value::Int(-1);
    return Value::Int(CodePointCount(absl::string_view(text).substr(0, at)));
  }
  if (sub.empty()) return Value::Int(CodePointCount(text) + 1);
  int64_t n = 0;
  for (size_t at = text.find(sub); at != std::string::npos;
       at = text.find(sub, at + sub.size())) {
    ++n;
  }
  return Value::Int(n);
}

absl::StatusOr<Value> JoinMethod(const std::string& text,
                                 absl::string_view name, const CallArgs& args,
                                 const BuiltinContext& context) {
  absl::StatusOr<BoundArgs> bound = BindArgs(args, name, {"iterable"}, 1);
  if (!bound.ok()) return bound.status();
  absl::StatusOr<std::vector<Value>> items = Iterate(bound->Get(0));
  if (!items.ok()) return items.status();
  std::string out;
  for (size_t i = 0; i < items->size(); ++i) {
    if (!(*items)[i].is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence item ", i, ": expected str instance, ",
                       TypeName((*items)[i]), " found"));
    }
    if (i > 0) out += text;
    out += (*items)[i].string_value();
    absl::Status status = CheckSize(out.size(), context);
    if (!status.ok()) return status;
  }
  return Value::String(std::move(out));
}

absl::StatusOr<Value> FormatMethod(const std::string& text, absl::string_view,
                                   const CallArgs& args,
                                   const BuiltinContext& context) {
  return Format(text, args, context);
}

// The str methods castserve implements: the one table.
const absl::flat_hash_map<std::string, StringMethod>& StringMethods() {
  static const auto* methods =
      new absl::flat_hash_map<std::string, StringMethod>{
          {"strip", Strip},      {"lstrip", Strip},
          {"rstrip", Strip},     {"split", Split},
          {"rsplit", Split},     {"startswith", Affix},
          {"endswith", Affix},   {"upper", Case},
          {"lower", Case},       {"title", Case},
          {"capitalize", Case},  {"replace", ReplaceMethod},
          {"find", FindOrCount}, {"count", FindOrCount},
          {"join", JoinMethod},  {"format", FormatMethod}};
  return *methods;
}

absl::StatusOr<Value> CallStringMethod(const std::string& text,
                                       absl::string_view name,
                                       const CallArgs& args,
                                       const BuiltinContext& context) {
  return StringMethods().at(std::string(name))(text, name, args, context);
}

absl::StatusOr<Value> CallDictMethod(const Value& object,
                                     absl::string_view name,
                                     const CallArgs& args) {
  const Dict& dict = object.dict();
  if (name == "get") {
    absl::StatusOr<BoundArgs> bound =
        BindArgs(args, name, {"key", "default"}, 1);
    if (!bound.ok()) return bound.status();
    const Value& key = bound->Get(0);
    const Value* found =
        key.is_string() ? dict.Find(key.string_value()) : nullptr;
    if (found != nullptr) return *found;
    return bound->Has(1) ? bound->Get(1) : Value::None();
  }
  absl::StatusOr<BoundArgs> bound = BindArgs(args, name, {});
  if (!bound.ok()) return bound.status();
  std::vector<Value> items;
  for (const auto& [key, value] : dict.items()) {
    if (name == "items") {
      items.push_back(Value::List({Value::String(key), value}, true));
    } else if (name == "keys") {
      items.push_back(Value::String(key));
    } else {
      items.push_back(value);
    }
  }
  return Value::DictView(std::move(items), absl::StrCat("dict_", name));
}

}  // namespace

bool IsSupportedMethod(absl::string_view name) {
  return StringMethods().contains(name) || DictMethods().contains(name) ||
         name == "cycle";  // loop.cycle
}

absl::StatusOr<Value> GetAttribute(const Value& object, absl::string_view name,
                                   const BuiltinContext& context) {
  std::string method(name);
  switch (object.kind()) {
    case Value::Kind::kUndefined:
      return UndefinedError(object);
    case Value::Kind::kString:
      if (!StringMethods().contains(method)) break;
      return Value::Function(
          absl::StrCat("str.", name),
          [text = object, method, &context](const CallArgs& args) {
            return CallStringMethod(text.string_value(), method, args, context);
          });
    case Value::Kind::kDict: {
      if (DictMethods().contains(method)) {
        return Value::Function(absl::StrCat("dict.", name),
                               [object, method](const CallArgs& args) {
                                 return CallDictMethod(object, method, args);
                               });
      }
      if (OtherContainerAttributes().contains(method)) break;
      const Value* item = object.dict().Find(name);
      if (item != nullptr) return *item;
      break;
    }
    case Value::Kind::kNamespace: {
      const Value* item = object.namespace_attributes().Find(name);
      if (item != nullptr) return *item;
      break;
    }
    default:
      break;
  }
  if (OtherContainerAttributes().contains(method) &&
      (object.is_list() || object.is_dict())) {
    return absl::UnimplementedError(absl::StrCat(
        "unsupported construct: access to attribute '", name, "' of '",
        TypeName(object), "' object (the sandbox makes values immutable)"));
  }
  return MissingAttribute(object, name);
}

absl::StatusOr<Value> GetItem(const Value& object, const Value& key,
                              const BuiltinContext& context) {
  if (object.is_undefined()) return UndefinedError(object);
  if (object.is_list() && !object.view_name().empty()) {
    return MissingElement(object, key);  // Views are not subscriptable.
  }
  if ((object.is_list() || object.is_string()) &&
      (key.kind() == Value::Kind::kInt || key.kind() == Value::Kind::kBool)) {
    int64_t index = key.int_value();
    if (object.is_list()) {
      int64_t size = static_cast<int64_t>(object.list().size());
      if (index < 0) index += size;
      if (index < 0 || index >= size) return MissingElement(object, key);
      return object.list()[index];
    }
    std::u32string code_points = ToCodePoints(object.string_value());
    int64_t size = static_cast<int64_t>(code_points.size());
    if (index < 0) index += size;
    if (index < 0 || index >= size) return MissingElement(object, key);
    return Value::String(FromCodePoints(code_points.substr(index, 1)));
  }
  if (object.is_dict() && key.is_string()) {
    const Value* item = object.dict().Find(key.string_value());
    if (item != nullptr) return *item;
  }
  if (key.is_string()) return GetAttribute(object, key.string_value(), context);
  return MissingElement(object, key);
}

absl::StatusOr<Value> Slice(const Value& object, const Value& start,
                            const Value& stop, const Value& step,
                            const BuiltinContext& context) {
  if (object.is_undefined()) return UndefinedError(object);
  if ((!object.is_list() && !object.is_string()) ||
      (object.is_list() && !object.view_name().empty())) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", TypeName(object), "' object is not subscriptable"));
  }
  for (const Value* part : {&start, &stop, &step}) {
    if (!part->is_none() && part->kind() != Value::Kind::kInt &&
        part->kind() != Value::Kind::kBool) {
      return absl::InvalidArgumentError(
          "slice indices must be integers or None");
    }
  }
  int64_t by = step.is_none() ? 1 : step.int_value();
  if (by == 0) return absl::InvalidArgumentError("slice step cannot be zero");
  std::u32string code_points;
  int64_t size;
  if (object.is_string()) {
    code_points = ToCodePoints(object.string_value());
    size = static_cast<int64_t>(code_points.size());
  } else {
    size = static_cast<int64_t>(object.list().size());
  }
  auto clamp = [&](const Value& bound, int64_t missing) {
    if (bound.is_none()) return missing;
    int64_t i = bound.int_value();
    if (i < 0) i = std::max<int64_t>(i + size, by < 0 ? -1 : 0);
    return std::min<int64_t>(i, by < 0 ? size - 1 : size);
  };
  int64_t from = clamp(start, by < 0 ? size - 1 : 0);
  int64_t to = clamp(stop, by < 0 ? -1 : size);
  std::vector<int64_t> indices;
  for (int64_t i = from; by > 0 ? i < to : i > to; i += by) {
    indices.push_back(i);
  }
  if (object.is_string()) {
    std::u32string out;
    for (int64_t i : indices) out += code_points[i];
    return Value::String(FromCodePoints(out));
  }
  absl::Status status = CheckSize(indices.size() * 16, context);
  if (!status.ok()) return status;
  std::vector<Value> out;
  out.reserve(indices.size());
  for (int64_t i : indices) out.push_back(object.list()[i]);
  return Value::List(std::move(out), object.is_tuple());
}

absl::StatusOr<std::vector<Value>> Iterate(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return std::vector<Value>();
    case Value::Kind::kIterator:
      return value.ConsumeAll();
    case Value::Kind::kList:
      return value.list();
    case Value::Kind::kString: {
      std::vector<Value> items;
      for (char32_t c : ToCodePoints(value.string_value())) {
        std::string one;
        AppendUtf8(c, &one);
        items.push_back(Value::String(std::move(one)));
      }
      return items;
    }
    case Value::Kind::kDict: {
      std::vector<Value> keys;
      for (const auto& item : value.dict().items()) {
        keys.push_back(Value::String(item.first));
      }
      return keys;
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("'", TypeName(value), "' object is not iterable"));
  }
}

}  // namespace castserve::text::jinja
