// libFuzzer target: the restricted state-dict unpickler and the torch.save
// zip reader (zip directory, records, entries, copy-out) on arbitrary bytes.
// Built by tools/run_fuzzers.sh.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "casting/formats/fuzz/fuzz_util.h"
#include "casting/formats/state_dict_unpickler.h"
#include "casting/formats/torch_zip_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace castserve::casting;
  // The input as data.pkl.
  (void)UnpickleStateDict(
      absl::string_view(reinterpret_cast<const char*>(data), size));
  // The input as a whole checkpoint file.
  fuzz::MemoryFile file(data, size);
  auto checkpoint = OpenTorchZip(file.path());
  if (!checkpoint.ok()) return 0;
  std::vector<uint8_t> buffer;
  for (const TensorEntry& entry : (*checkpoint)->tensors()) {
    buffer.resize(entry.size_bytes);
    if (!(*checkpoint)->CopyTo(entry, absl::MakeSpan(buffer)).ok()) {
      __builtin_trap();
    }
  }
  return 0;
}
