#include "casting/formats/state_dict_unpickler.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <unordered_map>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace castserve::casting {
namespace {

constexpr int kMaxDepth = 64;

struct Value;
using ValuePtr = std::shared_ptr<Value>;

struct Value {
  enum class Kind {
    kNone,
    kInt,
    kFloat,
    kString,
    kTuple,
    kList,
    kDict,  // items hold key, value, key, value, ...
    kGlobal,
    kStorage,
    kTensor,
  };
  explicit Value(Kind k) : kind(k) {}

  Kind kind;
  int64_t integer = 0;  // kInt (booleans are 0/1).
  std::string text;     // kString; kGlobal: "module.name".
  std::vector<ValuePtr> items;
  int depth = 1;         // Nesting depth, 1 for a leaf.
  bool frozen = false;   // Stored inside another container: immutable now.
  PickledTensor tensor;  // kStorage: dtype, key, numel; kTensor: all but name.
};

bool IsContainer(const Value& v) {
  return v.kind == Value::Kind::kTuple || v.kind == Value::Kind::kList ||
         v.kind == Value::Kind::kDict;
}

bool IsStorageClass(absl::string_view name) {
  return FindByTorchStorageClass(name).ok();
}

constexpr absl::string_view kOrderedDict = "collections.OrderedDict";
constexpr absl::string_view kRebuildTensor = "torch._utils._rebuild_tensor_v2";
constexpr absl::string_view kRebuildParameter =
    "torch._utils._rebuild_parameter";

class Machine {
 public:
  explicit Machine(absl::string_view pickle) : in_(pickle) {}

  absl::StatusOr<ValuePtr> Run() {
    while (true) {
      opcode_pos_ = pos_;
      uint64_t opcode;
      if (!ReadUint(1, opcode)) return Error("truncated: no STOP opcode");
      if (opcode == '.') {
        if (stack_.empty()) return Error("STOP with an empty stack");
        return stack_.back();
      }
      if (absl::Status s = Step(static_cast<uint8_t>(opcode)); !s.ok()) {
        return s;
      }
    }
  }

