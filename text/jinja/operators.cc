#include "text/jinja/operators.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace castserve::text::jinja {

absl::Status UndefinedError(const Value& undefined) {
  return absl::InvalidArgumentError(undefined.undefined_hint().empty()
                                        ? "value is undefined"
                                        : undefined.undefined_hint());
}

namespace {

absl::Status TypeError(absl::string_view op, const Value& left,
                       const Value& right) {
  return absl::InvalidArgumentError(
      absl::StrCat("unsupported operand type(s) for ", op, ": '",
                   TypeName(left), "' and '", TypeName(right), "'"));
}

bool IsInteger(const Value& v) {
  return v.kind() == Value::Kind::kInt || v.kind() == Value::Kind::kBool;
}

absl::StatusOr<Value> IntegerOperation(absl::string_view op, int64_t a,
                                       int64_t b) {
  int64_t result = 0;
  bool overflow = false;
  if (op == "+") {
    overflow = __builtin_add_overflow(a, b, &result);
  } else if (op == "-") {
    overflow = __builtin_sub_overflow(a, b, &result);
  } else if (op == "*") {
    overflow = __builtin_mul_overflow(a, b, &result);
  } else if (op == "//" || op == "%") {
    if (b == 0) {
      return absl::InvalidArgumentError("integer division or modulo by zero");
    }
    if (a == INT64_MIN && b == -1) {
      overflow = true;
    } else {
      int64_t quotient = a / b;
      int64_t remainder = a % b;
      if (remainder != 0 && ((remainder < 0) != (b < 0))) {
        --quotient;
        remainder += b;
      }
      result = op == "//" ? quotient : remainder;
    }
  } else if (op == "**") {
    if (b < 0) return Value::Float(std::pow(a, b));
    result = 1;
    for (int64_t i = 0; i < b && !overflow; ++i) {
      overflow = __builtin_mul_overflow(result, a, &result);
      if (result == 0 || result == 1) break;
    }
    if (!overflow && result == 1 && a == -1 && b % 2 == 1) result = -1;
  }
  if (overflow) {
    return absl::OutOfRangeError(
        absl::StrCat("integer result of ", op, " beyond 64 bits"));
  }
  return Value::Int(result);
}

absl::StatusOr<Value> FloatOperation(absl::string_view op, double a, double b) {
  if (op == "+") return Value::Float(a + b);
  if (op == "-") return Value::Float(a - b);
  if (op == "*") return Value::Float(a * b);
  if (op == "**") return Value::Float(std::pow(a, b));
  if (b == 0) return absl::InvalidArgumentError("float division by zero");
  if (op == "/") return Value::Float(a / b);
  double mod = std::fmod(a, b);
  if (mod != 0 && ((mod < 0) != (b < 0))) mod += b;
  if (op == "%") return Value::Float(mod);
  return Value::Float(std::floor((a - mod) / b + 0.5));  // //
}

// sequence * times; the size is checked before anything is built.
absl::StatusOr<Value> Repeat(const Value& sequence, int64_t times,
                             size_t max_bytes) {
  if (times < 0) times = 0;
  size_t unit = sequence.is_string() ? sequence.string_value().size()
                                     : sequence.list().size() * kItemBytes;
  if (unit == 0 || times == 0) {
    if (sequence.is_string()) return Value::String("");
    return Value::List({}, sequence.is_tuple());
  }
  if (static_cast<uint64_t>(times) > max_bytes / unit) {
    // unit * times, saturated: the product may not fit.
    size_t projected =
        static_cast<uint64_t>(times) > std::numeric_limits<size_t>::max() / unit
            ? std::numeric_limits<size_t>::max()
            : unit * static_cast<size_t>(times);
    return CheckValueBytes("'*'", projected, max_bytes);
  }
  if (sequence.is_string()) {
    const std::string& s = sequence.string_value();
    std::string out;
    out.reserve(s.size() * times);
    for (int64_t i = 0; i < times; ++i) out += s;
    return Value::String(std::move(out));
  }
  const std::vector<Value>& items = sequence.list();
  std::vector<Value> out;
  out.reserve(items.size() * times);
  for (int64_t i = 0; i < times; ++i) {
    out.insert(out.end(), items.begin(), items.end());
  }
  return Value::List(std::move(out), sequence.is_tuple());
}

}  // namespace

