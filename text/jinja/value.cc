#include "text/jinja/value.h"

#include <unicode/uchar.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "text/unicode/unicode.h"

namespace castserve::text::jinja {

absl::Status CheckValueBytes(absl::string_view what, size_t bytes,
                             size_t max_bytes) {
  if (bytes <= max_bytes) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrCat(what, " would build ", bytes,
                   " bytes, over max_output_bytes (", max_bytes, ")"));
}

absl::Status ValueTooDeep(int max_depth) {
  return absl::ResourceExhaustedError(absl::StrCat(
      "a value nests deeper than max_value_depth (", max_depth, ")"));
}

absl::Status PrintingIteratorError() {
  return absl::UnimplementedError(
      "unsupported construct: printing a generator or iterator (jinja2 "
      "prints its memory address; add '| list')");
}

namespace {

int DeepestItem(const std::vector<Value>& items) {
  int deepest = 0;
  for (const Value& item : items) deepest = std::max(deepest, item.depth());
  return deepest;
}

}  // namespace

Value Value::Undefined(std::string hint) {
  Value value;
  value.hint_ = std::move(hint);
  return value;
}

Value Value::None() {
  Value value;
  value.kind_ = Kind::kNone;
  return value;
}

Value Value::Bool(bool b) {
  Value value;
  value.kind_ = Kind::kBool;
  value.bool_ = b;
  value.int_ = b ? 1 : 0;
  return value;
}

Value Value::Int(int64_t i) {
  Value value;
  value.kind_ = Kind::kInt;
  value.int_ = i;
  return value;
}

Value Value::Float(double f) {
  Value value;
  value.kind_ = Kind::kFloat;
  value.float_ = f;
  return value;
}

Value Value::String(std::string s) {
  Value value;
  value.kind_ = Kind::kString;
  value.string_ = std::make_shared<const std::string>(std::move(s));
  return value;
}

Value Value::List(std::vector<Value> items, bool is_tuple) {
  Value value;
  value.kind_ = Kind::kList;
  value.is_tuple_ = is_tuple;
  value.depth_ = 1 + DeepestItem(items);
  value.list_ = std::make_shared<const std::vector<Value>>(std::move(items));
  return value;
}

Value Value::DictView(std::vector<Value> items, std::string view_name) {
  Value value = List(std::move(items));
  value.hint_ = std::move(view_name);
  return value;
}

Value Value::FromDict(Dict dict) {
  Value value;
  value.kind_ = Kind::kDict;
  int deepest = 0;
  for (const auto& item : dict.items()) {
    deepest = std::max(deepest, item.second.depth());
  }
  value.depth_ = 1 + deepest;
  value.dict_ = std::make_shared<const Dict>(std::move(dict));
  return value;
}

Value Value::Function(std::string name, NativeFunction function,
                      int captured_depth) {
  Value value;
  value.kind_ = Kind::kCallable;
  value.depth_ = captured_depth;
  value.hint_ = std::move(name);
  value.function_ = std::make_shared<const NativeFunction>(std::move(function));
  return value;
}

Value Value::Iterator(std::vector<Value> items, std::string type_name) {
  Value value;
  value.kind_ = Kind::kIterator;
  value.depth_ = 1 + DeepestItem(items);
  value.hint_ = std::move(type_name);
  value.iterator_ = std::make_shared<IteratorState>();
  value.iterator_->items = std::move(items);
  return value;
}

NamespaceOwner::~NamespaceOwner() {
  // Emptying one namespace frees what it holds; the namespaces among that
  // are still held here, so nothing recurses through them.
  for (const std::shared_ptr<Dict>& attributes : namespaces_) {
    *attributes = Dict();
  }
}

Value NamespaceOwner::Create(Dict attributes) {
  if (namespaces_.size() >= 2 * kept_after_drop_ + 64) DropUnreferenced();
  Value value;
  value.kind_ = Value::Kind::kNamespace;
  value.depth_ = 1;
  value.namespace_ = std::make_shared<Dict>(std::move(attributes));
  namespaces_.push_back(value.namespace_);
  return value;
}

void NamespaceOwner::DropUnreferenced() {
  std::vector<std::shared_ptr<Dict>> kept;
  for (std::shared_ptr<Dict>& attributes : namespaces_) {
    if (attributes.use_count() > 1) {
      kept.push_back(std::move(attributes));
    } else {
      *attributes = Dict();
    }
  }
  namespaces_ = std::move(kept);
  kept_after_drop_ = namespaces_.size();
}

std::vector<Value> Value::ConsumeAll() const {
  std::vector<Value> rest(iterator_->items.begin() + iterator_->position,
                          iterator_->items.end());
  iterator_->position = iterator_->items.size();
  return rest;
}

std::optional<Value> Value::ConsumeNext() const {
  if (iterator_->position == iterator_->items.size()) return std::nullopt;
  return iterator_->items[iterator_->position++];
}

