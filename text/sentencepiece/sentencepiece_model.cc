// No Abseil header here (see the header).
//
// libsentencepiece is not linked: Debian's libsentencepiece.so.0 carries
// its own protobuf 3.14 with exported symbols, and in a process that also
// links libprotobuf (the daemon) one of the two copies aborts at start
// ("compiled against version 3.14.0 ... installed version (3.21.12)") or
// crashes. It is dlopen'ed on first use with RTLD_LOCAL | RTLD_DEEPBIND, so
// its protobuf binds to itself and nothing else sees it. The processor is
// then used through its vtable (every method used is virtual); the three
// non-virtual symbols needed (constructor, util::Status's destructor and
// message) come from dlsym. Status-returning methods are called through the
// vtable with a layout-compatible Status (one pointer, non-trivial
// destructor, so returned through a hidden pointer like the real one).
#include "text/sentencepiece/sentencepiece_model.h"

#include <dlfcn.h>
#include <sentencepiece_processor.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace castserve::text {
namespace {

using Processor = sentencepiece::SentencePieceProcessor;

// The sanitizers' runtimes refuse RTLD_DEEPBIND (they must see every
// allocation); sanitized builds load the library without it, which is fine
// where libprotobuf is not in the process (//text's own tests).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define CASTSERVE_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define CASTSERVE_SANITIZED 1
#endif
#endif
#ifdef CASTSERVE_SANITIZED
constexpr int kIsolation = 0;
#else
constexpr int kIsolation = RTLD_DEEPBIND;
#endif

struct Library {
  void (*construct)(void*) = nullptr;
  void (*destroy_status)(void*) = nullptr;
  const char* (*status_message)(const void*) = nullptr;
  std::string error;  // why the library is unusable; empty when it is
};

template <typename T>
bool Resolve(void* handle, const char* symbol, T* out, std::string* error) {
  *out = reinterpret_cast<T>(dlsym(handle, symbol));
  if (*out == nullptr) *error = std::string("libsentencepiece lacks ") + symbol;
  return *out != nullptr;
}

const Library& GetLibrary() {
  static const Library* const library = [] {
    auto* loaded = new Library();
    void* handle =
        dlopen("libsentencepiece.so.0", RTLD_NOW | RTLD_LOCAL | kIsolation);
    if (handle == nullptr) {
      const char* reason = dlerror();
      loaded->error = reason != nullptr ? reason : "dlopen failed";
      return loaded;
    }
    Resolve(handle, "_ZN13sentencepiece22SentencePieceProcessorC1Ev",
            &loaded->construct, &loaded->error) &&
        Resolve(handle, "_ZN13sentencepiece4util6StatusD1Ev",
                &loaded->destroy_status, &loaded->error) &&
        Resolve(handle, "_ZNK13sentencepiece4util6Status13error_messageEv",
                &loaded->status_message, &loaded->error);
    return loaded;
  }();
  return *library;
}

// Layout-compatible with sentencepiece::util::Status (a unique_ptr to its
// error; null when OK).
class Status {
 public:
  Status() = default;
  Status(const Status&) = delete;
  Status& operator=(const Status&) = delete;
  ~Status() { GetLibrary().destroy_status(this); }
  bool ok() const { return rep_ == nullptr; }
  std::string message() const { return GetLibrary().status_message(this); }

 private:
  void* rep_ = nullptr;
};
static_assert(sizeof(Status) == sizeof(sentencepiece::util::Status));

// The vtable entry of a virtual member function (Itanium C++ ABI: a
// pointer to a virtual member holds 1 + its byte offset in the vtable), as
// a plain function taking the object first. Nothing here calls a member of
// the processor directly: UBSan's vptr checks would need its typeinfo,
// which only the unlinked library has.
template <typename Function, typename MemberFunction>
Function Entry(const void* processor, MemberFunction member) {
  struct {
    uintptr_t pointer;
    ptrdiff_t adjustment;
  } raw;
  static_assert(sizeof(raw) == sizeof(member));
  std::memcpy(&raw, &member, sizeof(raw));
  void* const* vtable = *static_cast<void* const* const*>(processor);
  return reinterpret_cast<Function>(vtable[(raw.pointer - 1) / sizeof(void*)]);
}

// The destructor is the class's first virtual function: vtable entries 0
// (complete-object destructor) and 1 (deleting destructor).
void DeleteProcessor(void* processor) {
  void* const* vtable = *static_cast<void* const* const*>(processor);
  reinterpret_cast<void (*)(void*)>(vtable[1])(processor);
}

}  // namespace

SentencePieceModel::SentencePieceModel(void* processor)
    : processor_(processor) {}

SentencePieceModel::~SentencePieceModel() { DeleteProcessor(processor_); }

std::unique_ptr<SentencePieceModel> SentencePieceModel::Load(
    const std::string& path, std::string* error) {
  const Library& library = GetLibrary();
  if (!library.error.empty()) {
    *error = library.error;
    return nullptr;
  }
  void* processor = ::operator new(sizeof(Processor));
  library.construct(processor);
  std::unique_ptr<SentencePieceModel> model(new SentencePieceModel(processor));
  const auto load = Entry<Status (*)(void*, std::string_view)>(
      processor,
      static_cast<sentencepiece::util::Status (Processor::*)(std::string_view)>(
          &Processor::Load));
  const Status status = load(processor, path);
  if (!status.ok()) {
    *error = status.message();
    return nullptr;
  }
  return model;
}

bool SentencePieceModel::Encode(std::string_view text, std::vector<int>* ids,
                                std::string* error) const {
  const auto encode =
      Entry<Status (*)(const void*, std::string_view, std::vector<int>*)>(
          processor_,
          static_cast<sentencepiece::util::Status (Processor::*)(
              std::string_view, std::vector<int>*) const>(&Processor::Encode));
  const Status status = encode(processor_, text, ids);
  if (!status.ok()) *error = status.message();
  return status.ok();
}

bool SentencePieceModel::Decode(const std::vector<int>& ids, std::string* text,
                                std::string* error) const {
  const auto decode =
      Entry<Status (*)(const void*, const std::vector<int>&, std::string*)>(
          processor_, static_cast<sentencepiece::util::Status (Processor::*)(
                          const std::vector<int>&, std::string*) const>(
                          &Processor::Decode));
  const Status status = decode(processor_, ids, text);
  if (!status.ok()) *error = status.message();
  return status.ok();
}

int SentencePieceModel::piece_count() const {
  return Entry<int (*)(const void*)>(processor_,
                                     &Processor::GetPieceSize)(processor_);
}

int SentencePieceModel::bos_id() const {
  return Entry<int (*)(const void*)>(processor_,
                                     &Processor::bos_id)(processor_);
}

int SentencePieceModel::pad_id() const {
  return Entry<int (*)(const void*)>(processor_,
                                     &Processor::pad_id)(processor_);
}

bool SentencePieceModel::IsControl(int id) const {
  return Entry<bool (*)(const void*, int)>(processor_, &Processor::IsControl)(
      processor_, id);
}

int SentencePieceModel::PieceToId(std::string_view piece) const {
  const int id = Entry<int (*)(const void*, std::string_view)>(
      processor_, &Processor::PieceToId)(processor_, piece);
  const bool unknown = Entry<bool (*)(const void*, int)>(
      processor_, &Processor::IsUnknown)(processor_, id);
  // Unknown pieces map to the unknown piece's id.
  if (unknown &&
      Entry<const std::string& (*)(const void*, int)>(
          processor_, &Processor::IdToPiece)(processor_, id) != piece) {
    return -1;
  }
  return id;
}

}  // namespace castserve::text
