#ifndef CASTSERVE_CASTING_FORMATS_STATE_DICT_UNPICKLER_H_
#define CASTSERVE_CASTING_FORMATS_STATE_DICT_UNPICKLER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "casting/formats/checkpoint.h"

namespace castserve::casting {

// One tensor of a pickled state dict: metadata only; its bytes live in the
// zip record `<archive>/data/<storage_key>`.
struct PickledTensor {
  std::string name;
  DType dtype = DType::kF32;
  std::string storage_key;
  int64_t storage_numel = 0;   // Elements of the whole storage.
  int64_t storage_offset = 0;  // In elements.
  std::vector<int64_t> shape;
  std::vector<int64_t> stride;  // In elements.
};

// Decodes the `data.pkl` of a torch.save zip checkpoint holding a state
// dict: a dict or collections.OrderedDict from string to tensor.
//
// A restricted pickle machine, not Python's: it knows the opcodes of pickle
// protocols 2-5 that such a file uses and exactly these globals:
// collections.OrderedDict, torch._utils._rebuild_tensor_v2,
// torch._utils._rebuild_parameter and the typed storage classes
// (torch.FloatStorage ... torch.BoolStorage). Anything else, and any
// malformed stream (truncation, stack underflow, wrong argument types,
// nesting deeper than 64, a container mutated after it was stored inside
// another), is an InvalidArgument error naming the byte offset. No code from
// the file runs; memory use is linear in the pickle size.
//
// Why not LibTorch's Unpickler: the one in LibTorch 1.13 turns
// collections.OrderedDict into None (so `torch.save(model.state_dict())`
// fails) and lacks the SETITEM opcode (one-entry dicts fail).
//
// Thread safety: a pure function.
absl::StatusOr<std::vector<PickledTensor>> UnpickleStateDict(
    absl::string_view pickle);

}  // namespace castserve::casting

#endif  // CASTSERVE_CASTING_FORMATS_STATE_DICT_UNPICKLER_H_
