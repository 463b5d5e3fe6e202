// The values a chat template computes with, shaped as jinja2 sees Python
// objects: undefined (jinja2's default Undefined), None, bool, int, float,
// str, list (or tuple), dict (string keys, insertion order kept, as Python's
// dict), namespace (the one mutable value) and callables (macros, globals,
// bound methods).
//
// A Value is cheap to copy: strings, lists and dicts are shared and never
// changed once built. A namespace is shared by reference, as in Python.
// Values built for one render belong to that render; a Value tree built by
// the caller (the context) may be shared by concurrent renders, as long as it
// holds no namespace.
#ifndef CASTSERVE_TEXT_JINJA_VALUE_H_
#define CASTSERVE_TEXT_JINJA_VALUE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace castserve::text::jinja {

class Value;
class Dict;
struct CallArgs;

using NativeFunction = std::function<absl::StatusOr<Value>(const CallArgs&)>;

class Value {
 public:
  enum class Kind {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kNamespace,
    kCallable,
    kIterator,  // A generator or iterator some filters return.
  };

  // Undefined, as a missing variable.
  Value() = default;
  // `hint` is jinja2's message for using it: "'x' is undefined".
  static Value Undefined(std::string hint);
  static Value None();
  static Value Bool(bool value);
  static Value Int(int64_t value);
  static Value Float(double value);
  static Value String(std::string value);
  static Value List(std::vector<Value> items, bool is_tuple = false);
  // dict.keys(), .values(), .items(): a list printed as Python prints the
  // view ("dict_items([('a', 1)])") and not subscriptable.
  static Value DictView(std::vector<Value> items, std::string view_name);
  static Value FromDict(Dict dict);
  static Value Namespace(Dict attributes);
  static Value Function(std::string name, NativeFunction function);
  // What jinja2's lazy filters (select, map, unique, items, ...) and
  // reversed() return: iterable once, always true, without len() or
  // indexing. `type_name` is Python's ("generator",
  // "list_reverseiterator").
  static Value Iterator(std::vector<Value> items, std::string type_name);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  // int, float or bool (Python's numbers.Number).
  bool is_number() const {
    return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool;
  }

  bool bool_value() const { return bool_; }
  int64_t int_value() const { return int_; }
  double float_value() const { return float_; }
  // The number as a double (bool and int included).
  double AsDouble() const;
  const std::string& string_value() const { return *string_; }
  const std::vector<Value>& list() const { return *list_; }
  bool is_tuple() const { return is_tuple_; }
  // "dict_keys", "dict_values" or "dict_items" for a view; "" otherwise.
  const std::string& view_name() const { return hint_; }
  const Dict& dict() const { return *dict_; }
  // A namespace's attributes; writable through a const Value, as a Python
  // object is through any reference to it.
  Dict& namespace_attributes() const { return *namespace_; }
  const std::string& function_name() const { return hint_; }
  const NativeFunction& function() const { return *function_; }
  const std::string& undefined_hint() const { return hint_; }
  // An iterator's items not yet consumed, and consuming them (all, or the
  // next one).
  std::vector<Value> ConsumeAll() const;
  std::optional<Value> ConsumeNext() const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool bool_ = false;
  bool is_tuple_ = false;
  int64_t int_ = 0;
  double float_ = 0;
  std::shared_ptr<const std::string> string_;
  std::shared_ptr<const std::vector<Value>> list_;
  std::shared_ptr<const Dict> dict_;
  std::shared_ptr<Dict> namespace_;
  std::shared_ptr<const NativeFunction> function_;
  struct IteratorState {
    std::vector<Value> items;
    size_t position = 0;
  };
  std::shared_ptr<IteratorState> iterator_;
  // Undefined: the message; function: its name; iterator: its type; list:
  // its view name.
  std::string hint_;
};

// A Python dict with string keys: insertion order, a re-set key keeps its
// place.
class Dict {
 public:
  void Set(std::string key, Value value);
  const Value* Find(absl::string_view key) const;
  const std::vector<std::pair<std::string, Value>>& items() const {
    return items_;
  }
  size_t size() const { return items_.size(); }

 private:
  std::vector<std::pair<std::string, Value>> items_;
  absl::flat_hash_map<std::string, size_t> index_;
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

// Python's truth value (Undefined is false, a namespace true).
bool Truthy(const Value& value);
// Python's ==: numbers across int/float/bool, lists and dicts deeply,
// undefined equal only to undefined.
bool Equals(const Value& a, const Value& b);
// Python's type name: "str", "int", "list", "dict", "NoneType", ...
absl::string_view TypeName(const Value& value);
// Whether an iterator is in `value` (itself, or inside its lists and
// dicts): jinja2 prints those as their memory address.
bool ContainsIterator(const Value& value);
// Python's str() and repr() of the value (str of undefined is "").
std::string ToStr(const Value& value);
std::string ToRepr(const Value& value);
// Python's repr(float): the shortest text that reads back to `value`.
std::string FloatRepr(double value);

}  // namespace castserve::text::jinja

#endif  // CASTSERVE_TEXT_JINJA_VALUE_H_
