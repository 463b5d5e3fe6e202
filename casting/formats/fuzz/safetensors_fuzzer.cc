// libFuzzer target: the safetensors header parser and the whole open path
// (length prefix, header, validation, copy-out) on arbitrary bytes. Built by
// tools/run_fuzzers.sh.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "casting/formats/fuzz/fuzz_util.h"
#include "casting/formats/safetensors_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace castserve::casting;
  // The input as header JSON text.
  (void)ParseSafetensorsHeader(
      absl::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
  // The input as a whole file.
  fuzz::MemoryFile file(data, size);
  auto checkpoint = OpenSafetensors(file.path());
  if (!checkpoint.ok()) return 0;
  std::vector<uint8_t> buffer;
  for (const TensorEntry& entry : (*checkpoint)->tensors()) {
    buffer.resize(entry.size_bytes);
    if (!(*checkpoint)->CopyTo(entry, absl::MakeSpan(buffer)).ok()) {
      __builtin_trap();  // The file did not change: a copy must succeed.
    }
  }
  return 0;
}