 private:
  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("data.pkl byte ", opcode_pos_, ": ", what));
  }

  bool ReadBytes(uint64_t n, absl::string_view& out) {
    if (n > in_.size() - pos_) return false;
    out = in_.substr(pos_, n);
    pos_ += n;
    return true;
  }

  bool ReadUint(int n, uint64_t& out) {
    absl::string_view bytes;
    if (!ReadBytes(n, bytes)) return false;
    out = 0;
    for (int i = n - 1; i >= 0; --i) {
      out = (out << 8) | static_cast<uint8_t>(bytes[i]);
    }
    return true;
  }

  bool ReadLine(std::string& out) {
    const size_t end = in_.find('\n', pos_);
    if (end == absl::string_view::npos) return false;
    out = std::string(in_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return true;
  }

  absl::StatusOr<ValuePtr> Pop() {
    if (stack_.empty() || (!marks_.empty() && marks_.back() == stack_.size())) {
      return Error("stack underflow");
    }
    ValuePtr v = std::move(stack_.back());
    stack_.pop_back();
    return v;
  }

  absl::StatusOr<std::vector<ValuePtr>> PopToMark() {
    if (marks_.empty()) return Error("no MARK");
    std::vector<ValuePtr> items(stack_.begin() + marks_.back(), stack_.end());
    stack_.resize(marks_.back());
    marks_.pop_back();
    return items;
  }

  absl::Status Push(Value::Kind kind) {
    stack_.push_back(std::make_shared<Value>(kind));
    return absl::OkStatus();
  }

  absl::Status PushInt(int64_t value) {
    auto v = std::make_shared<Value>(Value::Kind::kInt);
    v->integer = value;
    stack_.push_back(std::move(v));
    return absl::OkStatus();
  }

  absl::Status PushString(int length_bytes) {
    uint64_t length;
    absl::string_view text;
    if (!ReadUint(length_bytes, length) || !ReadBytes(length, text)) {
      return Error("truncated string");
    }
    auto v = std::make_shared<Value>(Value::Kind::kString);
    v->text = std::string(text);
    stack_.push_back(std::move(v));
    return absl::OkStatus();
  }

  // Stores `child` in `parent`, freezing it and tracking depth.
  absl::Status Adopt(Value& parent, ValuePtr child) {
    if (parent.frozen) return Error("container mutated after being stored");
    if (IsContainer(*child)) child->frozen = true;
    parent.depth = std::max(parent.depth, child->depth + 1);
    if (parent.depth > kMaxDepth) return Error("nesting too deep");
    parent.items.push_back(std::move(child));
    return absl::OkStatus();
  }

  absl::Status MakeContainer(Value::Kind kind, std::vector<ValuePtr> items) {
    if (kind == Value::Kind::kDict && items.size() % 2 != 0) {
      return Error("odd number of dict items");
    }
    auto container = std::make_shared<Value>(kind);
    for (ValuePtr& item : items) {
      if (absl::Status s = Adopt(*container, std::move(item)); !s.ok()) {
        return s;
      }
    }
    stack_.push_back(std::move(container));
    return absl::OkStatus();
  }

  absl::Status PushTupleOf(int count) {
    if (stack_.size() < static_cast<size_t>(count) ||
        (!marks_.empty() && stack_.size() - count < marks_.back())) {
      return Error("stack underflow");
    }
    std::vector<ValuePtr> items(stack_.end() - count, stack_.end());
    stack_.resize(stack_.size() - count);
    return MakeContainer(Value::Kind::kTuple, std::move(items));
  }

  // Appends `items` to the container just below them on the stack.
  absl::Status Extend(Value::Kind kind, std::vector<ValuePtr> items) {
    if (stack_.empty() || (!marks_.empty() && marks_.back() == stack_.size()) ||
        stack_.back()->kind != kind) {
      return Error(kind == Value::Kind::kDict
                       ? "SETITEM(S) target is not a dict"
                       : "APPEND(S) target is not a list");
    }
    if (kind == Value::Kind::kDict && items.size() % 2 != 0) {
      return Error("odd number of dict items");
    }
    Value& target = *stack_.back();
    for (ValuePtr& item : items) {
      if (absl::Status s = Adopt(target, std::move(item)); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  absl::Status PushGlobal(std::string name) {
    if (name != kOrderedDict && name != kRebuildTensor &&
        name != kRebuildParameter && !IsStorageClass(name)) {
      return Error(absl::StrCat("unsupported global ", name,
                                " (only a state dict of tensors is allowed)"));
    }
    auto v = std::make_shared<Value>(Value::Kind::kGlobal);
    v->text = std::move(name);
    stack_.push_back(std::move(v));
    return absl::OkStatus();
  }

  absl::Status Global() {
    std::string module, name;
    if (!ReadLine(module) || !ReadLine(name)) return Error("truncated GLOBAL");
    return PushGlobal(absl::StrCat(module, ".", name));
  }

  absl::Status StackGlobal() {
    auto name = Pop();
    if (!name.ok()) return name.status();
    auto module = Pop();
    if (!module.ok()) return module.status();
    if ((*name)->kind != Value::Kind::kString ||
        (*module)->kind != Value::Kind::kString) {
      return Error("STACK_GLOBAL needs two strings");
    }
    return PushGlobal(absl::StrCat((*module)->text, ".", (*name)->text));
  }

  absl::Status Memoize(uint64_t index) {
    if (stack_.empty()) return Error("memoize with an empty stack");
    memo_[index] = stack_.back();
    return absl::OkStatus();
  }

  absl::Status Get(int index_bytes) {
    uint64_t index;
    if (!ReadUint(index_bytes, index)) return Error("truncated GET");
    auto it = memo_.find(index);
    if (it == memo_.end()) return Error(absl::StrCat("memo ", index, " unset"));
    stack_.push_back(it->second);
    return absl::OkStatus();
  }

  absl::Status Put(int index_bytes) {
    uint64_t index;
    if (!ReadUint(index_bytes, index)) return Error("truncated PUT");
    return Memoize(index);
  }

  absl::Status Long1() {
    uint64_t n;
    absl::string_view bytes;
    if (!ReadUint(1, n) || !ReadBytes(n, bytes))
      return Error("truncated LONG1");
    if (n > 8) return Error("integer wider than 64 bits");
    uint64_t value = 0;
    for (int i = static_cast<int>(n) - 1; i >= 0; --i) {
      value = (value << 8) | static_cast<uint8_t>(bytes[i]);
    }
    if (n > 0 && n < 8 && (static_cast<uint8_t>(bytes[n - 1]) & 0x80)) {
      value |= ~uint64_t{0} << (8 * n);  // Sign-extend.
    }
    return PushInt(static_cast<int64_t>(value));
  }

  absl::Status BinInt() {
    uint64_t value;
    if (!ReadUint(4, value)) return Error("truncated BININT");
    return PushInt(static_cast<int32_t>(static_cast<uint32_t>(value)));
  }

  absl::Status UnsignedInt(int bytes) {
    uint64_t value;
    if (!ReadUint(bytes, value)) return Error("truncated integer");
    return PushInt(static_cast<int64_t>(value));
  }

  absl::Status BinFloat() {
    absl::string_view bytes;
    if (!ReadBytes(8, bytes)) return Error("truncated BINFLOAT");
    auto v = std::make_shared<Value>(Value::Kind::kFloat);
    stack_.push_back(std::move(v));  // The value itself is never needed.
    return absl::OkStatus();
  }

  absl::Status Bool(bool value) { return PushInt(value ? 1 : 0); }

  absl::StatusOr<std::vector<int64_t>> IntTuple(const Value& v,
                                                absl::string_view what) const {
    if (v.kind != Value::Kind::kTuple) {
      return Error(absl::StrCat(what, " must be a tuple"));
    }
    std::vector<int64_t> ints;
    for (const ValuePtr& item : v.items) {
      if (item->kind != Value::Kind::kInt) {
        return Error(absl::StrCat(what, " must hold integers"));
      }
      ints.push_back(item->integer);
    }
    return ints;
  }

  // _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks
  // [, metadata]).
  absl::StatusOr<ValuePtr> RebuildTensor(const std::vector<ValuePtr>& args) {
    if (args.size() < 4 || args.size() > 7 ||
        args[0]->kind != Value::Kind::kStorage ||
        args[1]->kind != Value::Kind::kInt) {
      return Error("bad arguments to _rebuild_tensor_v2");
    }
    auto tensor = std::make_shared<Value>(Value::Kind::kTensor);
    tensor->tensor = args[0]->tensor;
    tensor->tensor.storage_offset = args[1]->integer;
    auto shape = IntTuple(*args[2], "tensor size");
    if (!shape.ok()) return shape.status();
    auto stride = IntTuple(*args[3], "tensor stride");
    if (!stride.ok()) return stride.status();
    if (shape->size() != stride->size()) {
      return Error("tensor size and stride differ in length");
    }
    tensor->tensor.shape = std::move(*shape);
    tensor->tensor.stride = std::move(*stride);
    return tensor;
  }

  absl::Status Reduce() {
    auto args = Pop();
    if (!args.ok()) return args.status();
    auto callable = Pop();
    if (!callable.ok()) return callable.status();
    if ((*callable)->kind != Value::Kind::kGlobal ||
        (*args)->kind != Value::Kind::kTuple) {
      return Error("REDUCE needs a global and an argument tuple");
    }
    const std::string& name = (*callable)->text;
    const std::vector<ValuePtr>& items = (*args)->items;
    if (name == kOrderedDict && items.empty()) {
      return Push(Value::Kind::kDict);
    }
    if (name == kRebuildTensor) {
      auto tensor = RebuildTensor(items);
      if (!tensor.ok()) return tensor.status();
      stack_.push_back(std::move(*tensor));
      return absl::OkStatus();
    }
    if (name == kRebuildParameter && items.size() >= 1 &&
        items[0]->kind == Value::Kind::kTensor) {
      stack_.push_back(items[0]);
      return absl::OkStatus();
    }
    return Error(absl::StrCat("unsupported call of ", name));
  }

  // BUILD sets attributes (OrderedDict's _metadata, a Parameter's state):
  // nothing a tensor entry needs, so the state is dropped.
  absl::Status Build() {
    auto state = Pop();
    if (!state.ok()) return state.status();
    if (stack_.empty() || (stack_.back()->kind != Value::Kind::kDict &&
                           stack_.back()->kind != Value::Kind::kTensor)) {
      return Error("BUILD of something other than a dict or tensor");
    }
    return absl::OkStatus();
  }

  // ('storage', storage type, key, location, numel) -> a storage.
  absl::Status PersistentLoad() {
    auto pid = Pop();
    if (!pid.ok()) return pid.status();
    const std::vector<ValuePtr>& f = (*pid)->items;
    if ((*pid)->kind != Value::Kind::kTuple || f.size() != 5 ||
        f[0]->kind != Value::Kind::kString || f[0]->text != "storage" ||
        f[1]->kind != Value::Kind::kGlobal || !IsStorageClass(f[1]->text) ||
        f[2]->kind != Value::Kind::kString ||
        f[3]->kind != Value::Kind::kString || f[4]->kind != Value::Kind::kInt) {
      return Error("persistent id is not ('storage', type, key, location, n)");
    }
    auto storage = std::make_shared<Value>(Value::Kind::kStorage);
    storage->tensor.dtype = (*FindByTorchStorageClass(f[1]->text))->dtype;
    storage->tensor.storage_key = f[2]->text;
    storage->tensor.storage_numel = f[4]->integer;
    stack_.push_back(std::move(storage));
    return absl::OkStatus();
  }

  absl::Status FromMark(Value::Kind kind, bool extend) {
    auto items = PopToMark();
    if (!items.ok()) return items.status();
    if (extend) return Extend(kind, std::move(*items));
    return MakeContainer(kind, std::move(*items));
  }

  absl::Status PopTwoAndExtend(Value::Kind kind, int count) {
    std::vector<ValuePtr> items(count);
    for (int i = count - 1; i >= 0; --i) {
      auto v = Pop();
      if (!v.ok()) return v.status();
      items[i] = std::move(*v);
    }
    return Extend(kind, std::move(items));
  }

  absl::Status Step(uint8_t opcode) {
    uint64_t ignored;
    switch (opcode) {
      case 0x80:
        return ReadUint(1, ignored) ? absl::OkStatus()
                                    : Error("truncated PROTO");
      case 0x95:
        return ReadUint(8, ignored) ? absl::OkStatus()
                                    : Error("truncated FRAME");
      case '(':
        marks_.push_back(stack_.size());
        return absl::OkStatus();
      case '}':
        return Push(Value::Kind::kDict);
      case ']':
        return Push(Value::Kind::kList);
      case ')':
        return MakeContainer(Value::Kind::kTuple, {});
      case 'N':
        return Push(Value::Kind::kNone);
      case 0x88:
        return Bool(true);
      case 0x89:
        return Bool(false);
      case 'J':
        return BinInt();
      case 'K':
        return UnsignedInt(1);
      case 'M':
        return UnsignedInt(2);
      case 0x8a:
        return Long1();
      case 'G':
        return BinFloat();
      case 'X':
        return PushString(4);
      case 0x8c:
        return PushString(1);
      case 0x8d:
        return PushString(8);
      case 'U':
        return PushString(1);
      case 'T':
        return PushString(4);
      case 'C':
        return PushString(1);
      case 'B':
        return PushString(4);
      case 'c':
        return Global();
      case 0x93:
        return StackGlobal();
      case 'q':
        return Put(1);
      case 'r':
        return Put(4);
      case 0x94:
        return Memoize(memo_.size());
      case 'h':
        return Get(1);
      case 'j':
        return Get(4);
      case 't':
        return FromMark(Value::Kind::kTuple, false);
      case 0x85:
        return PushTupleOf(1);
      case 0x86:
        return PushTupleOf(2);
      case 0x87:
        return PushTupleOf(3);
      case 'l':
        return FromMark(Value::Kind::kList, false);
      case 'd':
        return FromMark(Value::Kind::kDict, false);
      case 'e':
        return FromMark(Value::Kind::kList, true);
      case 'u':
        return FromMark(Value::Kind::kDict, true);
      case 'a':
        return PopTwoAndExtend(Value::Kind::kList, 1);
      case 's':
        return PopTwoAndExtend(Value::Kind::kDict, 2);
      case 'R':
        return Reduce();
      case 'b':
        return Build();
      case 'Q':
        return PersistentLoad();
      default:
        return Error(
            absl::StrFormat("unsupported pickle opcode 0x%02x", opcode));
    }
  }

  absl::string_view in_;
  size_t pos_ = 0;
  size_t opcode_pos_ = 0;
  std::vector<ValuePtr> stack_;
  std::vector<size_t> marks_;  // Stack sizes at each open MARK.
  std::unordered_map<uint64_t, ValuePtr> memo_;
};

}  // namespace

absl::StatusOr<std::vector<PickledTensor>> UnpickleStateDict(
    absl::string_view pickle) {
  absl::StatusOr<ValuePtr> root = Machine(pickle).Run();
  if (!root.ok()) return root.status();
  if ((*root)->kind != Value::Kind::kDict) {
    return absl::InvalidArgumentError(
        "data.pkl: expected a dict of tensors (a state_dict)");
  }
  std::vector<PickledTensor> tensors;
  const std::vector<ValuePtr>& items = (*root)->items;
  for (size_t i = 0; i + 1 < items.size(); i += 2) {
    if (items[i]->kind != Value::Kind::kString) {
      return absl::InvalidArgumentError(
          "data.pkl: a state_dict key is not a "
          "string");
    }
    if (items[i + 1]->kind != Value::Kind::kTensor) {
      return absl::InvalidArgumentError(absl::StrCat(
          "data.pkl: state_dict entry '", items[i]->text, "' is not a tensor"));
    }
    tensors.push_back(items[i + 1]->tensor);
    tensors.back().name = items[i]->text;
  }
  return tensors;
}

}  // namespace castserve::casting