double Value::AsDouble() const {
  return kind_ == Kind::kFloat ? float_ : static_cast<double>(int_);
}

void Dict::Set(std::string key, Value value) {
  auto [it, inserted] = index_.try_emplace(key, items_.size());
  if (inserted) {
    items_.emplace_back(std::move(key), std::move(value));
  } else {
    items_[it->second].second = std::move(value);
  }
}

const Value* Dict::Find(absl::string_view key) const {
  auto it = index_.find(key);
  return it == index_.end() ? nullptr : &items_[it->second].second;
}

bool Truthy(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return false;
    case Value::Kind::kBool:
      return value.bool_value();
    case Value::Kind::kInt:
      return value.int_value() != 0;
    case Value::Kind::kFloat:
      return value.float_value() != 0;
    case Value::Kind::kString:
      return !value.string_value().empty();
    case Value::Kind::kList:
      return !value.list().empty();
    case Value::Kind::kDict:
      return value.dict().size() != 0;
    case Value::Kind::kNamespace:
    case Value::Kind::kCallable:
    case Value::Kind::kIterator:
      return true;
  }
  return false;
}

bool Equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Value::Kind::kFloat || b.kind() == Value::Kind::kFloat) {
      return a.AsDouble() == b.AsDouble();
    }
    return a.int_value() == b.int_value();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.string_value() == b.string_value();
    case Value::Kind::kList: {
      if (a.list().size() != b.list().size()) return false;
      for (size_t i = 0; i < a.list().size(); ++i) {
        if (!Equals(a.list()[i], b.list()[i])) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      if (a.dict().size() != b.dict().size()) return false;
      for (const auto& [key, item] : a.dict().items()) {
        const Value* other = b.dict().Find(key);
        if (other == nullptr || !Equals(item, *other)) return false;
      }
      return true;
    }
    case Value::Kind::kNamespace:
      return &a.namespace_attributes() == &b.namespace_attributes();
    default:
      return false;  // Callables: identity, which copies do not keep.
  }
}

absl::string_view TypeName(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNone:
      return "NoneType";
    case Value::Kind::kBool:
      return "bool";
    case Value::Kind::kInt:
      return "int";
    case Value::Kind::kFloat:
      return "float";
    case Value::Kind::kString:
      return "str";
    case Value::Kind::kList:
      if (!value.view_name().empty()) return value.view_name();
      return value.is_tuple() ? "tuple" : "list";
    case Value::Kind::kDict:
      return "dict";
    case Value::Kind::kNamespace:
      return "Namespace";
    case Value::Kind::kCallable:
      return "function";
    case Value::Kind::kIterator:
      return value.function_name();
  }
  return "object";
}

std::string FloatRepr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  if (value == 0) return std::signbit(value) ? "-0.0" : "0.0";
  // The shortest %e form that reads back exactly.
  char buffer[64];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof(buffer), "%.*e", precision - 1, value);
    if (std::strtod(buffer, nullptr) == value) break;
  }
  std::string text = buffer;
  size_t e = text.find('e');
  int exponent = std::atoi(text.c_str() + e + 1);
  std::string mantissa = text.substr(0, e);
  bool negative = mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits += c;
  }
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out = negative ? "-" : "";
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out += "0." + std::string(-exponent - 1, '0') + digits;
    } else if (static_cast<size_t>(exponent) + 1 >= digits.size()) {
      out += digits + std::string(exponent + 1 - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, exponent + 1) + "." + digits.substr(exponent + 1);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char exponent_text[16];
  std::snprintf(exponent_text, sizeof(exponent_text), "e%c%02d",
                exponent < 0 ? '-' : '+', std::abs(exponent));
  return out + exponent_text;
}

namespace {

// Python's str.isprintable() for one code point.
bool IsPrintable(char32_t c) {
  if (c == ' ') return true;
  switch (u_charType(static_cast<UChar32>(c))) {
    case U_CONTROL_CHAR:
    case U_FORMAT_CHAR:
    case U_SURROGATE:
    case U_PRIVATE_USE_CHAR:
    case U_UNASSIGNED:
    case U_LINE_SEPARATOR:
    case U_PARAGRAPH_SEPARATOR:
    case U_SPACE_SEPARATOR:
      return false;
    default:
      return true;
  }
}

// Python's str()/repr() into `out_`, within the bounds.
class Printer {
 public:
  Printer(const ValueBounds& bounds, std::string* out)
      : bounds_(bounds), out_(out) {}

  absl::Status Str(const Value& value, int depth);
  absl::Status Repr(const Value& value, int depth);

 private:
  absl::Status Append(absl::string_view text) {
    if (out_->size() + text.size() > bounds_.max_bytes) {
      return CheckValueBytes("printing a value", out_->size() + text.size(),
                             bounds_.max_bytes);
    }
    out_->append(text.data(), text.size());
    return absl::OkStatus();
  }
  absl::Status StringRepr(const std::string& s);
  absl::Status Items(const Value& value, int depth);

