#ifndef CASTSERVE_CASTING_FORMATS_TORCH_ZIP_READER_H_
#define CASTSERVE_CASTING_FORMATS_TORCH_ZIP_READER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "casting/formats/checkpoint.h"
#include "platform/file_system.h"

namespace castserve::casting {

// Opens a PyTorch zip checkpoint (`pytorch_model.bin`, `.pt`/`.pth` written by
// torch.save since 1.6): a zip archive of stored (uncompressed) records
// `<archive>/data.pkl` (the pickled object) and `<archive>/data/<key>` (one
// record per storage), mapped in place.
//
// What is read at open: the zip end-of-central-directory and central
// directory, the 30-byte local header of each record (for its data offset),
// and data.pkl; the storages' bytes are never touched. The pickle is decoded
// by the restricted machine of state_dict_unpickler.h (a fixed set of
// globals, no code runs); entries point into the mapping, nothing is copied.
// LibTorch-free.
//
// Accepted content: a dict (or OrderedDict) from string to CPU tensors, as
// `torch.save(model.state_dict())` writes. Tensors must be contiguous; tied
// weights and views sharing one storage become entries whose bytes overlap.
// Everything else (other top-level objects, nested dicts, unknown globals,
// compressed records, big-endian archives, truncated or inconsistent zip
// structures) is an InvalidArgument error naming the file and, where there
// is one, the tensor or record.
//
// The file is mapped through `file_system`.
//
// Thread safety: independent calls may run concurrently.
absl::StatusOr<std::unique_ptr<Checkpoint>> OpenTorchZip(
    const std::string& path,
    platform::FileSystem* file_system = platform::FileSystem::Default());

}  // namespace castserve::casting

#endif  // CASTSERVE_CASTING_FORMATS_TORCH_ZIP_READER_H_
