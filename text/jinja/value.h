// The values a chat template computes with, shaped as jinja2 sees Python
// objects: undefined (jinja2's default Undefined), None, bool, int, float,
// str, list (or tuple), dict (string keys, insertion order kept, as Python's
// dict), namespace (the one mutable value) and callables (macros, globals,
// bound methods).
//
// A Value is cheap to copy: strings, lists and dicts are shared and never
// changed once built. A namespace is shared by reference, as in Python, and
// made only by a NamespaceOwner (one per render), which frees it. Values
// built for one render belong to that render; a Value tree built by the
// caller (the context) holds no namespace and may be shared by concurrent
// renders.
//
// Every Value records its depth: 0 for a scalar, 1 + its deepest item for a
// list, dict or iterator; a namespace counts 1 whatever it holds (it is a
// reference, freed by its owner) and a bound method 1 + its object's. Walks
// that follow items (==, ordering, destruction) recurse at most that deep;
// printing follows namespaces too and bounds its own recursion.
#ifndef CASTSERVE_TEXT_JINJA_VALUE_H_
#define CASTSERVE_TEXT_JINJA_VALUE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace castserve::text::jinja {

class Value;
class Dict;
class NamespaceOwner;
struct CallArgs;

// What any one value a render builds or prints may reach.
struct ValueBounds {
  // A string's bytes; a list or dict counts kItemBytes per item
  // (Limits::max_output_bytes).
  size_t max_bytes = 0;
  // Lists, dicts, iterators and namespaces inside one another
  // (Limits::max_value_depth).
  int max_depth = 0;
};
inline constexpr size_t kItemBytes = 16;

// ResourceExhausted naming `what` ("'split'", "str.join()", ...), the bytes
// it would build and max_output_bytes, when `bytes` > `max_bytes`.
absl::Status CheckValueBytes(absl::string_view what, size_t bytes,
                             size_t max_bytes);
// ResourceExhausted naming max_value_depth.
absl::Status ValueTooDeep(int max_depth);
// Printing a generator or iterator (jinja2 would print its memory address):
// Unimplemented.
absl::Status PrintingIteratorError();

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
  // `captured_depth`: the depth of the values `function` holds (a bound
  // method's object), so that freeing it stays within the recorded depth.
  static Value Function(std::string name, NativeFunction function,
                        int captured_depth = 0);
  // What jinja2's lazy filters (select, map, unique, items, ...) and
  // reversed() return: iterable once, always true, without len() or
  // indexing. `type_name` is Python's ("generator",
  // "list_reverseiterator").
  static Value Iterator(std::vector<Value> items, std::string type_name);

  Kind kind() const { return kind_; }
  // See the file comment.
  int depth() const { return depth_; }
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
  friend class NamespaceOwner;

  Kind kind_ = Kind::kUndefined;
  int depth_ = 0;
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

// Makes and owns one render's namespaces (the only mutable values, so the
// only way values can refer to themselves or chain without bound): holding
// each one until it is destroyed, it frees namespaces one at a time, never
// by recursion through one another, and frees cycles. Namespaces only this
// owner still holds are dropped as it goes, so a render that makes many
// keeps about twice the number alive. Not thread-safe (one render).
class NamespaceOwner {
 public:
  NamespaceOwner() = default;
  NamespaceOwner(const NamespaceOwner&) = delete;
  NamespaceOwner& operator=(const NamespaceOwner&) = delete;
  ~NamespaceOwner();

  Value Create(Dict attributes);

 private:
  void DropUnreferenced();

  std::vector<std::shared_ptr<Dict>> namespaces_;
  size_t kept_after_drop_ = 0;
};

// Python's truth value (Undefined is false, a namespace true).
bool Truthy(const Value& value);
// Python's ==: numbers across int/float/bool, lists and dicts deeply,
// undefined equal only to undefined.
bool Equals(const Value& a, const Value& b);
// Python's type name: "str", "int", "list", "dict", "NoneType", ...
absl::string_view TypeName(const Value& value);
// Appends Python's str() (str of undefined is "") or repr() of `value` to
// `*out`, checking the bounds while it prints: ResourceExhausted before
// `*out` would grow past bounds.max_bytes (a list that holds one list many
// times prints it many times) or the printing would recurse past
// bounds.max_depth (namespaces may hold themselves); Unimplemented for a
// generator or iterator anywhere inside (PrintingIteratorError). On error
// `*out` holds a prefix of the text.
absl::Status AppendStr(const Value& value, const ValueBounds& bounds,
                       std::string* out);
absl::Status AppendRepr(const Value& value, const ValueBounds& bounds,
                        std::string* out);
// The same into a new string.
absl::StatusOr<std::string> ToStr(const Value& value,
                                  const ValueBounds& bounds);
absl::StatusOr<std::string> ToRepr(const Value& value,
                                   const ValueBounds& bounds);
// Python's repr(float): the shortest text that reads back to `value`.
std::string FloatRepr(double value);

}  // namespace castserve::text::jinja

#endif  // CASTSERVE_TEXT_JINJA_VALUE_H_
