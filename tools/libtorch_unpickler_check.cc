// Reads PyTorch zip checkpoints (torch.save) with LibTorch's own reader and
// says, per file, whether it could and what it found. It is the measurement
// behind castserve keeping its own restricted unpickler
// (casting/formats/state_dict_unpickler.h): see the README's "Written by hand".
//
//   bazel run //tools:libtorch_unpickler_check -- FILE.bin [FILE.bin...]
//
// Exit status: 0 when LibTorch read every file, 1 otherwise.

#include <ATen/ATen.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/import_read.h>
#include <torch/version.h>

#include <cstdio>
#include <optional>
#include <string>

namespace {

bool ReadWithLibTorch(const char* path) {
  try {
    caffe2::serialize::PyTorchStreamReader reader(path);
    // torch.save's archive is "<name>/data.pkl" plus "<name>/data/<key>";
    // the reader strips the leading folder.
    c10::IValue value = torch::jit::readArchiveAndTensors(
        "data", /*pickle_prefix=*/"", /*tensor_prefix=*/"data/",
        /*type_resolver=*/std::nullopt, /*obj_loader=*/std::nullopt,
        /*device=*/std::nullopt, reader);
    if (!value.isGenericDict()) {
      std::printf("%s: read, but the top level is %s, not a dict\n", path,
                  value.tagKind().c_str());
      return false;
    }
    std::printf("%s: read %zu entries\n", path, value.toGenericDict().size());
    return true;
  } catch (const c10::Error& e) {
    std::printf("%s: LibTorch %s refused it: %s\n", path, TORCH_VERSION,
                e.what_without_backtrace());
    return false;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: libtorch_unpickler_check FILE.bin...\n");
    return 2;
  }
  bool all_read = true;
  for (int i = 1; i < argc; ++i)
    all_read = ReadWithLibTorch(argv[i]) && all_read;
  return all_read ? 0 : 1;
}