  const ValueBounds& bounds_;
  std::string* out_;
};

absl::Status Printer::StringRepr(const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos;
  bool has_double = s.find('"') != std::string::npos;
  char quote = has_single && !has_double ? '"' : '\'';
  absl::Status status = Append(absl::string_view(&quote, 1));
  size_t pos = 0;
  while (pos < s.size() && status.ok()) {
    char32_t c = NextCodePoint(s, &pos);
    char piece[16];
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      std::snprintf(piece, sizeof(piece), "\\%c", static_cast<char>(c));
    } else if (c == '\n') {
      std::snprintf(piece, sizeof(piece), "\\n");
    } else if (c == '\r') {
      std::snprintf(piece, sizeof(piece), "\\r");
    } else if (c == '\t') {
      std::snprintf(piece, sizeof(piece), "\\t");
    } else if (IsPrintable(c)) {
      std::string utf8;
      AppendUtf8(c, &utf8);
      status = Append(utf8);
      continue;
    } else if (c < 0x100) {
      std::snprintf(piece, sizeof(piece), "\\x%02x", c);
    } else if (c < 0x10000) {
      std::snprintf(piece, sizeof(piece), "\\u%04x", c);
    } else {
      std::snprintf(piece, sizeof(piece), "\\U%08x", c);
    }
    status = Append(piece);
  }
  if (!status.ok()) return status;
  return Append(absl::string_view(&quote, 1));
}

// A list's or dict's items, as repr() prints them.
absl::Status Printer::Items(const Value& value, int depth) {
  if (depth >= bounds_.max_depth) return ValueTooDeep(bounds_.max_depth);
  absl::Status status;
  if (value.is_list()) {
    const std::vector<Value>& items = value.list();
    if (!value.view_name().empty()) status = Append(value.view_name() + "(");
    if (status.ok()) status = Append(value.is_tuple() ? "(" : "[");
    for (size_t i = 0; i < items.size() && status.ok(); ++i) {
      if (i > 0) status = Append(", ");
      if (status.ok()) status = Repr(items[i], depth + 1);
    }
    if (status.ok() && value.is_tuple() && items.size() == 1) {
      status = Append(",");
    }
    if (status.ok()) status = Append(value.is_tuple() ? ")" : "]");
    if (status.ok() && !value.view_name().empty()) status = Append(")");
    return status;
  }
  const Dict& dict = value.kind() == Value::Kind::kNamespace
                         ? value.namespace_attributes()
                         : value.dict();
  status = Append("{");
  bool first = true;
  for (const auto& [key, item] : dict.items()) {
    if (!status.ok()) break;
    if (!first) status = Append(", ");
    first = false;
    if (status.ok()) status = StringRepr(key);
    if (status.ok()) status = Append(": ");
    if (status.ok()) status = Repr(item, depth + 1);
  }
  if (!status.ok()) return status;
  return Append("}");
}

absl::Status Printer::Repr(const Value& value, int depth) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return Append("Undefined");
    case Value::Kind::kString:
      return StringRepr(value.string_value());
    case Value::Kind::kList:
    case Value::Kind::kDict:
      return Items(value, depth);
    default:
      return Str(value, depth);
  }
}

absl::Status Printer::Str(const Value& value, int depth) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return absl::OkStatus();
    case Value::Kind::kNone:
      return Append("None");
    case Value::Kind::kBool:
      return Append(value.bool_value() ? "True" : "False");
    case Value::Kind::kInt:
      return Append(absl::StrCat(value.int_value()));
    case Value::Kind::kFloat:
      return Append(FloatRepr(value.float_value()));
    case Value::Kind::kString:
      return Append(value.string_value());
    case Value::Kind::kNamespace: {
      absl::Status status = Append("<Namespace ");
      if (status.ok()) status = Items(value, depth);
      if (!status.ok()) return status;
      return Append(">");
    }
    case Value::Kind::kCallable:
      return Append("<function " + value.function_name() + ">");
    case Value::Kind::kIterator:
      return PrintingIteratorError();
    default:
      return Repr(value, depth);
  }
}

}  // namespace

absl::Status AppendStr(const Value& value, const ValueBounds& bounds,
                       std::string* out) {
  return Printer(bounds, out).Str(value, 0);
}

absl::Status AppendRepr(const Value& value, const ValueBounds& bounds,
                        std::string* out) {
  return Printer(bounds, out).Repr(value, 0);
}

absl::StatusOr<std::string> ToStr(const Value& value,
                                  const ValueBounds& bounds) {
  std::string out;
  absl::Status status = AppendStr(value, bounds, &out);
  if (!status.ok()) return status;
  return out;
}

absl::StatusOr<std::string> ToRepr(const Value& value,
                                   const ValueBounds& bounds) {
  std::string out;
  absl::Status status = AppendRepr(value, bounds, &out);
  if (!status.ok()) return status;
  return out;
}

}  // namespace castserve::text::jinja
