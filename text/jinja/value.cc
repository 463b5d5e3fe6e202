#include "text/jinja/value.h"

#include <unicode/uchar.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "text/unicode/unicode.h"

namespace castserve::text::jinja {

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
  value.dict_ = std::make_shared<const Dict>(std::move(dict));
  return value;
}

Value Value::Namespace(Dict attributes) {
  Value value;
  value.kind_ = Kind::kNamespace;
  value.namespace_ = std::make_shared<Dict>(std::move(attributes));
  return value;
}

Value Value::Function(std::string name, NativeFunction function) {
  Value value;
  value.kind_ = Kind::kCallable;
  value.hint_ = std::move(name);
  value.function_ = std::make_shared<const NativeFunction>(std::move(function));
  return value;
}

Value Value::Iterator(std::vector<Value> items, std::string type_name) {
  Value value;
  value.kind_ = Kind::kIterator;
  value.hint_ = std::move(type_name);
  value.iterator_ = std::make_shared<IteratorState>();
  value.iterator_->items = std::move(items);
  return value;
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

std::string StringRepr(const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos;
  bool has_double = s.find('"') != std::string::npos;
  char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  size_t pos = 0;
  while (pos < s.size()) {
    char32_t c = NextCodePoint(s, &pos);
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (IsPrintable(c)) {
      AppendUtf8(c, &out);
    } else {
      char escape[16];
      if (c < 0x100) {
        std::snprintf(escape, sizeof(escape), "\\x%02x", c);
      } else if (c < 0x10000) {
        std::snprintf(escape, sizeof(escape), "\\u%04x", c);
      } else {
        std::snprintf(escape, sizeof(escape), "\\U%08x", c);
      }
      out += escape;
    }
  }
  out += quote;
  return out;
}

}  // namespace

bool ContainsIterator(const Value& value) {
  if (value.kind() == Value::Kind::kIterator) return true;
  if (value.is_list()) {
    for (const Value& item : value.list()) {
      if (ContainsIterator(item)) return true;
    }
  }
  if (value.is_dict()) {
    for (const auto& item : value.dict().items()) {
      if (ContainsIterator(item.second)) return true;
    }
  }
  return false;
}

std::string ToRepr(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kString:
      return StringRepr(value.string_value());
    case Value::Kind::kList: {
      const std::vector<Value>& items = value.list();
      std::string out = value.is_tuple() ? "(" : "[";
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += ", ";
        out += ToRepr(items[i]);
      }
      if (value.is_tuple() && items.size() == 1) out += ",";
      out += value.is_tuple() ? ")" : "]";
      if (!value.view_name().empty()) out = value.view_name() + "(" + out + ")";
      return out;
    }
    case Value::Kind::kDict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [key, item] : value.dict().items()) {
        if (!first) out += ", ";
        first = false;
        absl::StrAppend(&out, StringRepr(key), ": ", ToRepr(item));
      }
      return out + "}";
    }
    default:
      return ToStr(value);
  }
}

std::string ToStr(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return "";
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kBool:
      return value.bool_value() ? "True" : "False";
    case Value::Kind::kInt:
      return absl::StrCat(value.int_value());
    case Value::Kind::kFloat:
      return FloatRepr(value.float_value());
    case Value::Kind::kString:
      return value.string_value();
    case Value::Kind::kNamespace: {
      Value attributes = Value::FromDict(value.namespace_attributes());
      return "<Namespace " + ToRepr(attributes) + ">";
    }
    case Value::Kind::kCallable:
      return "<function " + value.function_name() + ">";
    case Value::Kind::kIterator:
      return "<" + value.function_name() + " object>";
    default:
      return ToRepr(value);
  }
}

}  // namespace castserve::text::jinja
