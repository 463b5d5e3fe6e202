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
#include "text/sentencepiece_model.h"

#include <dlfcn.h>
#include <sentencepiece_processor.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace castserve::text {
namespace {

using Processor = sentencepiece::SentencePieceProcessor;

struct Library {
  void (*construct)(Processor*) = nullptr;
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
        dlopen("libsentencepiece.so.0", RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
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
// pointer to a virtual member holds 1 + its byte offset in the vtable).
template <typename MemberFunction>
void* VirtualEntry(const Processor* processor, MemberFunction member) {
  struct {
    uintptr_t pointer;
    ptrdiff_t adjustment;
  } raw;
  static_assert(sizeof(raw) == sizeof(member));
  std::memcpy(&raw, &member, sizeof(raw));
  void* const* vtable = *reinterpret_cast<void* const* const*>(processor);
  return vtable[(raw.pointer - 1) / sizeof(void*)];
}

}  // namespace

SentencePieceModel::SentencePieceModel(std::unique_ptr<Processor> processor)
    : processor_(std::move(processor)) {}

SentencePieceModel::~SentencePieceModel() = default;

std::unique_ptr<SentencePieceModel> SentencePieceModel::Load(
    const std::string& path, std::string* error) {
  const Library& library = GetLibrary();
  if (!library.error.empty()) {
    *error = library.error;
    return nullptr;
  }
  void* memory = ::operator new(sizeof(Processor));
  library.construct(static_cast<Processor*>(memory));
  std::unique_ptr<Processor> processor(static_cast<Processor*>(memory));
  using LoadFunction = Status (*)(Processor*, std::string_view);
  const auto load = reinterpret_cast<LoadFunction>(VirtualEntry(
      processor.get(),
      static_cast<sentencepiece::util::Status (Processor::*)(std::string_view)>(
          &Processor::Load)));
  const Status status = load(processor.get(), path);
  if (!status.ok()) {
    *error = status.message();
    return nullptr;
  }
  return std::unique_ptr<SentencePieceModel>(
      new SentencePieceModel(std::move(processor)));
}

bool SentencePieceModel::Encode(std::string_view text, std::vector<int>* ids,
                                std::string* error) const {
  using EncodeFunction =
      Status (*)(const Processor*, std::string_view, std::vector<int>*);
  const auto encode = reinterpret_cast<EncodeFunction>(VirtualEntry(
      processor_.get(),
      static_cast<sentencepiece::util::Status (Processor::*)(
          std::string_view, std::vector<int>*) const>(&Processor::Encode)));
  const Status status = encode(processor_.get(), text, ids);
  if (!status.ok()) *error = status.message();
  return status.ok();
}

bool SentencePieceModel::Decode(const std::vector<int>& ids, std::string* text,
                                std::string* error) const {
  using DecodeFunction =
      Status (*)(const Processor*, const std::vector<int>&, std::string*);
  const auto decode = reinterpret_cast<DecodeFunction>(VirtualEntry(
      processor_.get(),
      static_cast<sentencepiece::util::Status (Processor::*)(
          const std::vector<int>&, std::string*) const>(&Processor::Decode)));
  const Status status = decode(processor_.get(), ids, text);
  if (!status.ok()) *error = status.message();
  return status.ok();
}

int SentencePieceModel::piece_count() const {
  return processor_->GetPieceSize();
}

int SentencePieceModel::bos_id() const { return processor_->bos_id(); }

int SentencePieceModel::pad_id() const { return processor_->pad_id(); }

bool SentencePieceModel::IsControl(int id) const {
  return processor_->IsControl(id);
}

int SentencePieceModel::PieceToId(std::string_view piece) const {
  const int id = processor_->PieceToId(piece);
  // Unknown pieces map to the unknown piece's id.
  if (processor_->IsUnknown(id) && processor_->IdToPiece(id) != piece) {
    return -1;
  }
  return id;
}

}  // namespace castserve::text