absl::StatusOr<Value> BinaryOperation(absl::string_view op, const Value& left,
                                      const Value& right,
                                      const ValueBounds& bounds) {
  if (op == "~") {
    std::string out;
    absl::Status status = AppendStr(left, bounds, &out);
    if (status.ok()) status = AppendStr(right, bounds, &out);
    if (!status.ok()) return status;
    return Value::String(std::move(out));
  }
  if (left.is_undefined()) return UndefinedError(left);
  if (right.is_undefined()) return UndefinedError(right);
  if (left.is_number() && right.is_number()) {
    if (op == "/") return FloatOperation(op, left.AsDouble(), right.AsDouble());
    if (IsInteger(left) && IsInteger(right)) {
      return IntegerOperation(op, left.int_value(), right.int_value());
    }
    return FloatOperation(op, left.AsDouble(), right.AsDouble());
  }
  if (op == "+" && left.kind() == right.kind() &&
      (left.is_string() ||
       (left.is_list() && left.is_tuple() == right.is_tuple() &&
        left.view_name().empty() && right.view_name().empty()))) {
    if (left.is_string()) {
      absl::Status status = CheckValueBytes(
          "'+'", left.string_value().size() + right.string_value().size(),
          bounds.max_bytes);
      if (!status.ok()) return status;
      return Value::String(left.string_value() + right.string_value());
    }
    absl::Status status = CheckValueBytes(
        "'+'", (left.list().size() + right.list().size()) * kItemBytes,
        bounds.max_bytes);
    if (!status.ok()) return status;
    std::vector<Value> items = left.list();
    items.insert(items.end(), right.list().begin(), right.list().end());
    return Value::List(std::move(items), left.is_tuple());
  }
  if (op == "*") {
    if ((left.is_string() || left.is_list()) && IsInteger(right)) {
      return Repeat(left, right.int_value(), bounds.max_bytes);
    }
    if ((right.is_string() || right.is_list()) && IsInteger(left)) {
      return Repeat(right, left.int_value(), bounds.max_bytes);
    }
  }
  if (op == "+" && left.is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "can only concatenate str (not \"", TypeName(right), "\") to str"));
  }
  if (op == "%" && left.is_string()) {
    return absl::UnimplementedError(
        "unsupported construct: printf-style '%' formatting of a string");
  }
  return TypeError(op, left, right);
}

absl::StatusOr<Value> Negate(const Value& operand) {
  if (operand.is_undefined()) return UndefinedError(operand);
  if (operand.kind() == Value::Kind::kFloat) {
    return Value::Float(-operand.float_value());
  }
  if (IsInteger(operand)) {
    if (operand.int_value() == INT64_MIN) {
      return absl::OutOfRangeError("integer result of - beyond 64 bits");
    }
    return Value::Int(-operand.int_value());
  }
  return absl::InvalidArgumentError(
      absl::StrCat("bad operand type for unary -: '", TypeName(operand), "'"));
}

absl::StatusOr<Value> UnaryPlus(const Value& operand) {
  if (operand.is_undefined()) return UndefinedError(operand);
  if (operand.kind() == Value::Kind::kBool) {
    return Value::Int(operand.int_value());
  }
  if (operand.is_number()) return operand;
  return absl::InvalidArgumentError(
      absl::StrCat("bad operand type for unary +: '", TypeName(operand), "'"));
}

namespace {

// -1, 0, 1 for Python's ordering, or a TypeError.
absl::StatusOr<int> Order(absl::string_view op, const Value& a,
                          const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (IsInteger(a) && IsInteger(b)) {
      return a.int_value() < b.int_value() ? -1 : a.int_value() > b.int_value();
    }
    double x = a.AsDouble(), y = b.AsDouble();
    if (std::isnan(x) || std::isnan(y)) return 2;  // Every test false.
    return x < y ? -1 : x > y;
  }
  if (a.is_string() && b.is_string()) {
    int c = a.string_value().compare(b.string_value());
    return c < 0 ? -1 : c > 0;
  }
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    size_t n = std::min(a.list().size(), b.list().size());
    for (size_t i = 0; i < n; ++i) {
      if (Equals(a.list()[i], b.list()[i])) continue;
      return Order(op, a.list()[i], b.list()[i]);
    }
    return a.list().size() < b.list().size()
               ? -1
               : a.list().size() > b.list().size();
  }
  if (a.is_undefined()) return UndefinedError(a);
  if (b.is_undefined()) return UndefinedError(b);
  return absl::InvalidArgumentError(
      absl::StrCat("'", op, "' not supported between instances of '",
                   TypeName(a), "' and '", TypeName(b), "'"));
}

absl::StatusOr<bool> Contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined:
      return false;  // Iterates as empty.
    case Value::Kind::kString:
      if (!item.is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat("'in <string>' requires string as left operand, not ",
                         TypeName(item)));
      }
      return container.string_value().find(item.string_value()) !=
             std::string::npos;
    case Value::Kind::kList:
      for (const Value& element : container.list()) {
        if (Equals(element, item)) return true;
      }
      return false;
    case Value::Kind::kDict:
      return item.is_string() &&
             container.dict().Find(item.string_value()) != nullptr;
    case Value::Kind::kIterator:
      for (const Value& element : container.ConsumeAll()) {
        if (Equals(element, item)) return true;
      }
      return false;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "argument of type '", TypeName(container), "' is not iterable"));
  }
}

}  // namespace

absl::StatusOr<bool> Compare(absl::string_view op, const Value& left,
                             const Value& right) {
  if (op == "==") return Equals(left, right);
  if (op == "!=") return !Equals(left, right);
  if (op == "in" || op == "notin") {
    absl::StatusOr<bool> contains = Contains(right, left);
    if (!contains.ok() || op == "in") return contains;
    return !*contains;
  }
  absl::StatusOr<int> order = Order(op, left, right);
  if (!order.ok()) return order.status();
  if (*order == 2) return false;
  if (op == "<") return *order < 0;
  if (op == "<=") return *order <= 0;
  if (op == ">") return *order > 0;
  return *order >= 0;  // >=
}

}  // namespace castserve::text::jinja
